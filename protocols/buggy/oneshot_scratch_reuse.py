"""NVSHMEM one-shot all-reduce, run twice over the same scratch slots without a barrier between.

Each PE puts its chunk into slot `me` of every peer (put_signal, signal = iteration number), waits
for every peer's signal, then sums the slots. Iteration 2 reuses the slots, but nothing tells a PE
that its peers have finished reading iteration 1: a fast PE's iteration-2 put can land in a slot
that a slow peer is still summing. The fix: `r.barrier_all()` (or a per-slot "free" signal) before
the slots are written again.
"""

import clockworks_dist as cw

EXPECT = {"kind": "data_race", "ranks": 2}

CHUNK = 1
ITERS = 2


@cw.schedule(expect=cw.allreduce("x", dst="out"), ranks=(2,))
def oneshot_scratch_reuse(r):
    n, me = r.world, r.rank
    x = r.buffer("x", count=ITERS * CHUNK, role="input")
    out = r.buffer("out", count=ITERS * CHUNK, role="output")
    slots = r.symmetric("slots", count=n * CHUNK, role="scratch")
    ready = r.signal("ready", n)  # ready[p]: iteration whose data from PE p is in slot p
    for it in range(ITERS):
        for p in range(n):
            if p != me:
                # iteration 2 writes slot `me` on p while p may still be summing iteration 1
                r.put_signal(p, slots.chunk(me, n), x.chunk(it, ITERS), ready[me], value=it + 1)  # BUG
        r.quiet()  # our puts have landed; says nothing about the peers' reads
        for p in range(n):
            if p != me:
                r.wait_until(ready[p], "ge", it + 1)
        terms = [x.chunk(it, ITERS) if p == me else slots.chunk(p, n) for p in range(n)]
        r.reduce(out.chunk(it, ITERS), *terms)
    r.barrier_all()
