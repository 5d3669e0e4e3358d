"""Two collectives issued in a different order on one rank.

Rank 0 runs the all-reduce of the gradients before the all-gather of the parameters, every other
rank the reverse. The k-th collective of each rank must match in kind: the first collective is an
all_reduce on rank 0 and an all_gather everywhere else.
"""

import clockworks_dist as cw

EXPECT = {"kind": "collective_mismatch", "ranks": 3}

CHUNK = cw.size("CHUNK", 2)


@cw.schedule(expect=[cw.allreduce("grads"), cw.allgather("shard", "params")], ranks=(3,))
def collective_order_swapped(r):
    n = r.world
    grads = r.buffer("grads", count=CHUNK, role="inout")
    shard = r.buffer("shard", count=CHUNK, role="input")
    params = r.buffer("params", count=n * CHUNK, role="output")
    if r.rank == 0:
        r.all_reduce(grads)  # BUG: rank 0 reduces first, the others gather first
        r.all_gather(shard, params)
    else:
        r.all_gather(shard, params)
        r.all_reduce(grads)
