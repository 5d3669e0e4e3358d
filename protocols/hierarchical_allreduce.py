"""Hierarchical all-reduce with NCCL collectives: reduce-scatter inside the node, all-reduce of
each shard across nodes (one rail per local rank), all-gather inside the node."""

import clockworks_dist as cw

CHUNK = cw.size("CHUNK", 4)


@cw.schedule(expect=cw.allreduce("x"), ranks=(2, 4, 8), ranks_per_node=2)
def hierarchical_allreduce(r):
    local = r.ranks_per_node
    x = r.buffer("x", count=local * CHUNK, role="inout")
    shard = r.buffer("shard", count=CHUNK, role="scratch")
    intra, rail = r.node_comm(), r.rail_comm()
    r.reduce_scatter(x, shard, comm=intra)  # shard = node sum of chunk local_rank
    r.all_reduce(shard, comm=rail)           # only 1/local of the data crosses the network
    r.all_gather(shard, x, comm=intra)
