"""All-reduce by direct exchange that adds the rank's own contribution twice.

Each rank sends x to every peer and receives every peer's x into its slot, copies its own x into
its own slot, then sums in place: x = x + slot[0] + ... + slot[n-1]. But slot[me] already holds
x, so every rank counts itself twice (x[.] on rank 1 = in1 + in0 + in1 + in2). The fix: sum the
slots only, into x.
"""

import clockworks_dist as cw

EXPECT = {"kind": "wrong_result", "ranks": 3}

COUNT = 1


@cw.schedule(expect=cw.allreduce("x"), ranks=(3,))
def double_counted_rank(r):
    n, me = r.world, r.rank
    x = r.buffer("x", count=COUNT, role="inout")
    slots = r.buffer("slots", count=n * COUNT, role="scratch")
    with r.group():
        for p in range(n):
            if p != me:
                r.send(p, x)
                r.recv(p, slots.chunk(p, n))
    r.copy(slots.chunk(me, n), x)
    r.reduce(x, x, *[slots.chunk(p, n) for p in range(n)])  # BUG: x is also in slot[me]
