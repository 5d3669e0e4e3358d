"""A broadcast whose root differs between ranks.

Rank 1 believes it is the root (it loaded the checkpoint itself); the others expect rank 0's
data. NCCL requires every member to pass the same root.
"""

import clockworks_dist as cw

EXPECT = {"kind": "collective_mismatch", "ranks": 3}

COUNT = 2


@cw.schedule(expect=cw.broadcast("w", root=0), ranks=(3,))
def collective_root_mismatch(r):
    w = r.buffer("w", count=COUNT, role="inout")
    if r.rank == 1:
        r.broadcast(w, root=1)  # BUG: rank 1 passes root=1, the others root=0
    else:
        r.broadcast(w, root=0)
