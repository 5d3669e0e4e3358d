"""A send and its recv that agree on the element count but not on the dtype.

Rank 0 sends float32 activations; rank 1 was switched to bfloat16 and receives into a bfloat16
buffer of the same count. NCCL would reinterpret the bytes (and move half as many).
"""

import clockworks_dist as cw

EXPECT = {"kind": "send_recv_mismatch", "ranks": 2}

COUNT = 4


@cw.schedule(ranks=(2,))
def sendrecv_dtype_mismatch(r):
    if r.rank == 0:
        act = r.buffer("act", count=COUNT, dtype="float32", role="input")
        r.send(1, act)
    else:
        act = r.buffer("act", count=COUNT, dtype="bfloat16", role="output")
        r.recv(0, act)  # BUG: bfloat16 here, float32 on the sender
