"""An all-gather over NVSHMEM that waits for every peer before it ends: the fixed twin of
`protocols/buggy/allgather_dropped_final_wait.py`.

Each PE put_signal's its x into its slot of `out` on every other PE and copies its own, then
waits for every peer's signal. The signal of a put_signal lands after its data, so when the last
wait returns every slot of `out` holds its final value: the PE's outputs are final when its
program ends, which is when the caller reads them.
"""

import clockworks_dist as cw

CHUNK = cw.size("CHUNK", 4)


@cw.schedule(expect=cw.allgather("x", "out"), ranks=(2, 4, 8))
def allgather_waits_every_peer(r):
    n, me = r.world, r.rank
    x = r.symmetric("x", count=CHUNK, role="input")
    out = r.symmetric("out", count=n * CHUNK, role="output")
    ready = r.signal("ready", count=n)
    peers = [(me + k) % n for k in range(1, n)]
    for pe in peers:
        r.put_signal(pe, out.chunk(me, n), x, ready[me])
    r.copy(out.chunk(me, n), x)
    for pe in peers:
        r.wait_until(ready[pe], "eq", 1)
