"""Exchange over NVSHMEM closed by sync_all where barrier_all is needed.

Every PE puts its block into its peer's inbox and then meets the others in sync_all. sync_all
does not complete outstanding deliveries (barrier_all is quiet + sync), so the put may still be
in flight when the peer reads its inbox.
"""

import clockworks_dist as cw

EXPECT = {"kind": "data_race", "ranks": 2}

COUNT = 2


def _swap(world):
    return [cw.equals(q, "out", 0, COUNT, ((q - 1) % world, "x", 0)) for q in range(world)]


@cw.schedule(expect=cw.custom(_swap, label="swap"), ranks=(2,))
def sync_all_not_barrier(r):
    peer = (r.rank + 1) % r.world
    x = r.buffer("x", count=COUNT, role="input")
    out = r.buffer("out", count=COUNT, role="output")
    inbox = r.symmetric("inbox", count=COUNT, role="scratch")
    r.put(peer, inbox, x)  # BUG: still in flight after sync_all (use barrier_all)
    r.sync_all()
    r.copy(out, inbox)
