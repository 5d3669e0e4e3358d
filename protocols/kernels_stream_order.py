"""Two kernels launched one after the other on one stream of each rank. Kernel `stage`'s two blocks
each copy half of x into a staging buffer; kernel `send` starts once both blocks have ended (stream
order), so its block reads the staged data safely and puts it into the next rank with a signal.

protocols/buggy/kernels_put_not_quieted.py relies on a kernel's end for a put: a kernel's end does
not complete its NVSHMEM puts.
"""

import clockworks_dist as cw

COUNT = 4


@cw.schedule(expect=cw.custom(lambda world: [cw.equals((q + 1) % world, "out", 0, COUNT, (q, "x", 0))
                                             for q in range(world)], label="shift x"), ranks=(2, 4, 8))
def kernels_stream_order(r):
    nxt = (r.rank + 1) % r.world
    x = r.buffer("x", count=COUNT, role="input")
    staged = r.symmetric("staged", count=COUNT, role="scratch")
    landed = r.symmetric("landed", count=COUNT, role="scratch")
    out = r.buffer("out", count=COUNT, role="output")
    here = r.signal("here")
    with r.kernel("stage", stream="s0"):
        for b in range(2):
            with r.block(f"b{b}"):
                r.copy(staged.chunk(b, 2), x.chunk(b, 2))
    with r.kernel("send", stream="s0"):  # starts after both blocks of `stage` have ended
        with r.block("b0"):
            r.put_signal(nxt, landed, staged, here, 1)
            r.wait_until(here, "ge", 1)
            r.copy(out, landed)
