"""protocols/team_allreduce_rows.py with nvshmem_team_sync in place of nvshmem_barrier(team): the
column members meet, but a team sync completes no delivery, so the put of the row's sum may still be
in flight when the partner's program ends and its output is read (a barrier over the team quiets every
member first)."""

import clockworks_dist as cw

EXPECT = {"kind": "unfinished_output", "ranks": 2}

COUNT = 2


@cw.schedule(ranks=(2,))
def team_sync_not_barrier(r):
    x = r.symmetric("x", count=COUNT, role="input")
    row_sum = r.symmetric("row_sum", count=COUNT, role="output")
    other = r.symmetric("other", count=COUNT, role="output")
    rows = [r.team_split_strided(f"row{i}", start=i, stride=1, size=1) for i in range(2)]
    column = r.team_split_strided("column", start=0, stride=1, size=2)
    r.team_reduce(rows[r.rank], row_sum, x)
    r.put((r.rank + 1) % r.world, other, row_sum)  # BUG: completed by nothing (the team_sync below)
    r.team_sync(column)  # a team sync completes no put; nvshmem_barrier(team) (team_barrier) would
