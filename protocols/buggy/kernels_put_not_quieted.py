"""Two kernels on one stream of each rank: kernel `push` puts x into the next rank and ends; kernel
`notify`, launched after it on the same stream, tells the next rank the data is there, and the next
rank's `notify` reads it. But a kernel's end does not complete its NVSHMEM puts (only a quiet, or
nvshmemx_quiet_on_stream, does): the put can still be in flight when the reader reads.

The fixed twin, protocols/kernels_put_quieted.py, quiets in `push` before it ends.
"""

import clockworks_dist as cw

EXPECT = {"kind": "data_race", "ranks": 2}

COUNT = 2


@cw.schedule(expect=cw.custom(lambda world: [cw.equals((q + 1) % world, "out", 0, COUNT, (q, "x", 0))
                                             for q in range(world)], label="shift x"), ranks=(2,))
def kernels_put_not_quieted(r):
    nxt = (r.rank + 1) % r.world
    x = r.symmetric("x", count=COUNT, role="input")
    landed = r.symmetric("landed", count=COUNT, role="scratch")
    out = r.buffer("out", count=COUNT, role="output")
    here = r.signal("here")
    with r.kernel("push", stream="s0"):
        with r.block("b0"):
            r.put(nxt, landed, x)  # BUG: the kernel's end does not complete this put
    with r.kernel("notify", stream="s0"):
        with r.block("b0"):
            r.signal_op(nxt, here, 1)
            r.wait_until(here, "ge", 1)
            r.copy(out, landed)
