"""A work counter on PE 0 bumped with atomics by everyone, but reset with a plain put.

Rank 1 (re)initialises PE 0's counter with an ordinary put while rank 2 increments it with
atomic_add. An atomic and a plain write to the same word race (OpenSHMEM memory model): the
increment can be lost or applied before the reset. The fix: atomic_set, or reset before a barrier.
"""

import clockworks_dist as cw

EXPECT = {"kind": "data_race", "ranks": 3}


@cw.schedule(ranks=(3,))
def put_vs_atomic_counter(r):
    counter = r.symmetric("counter", count=1, dtype="int64", role="scratch")
    zero = r.buffer("zero", count=1, dtype="int64", role="scratch")
    if r.rank == 1:
        r.fill(zero, 0)
        r.put(0, counter.element(0), zero)  # BUG: plain write to a word others update atomically
    if r.rank == 2:
        r.atomic_add(0, counter.element(0), 1)
    r.barrier_all()
