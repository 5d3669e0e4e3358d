"""Two collectives of one communicator posted in a different order inside a group.

A group defers the posting, it does not reorder it: NCCL still matches the k-th collective of a
communicator on every member, counted in the order each rank posts them. The last rank posts the
all-gather before the all-reduce, so its first collective meets the other ranks' all-reduce.
"""

import clockworks_dist as cw

EXPECT = {"kind": "collective_mismatch", "ranks": 3}

COUNT = 4


@cw.schedule(expect=cw.allreduce("x"), ranks=(3,))
def grouped_collective_order_swapped(r):
    x = r.buffer("x", count=COUNT, role="inout")
    part = r.buffer("part", count=COUNT, role="input")
    whole = r.buffer("whole", count=COUNT * r.world, role="output")
    with r.group():
        if r.rank == r.world - 1:
            r.all_gather(part, whole)  # BUG: posted first here, second on the other ranks
            r.all_reduce(x)
        else:
            r.all_reduce(x)
            r.all_gather(part, whole)
