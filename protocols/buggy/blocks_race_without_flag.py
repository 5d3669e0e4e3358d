"""Two thread blocks of one GPU, one receiving into scratch and one summing the scratch into x, with
no order between them: the sum may read the scratch before the recv has written it.

The fixed twin, protocols/blocks_reduce_after_recv.py, has the summing block wait for a flag the
receiving block sets. A checker that runs a GPU's blocks in one order sees no race here; the
interleavings of the blocks show it.
"""

import clockworks_dist as cw

EXPECT = {"kind": "data_race", "ranks": 2}

CHUNK = 4


@cw.schedule(expect=cw.custom(lambda world: [cw.equals(q, "x", 0, CHUNK, (q, "x", 0), ((q - 1) % world, "x", 0))
                                             for q in range(world)], label="x + left x"), ranks=(2,))
def blocks_race_without_flag(r):
    n = r.world
    right, left = (r.rank + 1) % n, (r.rank - 1) % n
    x = r.buffer("x", count=CHUNK, role="inout")
    tmp = r.buffer("tmp", count=CHUNK, role="scratch")
    sent = r.buffer("sent", count=CHUNK, role="scratch")
    with r.thread("recv"):
        r.recv(left, tmp, slots=1)
    with r.thread("send"):
        r.copy(sent, x)
        r.send(right, sent, slots=1)
        r.reduce(x, x, tmp)  # BUG: nothing orders this read of tmp after the other block's recv
