"""Two messages around a ring through one inbox and one flag word: each rank puts with the flag set to
1 (put_signal), waits for its own flag, copies the inbox out, resets its flag with a plain store
(`*flag = 0`, `signal_store`) and only then tells the previous rank that the inbox is free (an ack it
waits on before its second put). The reset happens before the ack, so no update of the flag can be in
flight while it is stored. The twin: protocols/buggy/flag_reset_after_ack.py."""

import clockworks_dist as cw

COUNT = 2


def _expect(world):
    return [cw.equals(q, "out", k * COUNT, (k + 1) * COUNT, ((q - 1) % world, "src", k * COUNT))
            for q in range(world) for k in range(2)]


@cw.schedule(expect=cw.custom(_expect, label="two messages from the previous rank"), ranks=(2, 4, 8))
def flag_reset_before_ack(r):
    nxt, prev = (r.rank + 1) % r.world, (r.rank - 1) % r.world
    src = r.buffer("src", count=2 * COUNT, role="input")
    out = r.buffer("out", count=2 * COUNT, role="output")
    inbox = r.symmetric("inbox", count=COUNT, role="scratch")
    flag = r.signal("flag")
    ack = r.signal("ack")
    for k in range(2):
        if k:
            r.wait_until(ack, "ge", 1)  # the next rank has emptied its inbox and reset its flag
        r.put_signal(nxt, inbox, src.chunk(k, 2), flag, 1)
        r.wait_until(flag, "eq", 1)
        r.copy(out.chunk(k, 2), inbox)
        r.signal_store(flag, 0)  # the reset, before the ack that lets the next message come
        if k == 0:
            r.signal_op(prev, ack, 1, op="add")
    r.quiet()  # the last put_signal completes before the rank's end
