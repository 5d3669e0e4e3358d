"""An all-reduce with a different reduction operator on one rank.

Rank 2 reduces its gradient-norm partial with "max", the others with "sum": the k-th collective
of each member must use the same reduction.
"""

import clockworks_dist as cw

EXPECT = {"kind": "collective_mismatch", "ranks": 3}

COUNT = 1


@cw.schedule(expect=cw.allreduce("norm"), ranks=(3,))
def collective_op_mismatch(r):
    norm = r.buffer("norm", count=COUNT, role="inout")
    if r.rank == 2:
        r.all_reduce(norm, op="max")  # BUG: "max" here, "sum" on the other ranks
    else:
        r.all_reduce(norm, op="sum")
