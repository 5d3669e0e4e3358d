"""An all-gather over NVSHMEM whose last wait was dropped (a one-line change to
`protocols/allgather_waits_every_peer.py`, its fixed twin).

Each PE put_signal's its x into its slot of `out` on every other PE, then waits for each peer's
signal. Here the loop of waits stops one peer short, so a PE can finish its program while the
put from that peer is still in flight: the final values are right once everything lands, but the
caller reads `out` when the PE's program ends, and on a GPU the kernel has returned by then. The
same bug, seeded into published MSCCL++ programs, was called verified with a warning before
outputs had to be final when their rank finishes. The fix: wait for every peer.
"""

import clockworks_dist as cw

EXPECT = {"kind": "unfinished_output", "ranks": 3}

CHUNK = 2


@cw.schedule(expect=cw.allgather("x", "out"), ranks=(3,))
def allgather_dropped_final_wait(r):
    n, me = r.world, r.rank
    x = r.symmetric("x", count=CHUNK, role="input")
    out = r.symmetric("out", count=n * CHUNK, role="output")
    ready = r.signal("ready", count=n)
    peers = [(me + k) % n for k in range(1, n)]
    for pe in peers:
        r.put_signal(pe, out.chunk(me, n), x, ready[me])  # BUG: the last peer never waits for this one
    r.copy(out.chunk(me, n), x)
    for pe in peers[:-1]:  # should be every peer
        r.wait_until(ready[pe], "eq", 1)
