"""Slots handed out by a shared ticket counter: who gets which slot depends on timing.

Every PE takes a ticket from PE 0's counter with fetch_add and records it as its slot number.
Fetching atomics do not race, but the tickets come out in whatever order the PEs arrive, so the
`slot` outputs differ from run to run. The fix, when the assignment must be reproducible: derive
the slot from the rank.
"""

import clockworks_dist as cw

EXPECT = {"kind": "nondeterministic_result", "ranks": 2}


@cw.schedule(ranks=(2,))
def ticket_order_nondeterministic(r):
    counter = r.symmetric("counter", count=1, dtype="int64", role="scratch")
    slot = r.buffer("slot", count=1, dtype="int64", role="output")
    r.barrier_all()
    r.fetch_add(0, counter.element(0), 1, into=slot)  # BUG: ticket order depends on the interleaving
    r.barrier_all()
