"""Two-shot all-reduce over NVSHMEM: a reduce-scatter by puts, then an all-gather by puts.

Shot 1: chunk p of x goes to slot [rank] of the scratch on PE p, signalled by rs[rank]; PE p sums
its chunk over all slots (in rank order: bitwise identical everywhere) into its chunk of out.
Shot 2: each PE put_signal's its reduced chunk into the same chunk of out on every other PE,
signalled by ag[rank]. Every buffer is written once, so no iteration fencing is needed."""

import clockworks_dist as cw

CHUNK = cw.size("CHUNK", 4)


@cw.schedule(expect=cw.allreduce("x", "out"), ranks=(2, 4, 8))
def nvshmem_twoshot_allreduce(r):
    n, me = r.world, r.rank
    x = r.symmetric("x", count=n * CHUNK, role="input")
    slots = r.symmetric("slots", count=n * CHUNK, role="scratch")
    out = r.symmetric("out", count=n * CHUNK, role="output")
    rs, ag = r.signal("rs", count=n), r.signal("ag", count=n)
    peers = [(me + k) % n for k in range(1, n)]
    for pe in peers:  # shot 1: reduce-scatter
        r.put_signal(pe, slots.chunk(me, n), x.chunk(pe, n), rs[me])
    for pe in peers:
        r.wait_until(rs[pe], "eq", 1)
    r.reduce(out.chunk(me, n), *[x.chunk(me, n) if q == me else slots.chunk(q, n) for q in range(n)])
    for pe in peers:  # shot 2: all-gather (a blocking put reads out's chunk when issued)
        r.put_signal(pe, out.chunk(me, n), out.chunk(me, n), ag[me])
    for pe in peers:
        r.wait_until(ag[pe], "eq", 1)
