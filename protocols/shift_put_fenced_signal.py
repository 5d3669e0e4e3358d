"""A put into the next PE's output, a fence, then a signal the next PE waits for: the fixed twin
of `protocols/buggy/final_signal_unfenced.py`.

The fence orders the put's delivery before the signal's on the same PE, so when a PE's wait
returns its `out` holds the previous PE's x: its output is final when its program ends.
"""

import clockworks_dist as cw

COUNT = 2


@cw.schedule(expect=cw.custom(lambda world: [cw.equals((q + 1) % world, "out", 0, COUNT, (q, "x", 0))
                                             for q in range(world)], label="shift x"), ranks=(2, 4, 8))
def shift_put_fenced_signal(r):
    nxt = (r.rank + 1) % r.world
    x = r.symmetric("x", count=COUNT, role="input")
    out = r.symmetric("out", count=COUNT, role="output")
    ready = r.signal("ready")
    r.put(nxt, out, x)
    r.fence()  # the put lands before the signal: the waiter's output is final when it returns
    r.signal_op(nxt, ready, 1, op="set")
    r.wait_until(ready, "eq", 1)
