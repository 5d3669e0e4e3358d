"""A final put into scratch that nothing completes before the program exits: a warning, not an
error.

Each PE copies its result into the next PE's `mirror`, a scratch buffer, as its last step, with
no quiet or barrier_all after it. No output is read stale (the caller does not read scratch), so
this is the `unfinished_deliveries` warning: the put may still be in flight when the program
ends, and the host must not free or reuse `mirror` before it lands. Into an output buffer the same
put is an `unfinished_output` error (`put_without_quiet.py`). The fix: `r.quiet()` then
`r.barrier_all()` at the end.
"""

import clockworks_dist as cw

EXPECT = {"kind": "unfinished_deliveries", "ranks": 2}

COUNT = 2


@cw.schedule(ranks=(2,))
def scratch_put_without_quiet(r):
    nxt = (r.rank + 1) % r.world
    x = r.buffer("x", count=COUNT, role="input")
    result = r.buffer("result", count=COUNT, role="output")
    mirror = r.symmetric("mirror", count=COUNT, role="scratch")
    r.compute("solve", reads=[x], writes=[result])
    r.barrier_all()
    r.put(nxt, mirror, result)  # BUG: never completed by quiet() or barrier_all()
