"""The grid teams of protocols/team_allreduce_rows.py, but the last rank splits its column teams
before its row teams. A team split is collective over its parent (here NVSHMEM_TEAM_WORLD), in one
order on every PE: the first split of the last rank (column0) meets the first split of the others
(row0), so the PEs disagree on which team is which, or hang."""

import clockworks_dist as cw

EXPECT = {"kind": "collective_mismatch", "ranks": 2}

COUNT = 2


@cw.schedule(ranks=(2,))
def team_split_order(r):
    half = r.world // 2
    x = r.symmetric("x", count=COUNT, role="input")
    row_sum = r.symmetric("row_sum", count=COUNT, role="output")
    if r.rank == r.world - 1:  # the columns first on this rank, the rows first on the others
        columns = [r.team_split_strided(f"column{j}", start=j, stride=half, size=2) for j in range(half)]  # BUG
        rows = [r.team_split_strided(f"row{i}", start=i * half, stride=1, size=half) for i in range(2)]
    else:
        rows = [r.team_split_strided(f"row{i}", start=i * half, stride=1, size=half) for i in range(2)]
        columns = [r.team_split_strided(f"column{j}", start=j, stride=half, size=2) for j in range(half)]
    r.team_reduce(rows[r.rank // half], row_sum, x)
    r.team_barrier(columns[r.rank % half])
