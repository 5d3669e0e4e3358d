"""Two all-reduces in one group, on two communicators, posted in a different order by half the ranks.

NCCL's group (ncclGroupStart/End) posts its operations together: a rank does not wait in the first
call of a group for the other members, so collectives of different communicators inside one group
meet whatever order the ranks post them in. The same calls outside a group deadlock: the even
ranks wait in the all-reduce on `a` while the odd ranks wait in the one on `b`.

The partial-order reduction covers collectives inside a group (check/por.py): the default search
verifies this in 7 states at 2 ranks, 11 at 4 and 19 at 8.
"""

import clockworks_dist as cw

COUNT = cw.size("COUNT", 4)


@cw.schedule(expect=(cw.allreduce("x"), cw.allreduce("y")), ranks=(2, 4, 8))
def grouped_allreduce_two_comms(r):
    x = r.buffer("x", count=COUNT, role="inout")
    y = r.buffer("y", count=COUNT, role="inout")
    a = r.comm("a", range(r.world))
    b = r.comm("b", range(r.world))
    with r.group():
        if r.rank % 2 == 0:
            r.all_reduce(x, comm=a)
            r.all_reduce(y, comm=b)
        else:
            r.all_reduce(y, comm=b)
            r.all_reduce(x, comm=a)
