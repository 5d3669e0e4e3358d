"""One SIGNAL_ADD counter shared by successive iterations (the pattern of NVIDIA/nvshmem#84).

Each iteration, every PE put_signals its chunk into slot `me` of every peer with op="add" on one
counter, and waits until the counter reaches (n-1)*(it+1). Deliveries are unordered, and a
threshold on a shared counter does not say *whose* data arrived: a fast peer A that already
finished iteration 1 can deliver its iteration-2 put_signal to B before a slow peer C's iteration-1
data reaches B. B's counter then reaches n-1 with A's two updates, and B sums iteration 1 from a
slot that A has overwritten with iteration-2 data and a slot that C has not written yet.
The fix: one signal word per source PE (and per iteration, or a barrier before reuse).
"""

import clockworks_dist as cw

EXPECT = {"kind": "wrong_result", "ranks": 3}

CHUNK = 1
ITERS = 2


@cw.schedule(expect=cw.allreduce("x", dst="out"), ranks=(3,))
def signal_add_reordered(r):
    n, me = r.world, r.rank
    x = r.buffer("x", count=ITERS * CHUNK, role="input")
    out = r.buffer("out", count=ITERS * CHUNK, role="output")
    slots = r.symmetric("slots", count=n * CHUNK, role="scratch")
    arrived = r.signal("arrived")  # one counter for every source and every iteration
    for it in range(ITERS):
        for p in range(n):
            if p != me:
                r.put_signal(p, slots.chunk(me, n), x.chunk(it, ITERS), arrived, value=1, op="add")
        r.wait_until(arrived, "ge", (n - 1) * (it + 1))  # cannot tell whose update arrived
        terms = [x.chunk(it, ITERS) if p == me else slots.chunk(p, n) for p in range(n)]
        r.reduce(out.chunk(it, ITERS), *terms)  # BUG: sums slots that may hold the wrong iteration
    r.barrier_all()
