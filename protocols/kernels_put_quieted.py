"""Two kernels on one stream of each rank: kernel `push` puts x into the next rank, quiets and ends;
kernel `notify`, launched after it on the same stream, tells the next rank the data is there, and the
next rank's `notify` reads it. A kernel's end does not complete its NVSHMEM puts, so `push` quiets.

protocols/buggy/kernels_put_not_quieted.py leaves the quiet out.
"""

import clockworks_dist as cw

COUNT = 2


@cw.schedule(expect=cw.custom(lambda world: [cw.equals((q + 1) % world, "out", 0, COUNT, (q, "x", 0))
                                             for q in range(world)], label="shift x"), ranks=(2, 4, 8))
def kernels_put_quieted(r):
    nxt = (r.rank + 1) % r.world
    x = r.symmetric("x", count=COUNT, role="input")
    landed = r.symmetric("landed", count=COUNT, role="scratch")
    out = r.buffer("out", count=COUNT, role="output")
    here = r.signal("here")
    with r.kernel("push", stream="s0"):
        with r.block("b0"):
            r.put(nxt, landed, x)
            r.quiet()  # complete before the kernel ends: its end would not
    with r.kernel("notify", stream="s0"):
        with r.block("b0"):
            r.signal_op(nxt, here, 1)
            r.wait_until(here, "ge", 1)
            r.copy(out, landed)
