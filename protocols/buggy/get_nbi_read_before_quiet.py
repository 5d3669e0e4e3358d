"""A non-blocking get whose destination is used before the quiet that completes it.

Each PE fetches its neighbour's block with get_nbi to overlap the transfer with other work, then
reduces it into its own result. The reduction reads the fetched block before `quiet()`: the data may
still be on its way (nvshmem_get_nbi returns before the data has arrived).
"""

import clockworks_dist as cw

EXPECT = {"kind": "data_race", "ranks": 2}

COUNT = 4


@cw.schedule(ranks=(2,))
def get_nbi_read_before_quiet(r):
    block = r.symmetric("block", count=COUNT, role="input")
    fetched = r.buffer("fetched", count=COUNT, role="scratch")
    result = r.buffer("result", count=COUNT, role="output")
    r.barrier_all()
    r.get_nbi((r.rank + 1) % r.world, fetched, block)
    r.reduce(result, block, fetched)  # BUG: fetched is complete only after the quiet below
    r.quiet()
    r.barrier_all()
