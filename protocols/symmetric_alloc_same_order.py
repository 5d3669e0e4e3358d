"""Every rank allocates its symmetric buffers in one order (NVSHMEM's allocation is collective: the
k-th `nvshmem_malloc` of every PE is the same object), then puts its data into the next rank's inbox.
The twin of protocols/buggy/symmetric_alloc_order.py, whose rank 0 allocates in the other order."""

import clockworks_dist as cw

COUNT = 2


@cw.schedule(expect=cw.custom(lambda world: [cw.equals((q + 1) % world, "inbox", 0, COUNT, (q, "data", 0))
                                             for q in range(world)], label="shift data"), ranks=(2, 4, 8))
def symmetric_alloc_same_order(r):
    nxt = (r.rank + 1) % r.world
    data = r.symmetric("data", count=COUNT, role="input")
    inbox = r.symmetric("inbox", count=COUNT, role="output")
    r.put(nxt, inbox, data)
    r.barrier_all()
