"""An all-reduce whose element count differs on one rank.

The last rank reduces only the first half of the buffer (say, it computed its count from a stale
shape); the k-th collective of every member must have the same count.
"""

import clockworks_dist as cw

EXPECT = {"kind": "collective_mismatch", "ranks": 3}

COUNT = 4


@cw.schedule(expect=cw.allreduce("x"), ranks=(3,))
def collective_count_mismatch(r):
    x = r.buffer("x", count=COUNT, role="inout")
    if r.rank == r.world - 1:
        r.all_reduce(x.region(0, COUNT // 2))  # BUG: 2 elements here, 4 on the other ranks
    else:
        r.all_reduce(x)
