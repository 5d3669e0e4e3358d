"""Producer/consumer over NVSHMEM: a data put, then a separate signal, with no fence between.

Deliveries from one PE are unordered, so the signal can arrive before the data: the consumer
passes wait_until and copies the buffer while the put is still in flight. The fix is `r.fence()`
between the put and the signal_op, or one `put_signal`.
"""

import clockworks_dist as cw

EXPECT = {"kind": "data_race", "ranks": 2}

COUNT = 2


@cw.schedule(expect=cw.custom(lambda world: [cw.equals(1, "out", 0, COUNT, (0, "x", 0))], label="send x"),
             ranks=(2,))
def signal_without_fence(r):
    x = r.buffer("x", count=COUNT, role="input")
    out = r.buffer("out", count=COUNT, role="output")
    box = r.symmetric("box", count=COUNT, role="scratch")
    full = r.signal("full")
    if r.rank == 0:
        r.put(1, box, x)  # BUG: no fence before the signal below; the data may arrive after it
        r.signal_op(1, full, 1, op="set")
        r.quiet()
    else:
        r.wait_until(full, "eq", 1)
        r.copy(out, box)
