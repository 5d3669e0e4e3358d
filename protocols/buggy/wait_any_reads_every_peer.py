"""A receiver that waits for any sender and then reads every sender's data.

DeepEP-style: each PE puts its tokens into its own slot of PE 0's receive buffer with put_signal,
raising its own flag. PE 0 means to wait until every flag is up, but it called wait_until_any: it
wakes as soon as one sender's data has landed, and then reads the slots of senders whose data is
still in flight.
"""

import clockworks_dist as cw

EXPECT = {"kind": "data_race", "ranks": 3}

COUNT = 2


@cw.schedule(ranks=(3,))
def wait_any_reads_every_peer(r):
    n = r.world
    tokens = r.buffer("tokens", count=COUNT, role="input")
    recv = r.symmetric("recv", count=n * COUNT, role="scratch")
    out = r.buffer("out", count=n * COUNT, role="output")
    arrived = r.signal("arrived", count=n)
    if r.rank != 0:
        r.put_signal(0, recv.chunk(r.rank, n), tokens, arrived[r.rank], 1, op="set")
        r.quiet()
    else:
        r.wait_until_any([arrived[p] for p in range(1, n)], "eq", 1)
        r.copy(out, recv)  # BUG: only one sender is known to have landed; wait_until_all was meant
    r.barrier_all()
