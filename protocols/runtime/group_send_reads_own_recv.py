"""A group whose send reads what one of its own recvs writes: the checker verifies it, MPI disagrees.

Rank 0 posts, in one group, two recvs from rank 1 (into x[1] and x[0]) and a send of x[1] to rank
1; rank 1 sends its y[0] and y[1], then receives into z. The checker's semantics reads a send's src
at the joint completion with its recv (DESIGN.md, "Rendezvous"): rank 0's send can complete only
once rank 1's recv is posted, after both of rank 1's sends completed, so after x[1] received y[0];
z = y[0], deterministically, and no race is reported. But NCCL and MPI may read a send's buffer at
any time between the post and the completion, and the members of a group run concurrently: the
MPI standard calls a pending send whose buffer a pending recv writes erroneous. MPICH sends x[1] as
it was when the group was posted, so under `clockworks run --backend mpi-cpu` z = rank 0's old
x[1]: a mismatch against the checker. The semantics is what is wrong here (members of one group
that overlap, one of them writing, race); the fix in the schedule: send from another buffer.
"""

import clockworks_dist as cw


@cw.schedule(ranks=(2,))
def group_send_reads_own_recv(r):
    x = r.buffer("x", count=2, role="inout")
    if r.rank == 0:
        with r.group():
            r.recv(1, x.element(1))
            r.recv(1, x.element(0))
            r.send(1, x.element(1))  # reads x[1] while the first recv may still be writing it
    else:
        z = r.buffer("z", count=1, role="output")
        r.send(0, x.element(0))
        r.send(0, x.element(1))
        r.recv(0, z)
