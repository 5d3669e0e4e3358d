"""Gather to PE 0 over NVSHMEM with an arrival counter and an off-by-one threshold.

Every other PE puts its block into its slot on PE 0 with put_signal(op="add"), so the counter
ends at n - 1. PE 0 waits for the counter to reach n: it never does, and PE 0 waits forever while
the others wait for it in barrier_all.
"""

import clockworks_dist as cw

EXPECT = {"kind": "deadlock", "ranks": 4}

COUNT = 1


def _gather(world):
    return [cw.equals(0, "gathered", q * COUNT, (q + 1) * COUNT, (q, "x", 0)) for q in range(world)]


@cw.schedule(expect=cw.custom(_gather, label="gather to 0"), ranks=(4,))
def wait_threshold_off_by_one(r):
    n = r.world
    x = r.buffer("x", count=COUNT, role="input")
    gathered = r.buffer("gathered", count=n * COUNT, role="output")
    slots = r.symmetric("slots", count=n * COUNT, role="scratch")
    arrived = r.signal("arrived")
    if r.rank == 0:
        r.wait_until(arrived, "ge", n)  # BUG: only n - 1 peers signal
        r.copy(gathered, slots)
        r.copy(gathered.chunk(0, n), x)
    else:
        r.put_signal(0, slots.chunk(r.rank, n), x, arrived, value=1, op="add")
    r.barrier_all()
