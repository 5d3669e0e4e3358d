"""Double-buffering gone wrong: the source of a non-blocking put is overwritten before quiet().

Each step computes a tile into `stage` and pushes it to the peer with put(nbi=True), which reads
its source when the delivery happens, not when the put is issued. The next step recomputes
`stage` while the previous put may still be reading it. The fix: `r.quiet()` before reusing
`stage`, or two staging buffers alternating, with a quiet before each is reused.
"""

import clockworks_dist as cw

EXPECT = {"kind": "data_race", "ranks": 2}

TILE = 1
STEPS = 2


@cw.schedule(ranks=(2,))
def put_nbi_source_reuse(r):
    peer = (r.rank + 1) % r.world
    x = r.buffer("x", count=STEPS * TILE, role="input")
    stage = r.buffer("stage", count=TILE, role="scratch")
    inbox = r.symmetric("inbox", count=STEPS * TILE, role="output")
    for step in range(STEPS):
        # step 2 rewrites `stage` while the nbi put of step 1 may not have read it yet
        r.compute("produce_tile", reads=[x.chunk(step, STEPS)], writes=[stage])  # BUG
        r.put(peer, inbox.chunk(step, STEPS), stage, nbi=True)
    r.quiet()
    r.barrier_all()
