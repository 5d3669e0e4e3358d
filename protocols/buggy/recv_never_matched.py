"""Rank 0 gathers one buffer from every peer, then waits for an acknowledgement nobody sends.

The gather is fine; the extra recv of an "ack" from the last rank is never matched: that rank has
already finished its program. (A recv that can never be matched is a send/recv mismatch.)
"""

import clockworks_dist as cw

EXPECT = {"kind": "send_recv_mismatch", "ranks": 3}

COUNT = 2


@cw.schedule(ranks=(3,))
def recv_never_matched(r):
    n = r.world
    x = r.buffer("x", count=COUNT, role="input")
    if r.rank == 0:
        gathered = r.buffer("gathered", count=n * COUNT, role="output")
        ack = r.buffer("ack", count=1, role="scratch")
        r.copy(gathered.chunk(0, n), x)
        for p in range(1, n):
            r.recv(p, gathered.chunk(p, n))
        r.recv(n - 1, ack)  # BUG: no rank sends this acknowledgement
    else:
        r.send(0, x)
