"""Two symmetric buffers that rank 0 allocates in one order and the other ranks in the other.

NVSHMEM's symmetric allocation is collective: the k-th `nvshmem_malloc` of every PE returns the same
object. With the orders swapped, PEs disagree on which buffer is which (or hang, when the sizes
differ), and the put lands in the buffer the peer calls by the other name. The fixed twin,
protocols/symmetric_alloc_same_order.py, allocates in one order on every rank.
"""

import clockworks_dist as cw

EXPECT = {"kind": "collective_mismatch", "ranks": 2}

COUNT = 2


@cw.schedule(expect=cw.custom(lambda world: [cw.equals((q + 1) % world, "inbox", 0, COUNT, (q, "data", 0))
                                             for q in range(world)], label="shift data"), ranks=(2,))
def symmetric_alloc_order(r):
    nxt = (r.rank + 1) % r.world
    if r.rank == 0:
        data = r.symmetric("data", count=COUNT, role="input")  # BUG: rank 0 allocates data first, the others inbox
        inbox = r.symmetric("inbox", count=COUNT, role="output")
    else:
        inbox = r.symmetric("inbox", count=COUNT, role="output")
        data = r.symmetric("data", count=COUNT, role="input")
    r.put(nxt, inbox, data)
    r.barrier_all()
