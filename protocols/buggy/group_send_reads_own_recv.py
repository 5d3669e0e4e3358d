"""A group whose send reads what one of its own recvs writes.

Rank 0 posts, in one group, two recvs from rank 1 (into x[1] and x[0]) and a send of x[1] to rank
1; rank 1 sends its x[0] and x[1], then receives into z. The members of a group run concurrently,
and NCCL and MPI may read a send's buffer at any time from its post until it completes (MPICH sends
small messages at once): the send may carry x[1] before or after the first recv wrote it. Found
first by `clockworks run --backend mpi-cpu` (z held rank 0's old x[1]) when the checker still read a
send's source only when it met its recv. The fix: send from another buffer.
"""

import clockworks_dist as cw

EXPECT = {"kind": "data_race", "ranks": 2}


@cw.schedule(ranks=(2,))
def group_send_reads_own_recv(r):
    x = r.buffer("x", count=2, role="inout")
    if r.rank == 0:
        with r.group():
            r.recv(1, x.element(1))
            r.recv(1, x.element(0))
            r.send(1, x.element(1))  # BUG: reads x[1] while the first recv may be writing it
    else:
        z = r.buffer("z", count=1, role="output")
        r.send(0, x.element(0))
        r.send(0, x.element(1))
        r.recv(0, z)
