"""A final put into an output that nothing completes before the program exits.

Each PE mirrors its result into the next PE's `mirror`, an output, as its last step. No quiet, no
barrier_all follows, so the target can finish its program, and the caller read `mirror`, while
the put is still in flight: an `unfinished_output` error. Into scratch the same put is only a
warning (`scratch_put_without_quiet.py`). The fix: `r.quiet()` then `r.barrier_all()` at the end.
"""

import clockworks_dist as cw

EXPECT = {"kind": "unfinished_output", "ranks": 2}

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
