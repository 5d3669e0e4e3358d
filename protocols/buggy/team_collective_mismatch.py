"""A sum over a team of two (nvshmem_float_sum_reduce(team, ...)) where one member reduces one
element and the other two: the team's first collective differs in count between its members (every
member of a team calls the team's collectives in one order, with the same arguments). The correct
twin: protocols/team_allreduce_rows.py."""

import clockworks_dist as cw

EXPECT = {"kind": "collective_mismatch", "ranks": 2}

COUNT = 2


@cw.schedule(ranks=(2,))
def team_collective_mismatch(r):
    x = r.symmetric("x", count=COUNT, role="input")
    total = r.symmetric("total", count=COUNT, role="output")
    pair = r.team_split_strided("pair", start=0, stride=1, size=2)
    if r.rank == 0:
        r.team_reduce(pair, total[0:1], x[0:1])  # BUG: one element here, two on the other member
    else:
        r.team_reduce(pair, total, x)
    r.team_sync(pair)
