"""All-reduce by direct exchange where each rank sums in its own order.

Every rank gathers all contributions, then sums them starting with its own and going around the
ring: rank 0 computes (in0 + in1) + in2, rank 1 computes (in1 + in2) + in0. The multiset is right
on every rank, so the postcondition holds, but floating-point addition is not associative: the
ranks can end up with results that differ in the last bits. The fix: sum in rank order everywhere.
"""

import clockworks_dist as cw

EXPECT = {"kind": "not_bitwise_reproducible", "ranks": 3}

COUNT = 1


@cw.schedule(expect=cw.allreduce("x"), ranks=(3,))
def reduction_order_differs(r):
    n, me = r.world, r.rank
    x = r.buffer("x", count=COUNT, role="inout")
    slots = r.buffer("slots", count=n * COUNT, role="scratch")
    with r.group():
        for p in range(n):
            if p != me:
                r.send(p, x)
                r.recv(p, slots.chunk(p, n))
    others = [slots.chunk((me + k) % n, n) for k in range(1, n)]
    r.reduce(x, x, *others)  # BUG: association order depends on the rank
