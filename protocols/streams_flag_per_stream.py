"""Two host streams of each rank each put a buffer into the next rank with a signal, as two NCCL or
NVSHMEM streams that overlap communication do; the next rank waits for each buffer's own signal
word before it reads it.

protocols/buggy/stream_shared_flag.py gives both streams one word: the wait for the second buffer
then returns on the first buffer's signal.
"""

import clockworks_dist as cw

COUNT = 2


@cw.schedule(expect=cw.custom(lambda world: [cw.equals((q + 1) % world, name + "_out", 0, COUNT, (q, name, 0))
                                             for q in range(world) for name in ("a", "b")], label="shift a, b"),
             ranks=(2, 4, 8))
def streams_flag_per_stream(r):
    nxt, prev = (r.rank + 1) % r.world, (r.rank - 1) % r.world
    del prev
    a, b = r.symmetric("a", count=COUNT, role="input"), r.symmetric("b", count=COUNT, role="input")
    a_in, b_in = r.symmetric("a_in", count=COUNT, role="scratch"), r.symmetric("b_in", count=COUNT, role="scratch")
    a_out, b_out = r.buffer("a_out", count=COUNT, role="output"), r.buffer("b_out", count=COUNT, role="output")
    ready = r.signal("ready", count=2)
    with r.thread("s0", kind="stream"):
        r.put_signal(nxt, a_in, a, ready[0], 1)
        r.wait_until(ready[0], "ge", 1)
        r.copy(a_out, a_in)
    with r.thread("s1", kind="stream"):
        r.put_signal(nxt, b_in, b, ready[1], 1)
        r.wait_until(ready[1], "ge", 1)
        r.copy(b_out, b_in)
