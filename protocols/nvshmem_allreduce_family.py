"""A family of all-reduces over NVSHMEM: one-shot or two-shot (`ALGO`), one file, two schedules.

oneshot: each PE put_signal's its x into slot [rank] of the scratch on every other PE, waits for
every peer's signal and sums all slots in rank order (bitwise identical everywhere); one NVLink
crossing, n - 1 full-size puts per PE. twoshot: a reduce-scatter by puts (chunk p of x to PE p),
each PE sums its chunk, then an all-gather by puts of the reduced chunks; two crossings, but each
PE sends only 2 (n - 1) / n of its buffer. Every buffer is written once, so no iteration fencing is
needed. Both variants are verified at 2, 4 and 8 ranks:

    clockworks check protocols/nvshmem_allreduce_family.py --param ALGO=twoshot
    clockworks tune protocols/nvshmem_allreduce_family.py -t h200x2-nv18 --np 2 --sizes 8KiB,1MiB --dry
"""

import clockworks_dist as cw

CHUNK = cw.size("CHUNK", 4)
ALGO = cw.choice("ALGO", ["oneshot", "twoshot"])


@cw.schedule(expect=cw.allreduce("x", "out"), ranks=(2, 4, 8))
def nvshmem_allreduce_family(r):
    n, me = r.world, r.rank
    x = r.symmetric("x", count=n * CHUNK, role="input")
    out = r.symmetric("out", count=n * CHUNK, role="output")
    peers = [(me + k) % n for k in range(1, n)]  # staggered, so PEs do not all hit PE 0
    if ALGO == "oneshot":
        slots = r.symmetric("slots", count=n * n * CHUNK, role="scratch")
        ready = r.signal("ready", count=n)
        for pe in peers:
            r.put_signal(pe, slots.chunk(me, n), x, ready[me])
        for pe in peers:
            r.wait_until(ready[pe], "eq", 1)
        r.reduce(out, *[x if q == me else slots.chunk(q, n) for q in range(n)])
        return
    slots = r.symmetric("slots", count=n * CHUNK, role="scratch")
    rs, ag = r.signal("rs", count=n), r.signal("ag", count=n)
    for pe in peers:  # shot 1: reduce-scatter
        r.put_signal(pe, slots.chunk(me, n), x.chunk(pe, n), rs[me])
    for pe in peers:
        r.wait_until(rs[pe], "eq", 1)
    r.reduce(out.chunk(me, n), *[x.chunk(me, n) if q == me else slots.chunk(q, n) for q in range(n)])
    for pe in peers:  # shot 2: all-gather (a blocking put reads out's chunk when issued)
        r.put_signal(pe, out.chunk(me, n), out.chunk(me, n), ag[me])
    for pe in peers:
        r.wait_until(ag[pe], "eq", 1)
