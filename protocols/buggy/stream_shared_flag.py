"""Two host streams of each rank put a buffer into the next rank and signal one shared word; each
stream then waits for that word before reading the buffer it was sent. The word is set by whichever
put lands first, so a stream can pass its wait while its own buffer is still in flight: the read
races with the put (the class of bug of one flag, or one communicator, used from two streams).

The fixed twin, protocols/streams_flag_per_stream.py, gives each stream a word of its own.
"""

import clockworks_dist as cw

EXPECT = {"kind": "data_race", "ranks": 2}

COUNT = 2


@cw.schedule(expect=cw.custom(lambda world: [cw.equals((q + 1) % world, name + "_out", 0, COUNT, (q, name, 0))
                                             for q in range(world) for name in ("a", "b")], label="shift a, b"),
             ranks=(2,))
def stream_shared_flag(r):
    nxt = (r.rank + 1) % r.world
    a, b = r.symmetric("a", count=COUNT, role="input"), r.symmetric("b", count=COUNT, role="input")
    a_in, b_in = r.symmetric("a_in", count=COUNT, role="scratch"), r.symmetric("b_in", count=COUNT, role="scratch")
    a_out, b_out = r.buffer("a_out", count=COUNT, role="output"), r.buffer("b_out", count=COUNT, role="output")
    ready = r.signal("ready")
    with r.thread("s0", kind="stream"):
        r.put_signal(nxt, a_in, a, ready, 1)
        r.wait_until(ready, "ge", 1)
        r.copy(a_out, a_in)
    with r.thread("s1", kind="stream"):
        r.put_signal(nxt, b_in, b, ready, 1)
        r.wait_until(ready, "ge", 1)
        r.copy(b_out, b_in)  # BUG: the shared word may have been set by the other stream's put
