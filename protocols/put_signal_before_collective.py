"""Rank 0 scatters one part of its input to every rank, then every rank all-reduces what it got.

Each part goes with `put_signal` (the data, then the signal word `arrived` set to 1), and every
other rank waits for its word before it calls the all-reduce: its source has landed before its
kernel can read it. A collective member reads its source from the moment it arrives (NCCL's
kernel pushes its first chunks to the peers before they call it), so a member must not arrive
while its source may still change. The twin, which quiets on rank 0 only:
protocols/buggy/put_into_collective_source.py.
"""

import clockworks_dist as cw

COUNT = 2


def _expect(world):
    return [cw.equals(q, "out", 0, COUNT, *((0, "parts", k * COUNT) for k in range(world))) for q in range(world)]


@cw.schedule(expect=cw.custom(_expect, label="the sum of rank 0's parts"), ranks=(2, 4, 8))
def put_signal_before_collective(r):
    parts = r.buffer("parts", count=r.world * COUNT, role="input")
    x = r.symmetric("x", count=COUNT, role="scratch")
    out = r.buffer("out", count=COUNT, role="output")
    arrived = r.signal("arrived")
    if r.rank == 0:
        r.copy(x, parts.chunk(0, r.world))
        for q in range(1, r.world):
            r.put_signal(q, x, parts.chunk(q, r.world), arrived, 1)
    else:
        r.wait_until(arrived, "ge", 1)  # this rank's part has landed
    r.all_reduce(x, out)
