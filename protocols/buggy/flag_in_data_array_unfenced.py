"""A flag in a data array set before the data it guards, with no fence between them.

Each PE atomically sets its element of the next PE's `flag` array and then puts its x into that PE's
`inbox`; each PE waits on the element its previous PE sets and copies the inbox out. Deliveries from
one PE are unordered, and here the flag is even issued first: the waiter can pass its wait and read
the inbox while the put is still on its way, a data race. The fix: put first, `r.fence()`, then the
atomic (`protocols/flag_in_data_array.py` is the fixed twin).
"""

import clockworks_dist as cw

EXPECT = {"kind": "data_race", "ranks": 2}

COUNT = 2


@cw.schedule(expect=cw.custom(lambda world: [cw.equals((q + 1) % world, "out", 0, COUNT, (q, "x", 0))
                                             for q in range(world)], label="shift x"), ranks=(2,))
def flag_in_data_array_unfenced(r):
    nxt, prev = (r.rank + 1) % r.world, (r.rank - 1) % r.world
    x = r.symmetric("x", count=COUNT, role="input")
    inbox = r.symmetric("inbox", count=COUNT, role="scratch")
    out = r.buffer("out", count=COUNT, role="output")
    flag = r.symmetric("flag", count=r.world, dtype="uint64", role="scratch")
    r.atomic_set(nxt, flag[r.rank], 1)
    r.put(nxt, inbox, x)  # BUG: the data goes out after the flag, with no fence: the waiter may read it first
    r.wait_until(flag[prev], "eq", 1)
    r.copy(out, inbox)
