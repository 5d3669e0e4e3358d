"""A family of reduce-scatters over NVSHMEM: direct or ring (`ALGO`), one file, two schedules.

direct: each PE put_signal's chunk p of x into slot [rank] of the scratch on PE p, waits for every
peer's signal and sums its own chunk with every slot in rank order (bitwise identical wherever it
runs). One NVLink crossing, n - 1 puts per PE at once.
ring: n - 1 steps; at each a PE sends its running partial sum of one chunk to its right neighbour,
which adds its own contribution on arrival; the chunk a PE finishes last is its own. n - 1
crossings, one put per step. On 2 ranks both are one put each way (the ring adds in the other
order). Both verified at 2, 4 and 8 ranks:

    clockworks check protocols/nvshmem_reduce_scatter_family.py --param ALGO=ring
    clockworks tune protocols/nvshmem_reduce_scatter_family.py -t h200x2-nv18 --np 2 --sizes 8KiB,1MiB --dry
"""

import clockworks_dist as cw

CHUNK = cw.size("CHUNK", 4)
ALGO = cw.choice("ALGO", ["direct", "ring"])


@cw.schedule(expect=cw.reduce_scatter("x", "out"), ranks=(2, 4, 8))
def nvshmem_reduce_scatter_family(r):
    n, me = r.world, r.rank
    x = r.symmetric("x", count=n * CHUNK, role="input")
    out = r.symmetric("out", count=CHUNK, role="output")
    if ALGO == "direct":
        slots = r.symmetric("slots", count=n * CHUNK, role="scratch")
        ready = r.signal("ready", count=n)
        peers = [(me + k) % n for k in range(1, n)]  # staggered, so PEs do not all hit PE 0
        for pe in peers:
            r.put_signal(pe, slots.chunk(me, n), x.chunk(pe, n), ready[me])
        for pe in peers:
            r.wait_until(ready[pe], "eq", 1)
        r.reduce(out, *[x.chunk(me, n) if q == me else slots.chunk(q, n) for q in range(n)])
        return
    right = (me + 1) % n
    inbox = r.symmetric("inbox", count=(n - 1) * CHUNK, role="scratch")  # one slot per step: no reuse
    part = r.symmetric("part", count=(n - 1) * CHUNK, role="scratch")  # the partial sum sent at each step
    got = r.signal("got", count=n)
    for step in range(n - 1):
        c = (me - step - 1) % n  # the chunk whose partial leaves now; at the last step, right's own
        if step == 0:
            src = x.chunk(c, n)
        else:  # what arrived at the step before, plus this rank's own contribution
            r.wait_until(got[step - 1], "eq", 1)
            r.reduce(part.chunk(step, n - 1), inbox.chunk(step - 1, n - 1), x.chunk(c, n))
            src = part.chunk(step, n - 1)
        r.put_signal(right, inbox.chunk(step, n - 1), src, got[step])
    r.wait_until(got[n - 2], "eq", 1)
    r.reduce(out, inbox.chunk(n - 2, n - 1), x.chunk(me, n))
