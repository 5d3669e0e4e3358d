"""A put into the next PE's output, then a signal with no fence between them.

Each PE puts its x into `out` on the next PE and then sets that PE's `ready` flag; each PE
waits for its own flag and ends. Deliveries from one PE are unordered, so the flag can land
before the data: the PE passes its wait and finishes, and the caller reads `out` while the put is
still in flight. The fix: `r.fence()` between the put and the signal, or one `put_signal`
(`protocols/shift_put_fenced_signal.py` is the fixed twin).
"""

import clockworks_dist as cw

EXPECT = {"kind": "unfinished_output", "ranks": 2}

COUNT = 2


@cw.schedule(expect=cw.custom(lambda world: [cw.equals((q + 1) % world, "out", 0, COUNT, (q, "x", 0))
                                             for q in range(world)], label="shift x"), ranks=(2,))
def final_signal_unfenced(r):
    nxt = (r.rank + 1) % r.world
    x = r.symmetric("x", count=COUNT, role="input")
    out = r.symmetric("out", count=COUNT, role="output")
    ready = r.signal("ready")
    r.put(nxt, out, x)  # BUG: no fence before the signal below; the data may land after it
    r.signal_op(nxt, ready, 1, op="set")
    r.wait_until(ready, "eq", 1)
