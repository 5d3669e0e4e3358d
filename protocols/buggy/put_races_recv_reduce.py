"""A put into what the same pair's recv-with-reduce writes.

Rank 0 sends x to rank 1, which receives it with reduce=sum into s; then rank 0 puts y into the
same s on rank 1. A send completes once its recv has matched it (MPI's synchronous send) or the
data has left (NCCL), and the receiver reduces into s afterwards: the put can land first and the
reduction then adds to it. Found first by `clockworks run --backend mpi-cpu --jitter SEED` when the
checker still completed a send and its recv in one step. The fix: rank 1 signals rank 0 once s is
written, and rank 0 waits for it before the put.
"""

import clockworks_dist as cw

EXPECT = {"kind": "data_race", "ranks": 2}

CHUNK = cw.size("CHUNK", 64)


@cw.schedule(ranks=(2,))
def put_races_recv_reduce(r):
    s = r.symmetric("s", count=CHUNK, role="output")
    if r.rank == 0:
        x = r.buffer("x", count=CHUNK, role="input")
        y = r.buffer("y", count=CHUNK, role="input")
        r.send(1, x)
        r.put(1, s, y)  # BUG: rank 1 may still be reducing into s
    else:
        r.recv(0, s, reduce="sum")
