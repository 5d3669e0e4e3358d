"""Two host streams of each rank: stream s0 fills a staging buffer and records an event; stream s1
waits for the event (cudaStreamWaitEvent), then puts the staged data into the next rank with a
signal, which the next rank's s1 waits for before it reads.

protocols/buggy/streams_event_wrong.py waits on the wrong event: s1 then reads the staging buffer
while s0 may still be writing it.
"""

import clockworks_dist as cw

COUNT = 2


@cw.schedule(expect=cw.custom(lambda world: [cw.equals((q + 1) % world, "out", 0, COUNT, (q, "x", 0))
                                             for q in range(world)], label="shift x"), ranks=(2, 4, 8))
def streams_event_order(r):
    nxt = (r.rank + 1) % r.world
    x = r.buffer("x", count=COUNT, role="input")
    staged = r.symmetric("staged", count=COUNT, role="scratch")
    landed = r.symmetric("landed", count=COUNT, role="scratch")
    out = r.buffer("out", count=COUNT, role="output")
    here = r.signal("here")
    staged_ev = r.event("staged_ev")
    with r.thread("s0", kind="stream"):
        r.copy(staged, x)
        r.record_event(staged_ev)
    with r.thread("s1", kind="stream"):
        r.wait_event(staged_ev)  # s1's later work starts after s0's copy
        r.put_signal(nxt, landed, staged, here, 1)
        r.wait_until(here, "ge", 1)
        r.copy(out, landed)
