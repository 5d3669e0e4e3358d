"""OpenSHMEM-style point-to-point synchronisation on an element of a data array: each PE puts its x
into the next PE's `inbox`, fences, and atomically sets its own element of the next PE's `flag`
array; each PE waits on the element its previous PE sets (`shmem_wait_until(&flag[prev], ...)`), then
copies the inbox out. The fixed twin of `protocols/buggy/flag_in_data_array_unfenced.py`.

`flag` is a uint64 symmetric scratch buffer touched only by the atomics and the wait, so the wait
reads it as signal words (docs/dsl.md, "Waits on buffer elements"). The fence orders the put's
delivery before the atomic's on the same PE: when the wait returns, the inbox holds the data.
"""

import clockworks_dist as cw

COUNT = 2


@cw.schedule(expect=cw.custom(lambda world: [cw.equals((q + 1) % world, "out", 0, COUNT, (q, "x", 0))
                                             for q in range(world)], label="shift x"), ranks=(2, 4, 8))
def flag_in_data_array(r):
    nxt, prev = (r.rank + 1) % r.world, (r.rank - 1) % r.world
    x = r.symmetric("x", count=COUNT, role="input")
    inbox = r.symmetric("inbox", count=COUNT, role="scratch")
    out = r.buffer("out", count=COUNT, role="output")
    flag = r.symmetric("flag", count=r.world, dtype="uint64", role="scratch")
    r.put(nxt, inbox, x)
    r.fence()  # the put lands before the flag's update on the same PE
    r.atomic_set(nxt, flag[r.rank], 1)
    r.wait_until(flag[prev], "eq", 1)
    r.copy(out, inbox)
