"""A put into a peer's all-reduce source that the peer does not wait for.

Rank 0 scatters one part of its input to every rank with a blocking put into the symmetric `x`
(its own part by a copy), quiets, then every rank all-reduces `x` into `out`. The quiet completes
the puts for rank 0 only: the other ranks never learn that their `x` has arrived, and their
all-reduce may start before it has. NCCL's kernel on a member reads its own source as soon as it
runs: its first chunks go into the buffer slots its connections hold in the peer's memory before
the peer has called the collective, so a member does not wait for the others to arrive before it
reads. The checker counts a collective member's source read (and its own destination written)
from its arrival until it completes, so the put's delivery to rank 1 races with rank 1's
all-reduce. The fix: the target waits for its part (`put_signal` and a `wait_until`, the twin
protocols/put_signal_before_collective.py), or every rank meets after rank 0's quiet (a barrier).
"""

import clockworks_dist as cw

EXPECT = {"kind": "data_race", "ranks": 2}

COUNT = 2


def _expect(world):
    return [cw.equals(q, "out", 0, COUNT, *((0, "parts", k * COUNT) for k in range(world))) for q in range(world)]


@cw.schedule(expect=cw.custom(_expect, label="the sum of rank 0's parts"), ranks=(2, 4, 8))
def put_into_collective_source(r):
    parts = r.buffer("parts", count=r.world * COUNT, role="input")
    x = r.symmetric("x", count=COUNT, role="scratch")
    out = r.buffer("out", count=COUNT, role="output")
    if r.rank == 0:
        r.copy(x, parts.chunk(0, r.world))
        for q in range(1, r.world):
            r.put(q, x, parts.chunk(q, r.world))
        r.quiet()  # the puts have landed, but only rank 0 knows
    r.all_reduce(x, out)  # BUG: a peer's all-reduce may read x before rank 0's put lands
