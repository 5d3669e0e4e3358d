"""Two host streams of each rank: s0 fills a staging buffer and records event `staged_ev`; s1
should wait for it before it puts the staged data into the next rank, but waits on `other`, an
event s0 recorded before the copy. The put then reads the staging buffer while s0 may still be
writing it.

The fixed twin, protocols/streams_event_order.py, waits on the event recorded after the copy.
"""

import clockworks_dist as cw

EXPECT = {"kind": "data_race", "ranks": 2}

COUNT = 2


@cw.schedule(expect=cw.custom(lambda world: [cw.equals((q + 1) % world, "out", 0, COUNT, (q, "x", 0))
                                             for q in range(world)], label="shift x"), ranks=(2,))
def streams_event_wrong(r):
    nxt = (r.rank + 1) % r.world
    x = r.buffer("x", count=COUNT, role="input")
    staged = r.symmetric("staged", count=COUNT, role="scratch")
    landed = r.symmetric("landed", count=COUNT, role="scratch")
    out = r.buffer("out", count=COUNT, role="output")
    here = r.signal("here")
    staged_ev, other = r.event("staged_ev"), r.event("other")
    with r.thread("s0", kind="stream"):
        r.record_event(other)
        r.copy(staged, x)
        r.record_event(staged_ev)
    with r.thread("s1", kind="stream"):
        r.wait_event(other)  # the event recorded before the copy, not after it
        r.put_signal(nxt, landed, staged, here, 1)  # BUG: reads staged while s0 may still write it
        r.wait_until(here, "ge", 1)
        r.copy(out, landed)
