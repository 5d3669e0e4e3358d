"""A kernel block puts into the next rank and ends; a second stream of the same rank, ordered after
the kernel by an event, then tells the next rank that the data is there. A kernel's end does not
complete its NVSHMEM puts, so the block quiets before its end.

protocols/buggy/kernel_end_before_puts.py leaves the quiet out.
"""

import clockworks_dist as cw

COUNT = 2


@cw.schedule(expect=cw.custom(lambda world: [cw.equals((q + 1) % world, "out", 0, COUNT, (q, "x", 0))
                                             for q in range(world)], label="shift x"), ranks=(2, 4, 8))
def kernel_end_quiet(r):
    nxt = (r.rank + 1) % r.world
    x = r.symmetric("x", count=COUNT, role="input")
    landed = r.symmetric("landed", count=COUNT, role="scratch")
    out = r.buffer("out", count=COUNT, role="output")
    kernel_done, data_here = r.signal("kernel_done"), r.signal("data_here")
    with r.thread("kernel", kind="block"):
        r.put(nxt, landed, x)
        r.quiet()  # the put is complete before the kernel ends
        r.signal_op(r.rank, kernel_done, 1)  # the stream's event: the kernel has ended
    with r.thread("notify", kind="stream"):
        r.wait_until(kernel_done, "ge", 1)
        r.signal_op(nxt, data_here, 1)
        r.wait_until(data_here, "ge", 1)
        r.copy(out, landed)
