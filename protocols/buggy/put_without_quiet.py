"""A final put that nothing completes before the program exits.

Each PE mirrors its result into the next PE's `mirror` as its last step. No quiet, no
barrier_all follows, so the put may still be in flight when the program ends (and the host may
read or free `mirror` on the target). The fix: `r.quiet()` then `r.barrier_all()` at the end.
"""

import clockworks_dist as cw

EXPECT = {"kind": "unfinished_deliveries", "ranks": 2}

COUNT = 2


@cw.schedule(ranks=(2,))
def put_without_quiet(r):
    nxt = (r.rank + 1) % r.world
    x = r.buffer("x", count=COUNT, role="input")
    result = r.buffer("result", count=COUNT, role="output")
    mirror = r.symmetric("mirror", count=COUNT, role="output")
    r.compute("solve", reads=[x], writes=[result])
    r.barrier_all()
    r.put(nxt, mirror, result)  # BUG: never completed by quiet() or barrier_all()
