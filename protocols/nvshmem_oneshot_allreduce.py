"""One-shot all-reduce over NVSHMEM, run for two iterations on the same scratch.

Each PE put_signal's its x into slot [rank] of the symmetric scratch on every other PE; the
signal ready[rank] is set to the iteration number, so a later iteration needs no reset. Each PE
waits for every peer's signal and sums all slots, in rank order on every PE (bitwise identical
results). A sync_all between iterations keeps iteration 2's puts from overwriting slots that a
slower PE is still summing in iteration 1; no quiet is needed, since every delivery of iteration 1
was already observed by its target's wait_until."""

import clockworks_dist as cw

CHUNK = cw.size("CHUNK", 4)
ITERS = 2


@cw.schedule(expect=[cw.allreduce("x", f"out{it}") for it in range(ITERS)], ranks=(2, 4, 8))
def nvshmem_oneshot_allreduce(r):
    n = r.world
    x = r.symmetric("x", count=CHUNK, role="input")
    slots = r.symmetric("slots", count=n * CHUNK, role="scratch")
    ready = r.signal("ready", count=n)
    peers = [(r.rank + k) % n for k in range(1, n)]  # staggered, so PEs do not all hit PE 0
    for it in range(ITERS):
        out = r.buffer(f"out{it}", count=CHUNK, role="output")
        if it:
            r.sync_all()  # every PE has finished reading its slots of the last iteration
        for pe in peers:
            r.put_signal(pe, slots.chunk(r.rank, n), x, ready[r.rank], value=it + 1, op="set")
        for pe in peers:
            r.wait_until(ready[pe], "ge", it + 1)
        r.reduce(out, *[x if q == r.rank else slots.chunk(q, n) for q in range(n)])
