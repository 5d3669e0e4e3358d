"""Row and column teams of a 2 x (world/2) grid: four nvshmem_team_split_strided calls on
NVSHMEM_TEAM_WORLD, every PE making every team (a split is collective over its parent, with the same
arguments everywhere; a PE outside the new team gets NVSHMEM_TEAM_INVALID, None here). Each rank sums
`x` over its row team, puts its row's sum to its column partner, and a barrier over the column team
(nvshmem_barrier(team): a quiet on every member, then the members meet) completes the put. The twins:
protocols/buggy/team_split_order.py (one rank splits in another order) and
protocols/buggy/team_collective_mismatch.py (one member reduces another count)."""

import clockworks_dist as cw

COUNT = 2


def _row(world, q):
    half = world // 2
    return [(p, "x", 0) for p in range((q // half) * half, (q // half + 1) * half)]


def _expect(world):
    found = []
    for q in range(world):
        found.append(cw.equals(q, "row_sum", 0, COUNT, *_row(world, q)))
        found.append(cw.equals(q, "other", 0, COUNT, *_row(world, (q + world // 2) % world)))
    return found


def split_grid(r):
    """The row teams, then the column teams, split by every PE in one order; this rank's row and column."""
    half = r.world // 2
    rows = [r.team_split_strided(f"row{i}", start=i * half, stride=1, size=half) for i in range(2)]
    columns = [r.team_split_strided(f"column{j}", start=j, stride=half, size=2) for j in range(half)]
    return rows[r.rank // half], columns[r.rank % half]


@cw.schedule(expect=cw.custom(_expect, label="row sums, swapped"), ranks=(2, 4, 8))
def team_allreduce_rows(r):
    x = r.symmetric("x", count=COUNT, role="input")
    row_sum = r.symmetric("row_sum", count=COUNT, role="output")
    other = r.symmetric("other", count=COUNT, role="output")
    row, column = split_grid(r)
    r.team_reduce(row, row_sum, x)
    r.put((r.rank + r.world // 2) % r.world, other, row_sum)
    r.team_barrier(column)
