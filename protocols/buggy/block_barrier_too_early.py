"""One kernel with two blocks per rank exchanges halves of x through a shared buffer and a
grid-wide barrier, but block b1 writes its half after the barrier: block b0's read of that half then
races with the write.

The fixed twin, protocols/block_barrier_exchange.py, writes before the barrier in both blocks.
"""

import clockworks_dist as cw

EXPECT = {"kind": "data_race", "ranks": 1}

COUNT = 4


def _swapped(world):
    return [cw.equals(q, "out", half * COUNT // 2, (half + 1) * COUNT // 2, (q, "x", (1 - half) * COUNT // 2))
            for q in range(world) for half in (0, 1)]


@cw.schedule(expect=cw.custom(_swapped, label="halves swapped"), ranks=(1,))
def block_barrier_too_early(r):
    x = r.buffer("x", count=COUNT, role="input")
    shared = r.buffer("shared", count=COUNT, role="scratch")
    out = r.buffer("out", count=COUNT, role="output")
    with r.kernel("swap", stream="s0"):
        with r.block("b0"):
            r.copy(shared.chunk(0, 2), x.chunk(0, 2))
            r.thread_barrier("grid")
            r.copy(out.chunk(0, 2), shared.chunk(1, 2))
        with r.block("b1"):
            r.thread_barrier("grid")
            r.copy(shared.chunk(1, 2), x.chunk(1, 2))  # BUG: written after the barrier b0 reads it behind
            r.copy(out.chunk(1, 2), shared.chunk(0, 2))
