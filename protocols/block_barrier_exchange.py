"""One kernel with two blocks per rank: each block copies its half of x into a shared buffer, the
blocks meet at a grid-wide barrier (grid.sync()), and each then reads the half the other block wrote.
The barrier orders the local stores before it with the loads after it; no communication.

protocols/buggy/block_barrier_too_early.py has block b1 write its half after the barrier.
"""

import clockworks_dist as cw

COUNT = 4


def _swapped(world):
    return [cw.equals(q, "out", half * COUNT // 2, (half + 1) * COUNT // 2, (q, "x", (1 - half) * COUNT // 2))
            for q in range(world) for half in (0, 1)]


@cw.schedule(expect=cw.custom(_swapped, label="halves swapped"), ranks=(2, 4, 8))
def block_barrier_exchange(r):
    x = r.buffer("x", count=COUNT, role="input")
    shared = r.buffer("shared", count=COUNT, role="scratch")
    out = r.buffer("out", count=COUNT, role="output")
    with r.kernel("swap", stream="s0"):
        for b in range(2):
            with r.block(f"b{b}"):
                r.copy(shared.chunk(b, 2), x.chunk(b, 2))
                r.thread_barrier("grid")  # every block of the kernel meets
                r.copy(out.chunk(b, 2), shared.chunk(1 - b, 2))
