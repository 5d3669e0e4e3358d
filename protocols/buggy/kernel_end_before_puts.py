"""A kernel block puts into the next rank and ends; a second stream, ordered after the kernel by an
event, tells the next rank the data is there, and the next rank reads it. But a kernel's end does
not complete its NVSHMEM puts: the put can still be in flight when the reader reads.

The fixed twin, protocols/kernel_end_quiet.py, quiets in the block before it ends.
"""

import clockworks_dist as cw

EXPECT = {"kind": "data_race", "ranks": 2}

COUNT = 2


@cw.schedule(expect=cw.custom(lambda world: [cw.equals((q + 1) % world, "out", 0, COUNT, (q, "x", 0))
                                             for q in range(world)], label="shift x"), ranks=(2,))
def kernel_end_before_puts(r):
    nxt = (r.rank + 1) % r.world
    x = r.symmetric("x", count=COUNT, role="input")
    landed = r.symmetric("landed", count=COUNT, role="scratch")
    out = r.buffer("out", count=COUNT, role="output")
    kernel_done, data_here = r.signal("kernel_done"), r.signal("data_here")
    with r.thread("kernel", kind="block"):
        r.put(nxt, landed, x)  # BUG: the kernel's end below does not complete this put
        r.signal_op(r.rank, kernel_done, 1)  # the stream's event: the kernel has ended
    with r.thread("notify", kind="stream"):
        r.wait_until(kernel_done, "ge", 1)
        r.signal_op(nxt, data_here, 1)
        r.wait_until(data_here, "ge", 1)
        r.copy(out, landed)
