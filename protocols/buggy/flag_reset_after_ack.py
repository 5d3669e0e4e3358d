"""protocols/flag_reset_before_ack.py with the ack sent before the flag's reset: the previous rank
may then put its second message, and its flag update (put_signal's set to 1) can land while this rank
stores 0 into the same word. A plain store races with the atomic update (and when the store comes
second, the wakeup is lost: the rank waits for a flag that was already set)."""

import clockworks_dist as cw

EXPECT = {"kind": "data_race", "ranks": 2}

COUNT = 2


@cw.schedule(ranks=(2,))
def flag_reset_after_ack(r):
    nxt, prev = (r.rank + 1) % r.world, (r.rank - 1) % r.world
    src = r.buffer("src", count=2 * COUNT, role="input")
    out = r.buffer("out", count=2 * COUNT, role="output")
    inbox = r.symmetric("inbox", count=COUNT, role="scratch")
    flag = r.signal("flag")
    ack = r.signal("ack")
    for k in range(2):
        if k:
            r.wait_until(ack, "ge", 1)
        r.put_signal(nxt, inbox, src.chunk(k, 2), flag, 1)
        r.wait_until(flag, "eq", 1)
        r.copy(out.chunk(k, 2), inbox)
        if k == 0:
            r.signal_op(prev, ack, 1, op="add")
        r.signal_store(flag, 0)  # BUG: after the ack, the next message's flag update may be in flight
