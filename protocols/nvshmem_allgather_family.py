"""A family of all-gathers over NVSHMEM: direct or ring (`ALGO`), one file, two schedules.

direct: each PE put_signal's its x into slot [rank] of out on every other PE and copies its own;
then waits for every peer's signal. One NVLink crossing, n - 1 puts per PE at once.
ring: each PE copies its own x into its slot, then for n - 1 steps forwards to its right neighbour
the chunk it holds newest (its own first, then what arrived from the left), each step's arrival
its own signal word. n - 1 crossings, one put per step: the classic bandwidth-optimal ring on a
ring of links. On 2 ranks both are one put each way. Both verified at 2, 4 and 8 ranks:

    clockworks check protocols/nvshmem_allgather_family.py --param ALGO=ring
    clockworks tune protocols/nvshmem_allgather_family.py -t h200x2-nv18 --np 2 --sizes 8KiB,1MiB --dry
"""

import clockworks_dist as cw

CHUNK = cw.size("CHUNK", 4)
ALGO = cw.choice("ALGO", ["direct", "ring"])


@cw.schedule(expect=cw.allgather("x", "out"), ranks=(2, 4, 8))
def nvshmem_allgather_family(r):
    n, me = r.world, r.rank
    x = r.symmetric("x", count=CHUNK, role="input")
    out = r.symmetric("out", count=n * CHUNK, role="output")
    if ALGO == "direct":
        ready = r.signal("ready", count=n)
        for pe in [(me + k) % n for k in range(1, n)]:  # staggered, so PEs do not all hit PE 0
            r.put_signal(pe, out.chunk(me, n), x, ready[me])
        r.copy(out.chunk(me, n), x)  # peers write the other slots: no conflict
        for pe in [(me + k) % n for k in range(1, n)]:
            r.wait_until(ready[pe], "eq", 1)
        return
    right = (me + 1) % n
    got = r.signal("got", count=n)  # got[s]: the chunk of step s arrived from the left
    r.copy(out.chunk(me, n), x)
    for step in range(n - 1):
        c = (me - step) % n  # held here since step - 1 (own chunk at step 0)
        r.put_signal(right, out.chunk(c, n), out.chunk(c, n), got[step])
        r.wait_until(got[step], "eq", 1)  # chunk (me - step - 1) is here: the next one to forward
