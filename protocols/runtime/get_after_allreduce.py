"""Reading a peer's all-reduce output right after the all-reduce: verified, yet racy under MPI and NCCL.

Each rank all-reduces x in place, then gets its peer's x. The checker completes a collective in one
joint transition, so every member's x is written before any member's next op, and `got` holds the
sum. MPI and NCCL promise less: a collective completes on one member before another has written its
output, so the get may read the peer's old x. Under `clockworks run --backend mpi-cpu` that shows in
some runs (more with --jitter): a mismatch against the checker, whose semantics is too strong here.
The fix in the schedule: a barrier (or a signal) between the all-reduce and the get.
"""

import clockworks_dist as cw

CHUNK = cw.size("CHUNK", 64)


@cw.schedule(ranks=(2,))
def get_after_allreduce(r):
    x = r.symmetric("x", count=CHUNK, role="inout")
    got = r.buffer("got", count=CHUNK, role="output")
    r.all_reduce(x)
    r.get(1 - r.rank, got, x)  # ordered after the peer's write of x by the collective alone
