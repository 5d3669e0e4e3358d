"""A put into what the same pair's recv-with-reduce writes: verified, yet racy under MPI and NCCL.

Rank 0 sends x to rank 1, which receives it with reduce=sum into s; then rank 0 puts y into the
same s on rank 1. The checker completes the send and the recv in one joint transition, so the recv's
write of s happens before rank 0's put is even issued, and s ends as y. MPI and NCCL promise less: a
send completes once the receiver has matched it (MPI's synchronous send) or the data has left, and
the receiver reduces into s afterwards, so the put can land first and the reduction then writes
over it (or adds to it). Under `clockworks run --backend mpi-cpu --jitter SEED` that shows in some
runs: a mismatch against the checker, whose semantics is too strong here. The fix in the schedule:
rank 1 signals rank 0 once s is written, and rank 0 waits before the put.
"""

import clockworks_dist as cw

CHUNK = cw.size("CHUNK", 64)


@cw.schedule(ranks=(2,))
def put_races_recv_reduce(r):
    s = r.symmetric("s", count=CHUNK, role="output")
    if r.rank == 0:
        x = r.buffer("x", count=CHUNK, role="input")
        y = r.buffer("y", count=CHUNK, role="input")
        r.send(1, x)
        r.put(1, s, y)  # ordered after rank 1's reduction into s by the joint completion alone
    else:
        r.recv(0, s, reduce="sum")
