"""A one-sided read that does not wait for the producer.

PE 1 computes a block into its symmetric `block` and then raises a flag on PE 0; PE 0 is meant to
wait for the flag and then get the block, but the wait was placed after the get. The get reads
PE 1's `block` while PE 1's kernel may still be writing it.
"""

import clockworks_dist as cw

EXPECT = {"kind": "data_race", "ranks": 2}

COUNT = 2


@cw.schedule(ranks=(2,))
def get_before_signal(r):
    x = r.buffer("x", count=COUNT, role="input")
    block = r.symmetric("block", count=COUNT, role="scratch")
    ready = r.signal("ready")
    if r.rank == 1:
        r.compute("produce", reads=[x], writes=[block])
        r.signal_op(0, ready, 1, op="set")
        r.quiet()
    else:
        out = r.buffer("out", count=COUNT, role="output")
        r.get(1, out, block)  # BUG: reads PE 1's block before waiting for its flag
        r.wait_until(ready, "eq", 1)
    r.barrier_all()
