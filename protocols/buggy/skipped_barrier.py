"""One rank skips a barrier.

Rank 2 skips the barrier before the all-reduce (a stray `if`), so its first collective is the
all_reduce while every other rank's first collective is the barrier: the k-th collectives differ
in kind, a collective mismatch (on real hardware it hangs or corrupts the reduction).
"""

import clockworks_dist as cw

EXPECT = {"kind": "collective_mismatch", "ranks": 4}

COUNT = 2


@cw.schedule(expect=cw.allreduce("x"), ranks=(4,))
def skipped_barrier(r):
    x = r.buffer("x", count=COUNT, role="inout")
    if r.rank != 2:
        r.barrier()  # BUG: rank 2 does not call this barrier
    r.all_reduce(x)
