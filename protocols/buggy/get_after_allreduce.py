"""Reading a peer's all-reduce output right after the all-reduce.

Each rank all-reduces x in place, then gets its peer's x. A collective completes on each member on
its own (NCCL, MPI): one member may finish and go on while another still writes its output, so the
get may read the peer's old x. Found first by `clockworks run --backend mpi-cpu` (a mismatch in some
runs) when the checker still completed a collective on every member in one step. The fix: a barrier
(or a signal the reader waits on) between the all-reduce and the get.
"""

import clockworks_dist as cw

EXPECT = {"kind": "data_race", "ranks": 2}

CHUNK = cw.size("CHUNK", 64)


@cw.schedule(ranks=(2,))
def get_after_allreduce(r):
    x = r.symmetric("x", count=CHUNK, role="inout")
    got = r.buffer("got", count=CHUNK, role="output")
    r.all_reduce(x)
    r.get(1 - r.rank, got, x)  # BUG: the peer may still be writing x
