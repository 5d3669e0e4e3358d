"""Two messages on one SET signal: the consumer can miss the first value.

The producer sends two blocks, each with put_signal(op="set") on the same word, fenced so that
value 1 lands before value 2. But it does not wait for the consumer in between: the signal can go
0 -> 1 -> 2 before the consumer looks, and the consumer's wait for exactly 1 then never returns.
The fix: wait "ge" (both blocks are there once it reads 2), or one signal word per message.
"""

import clockworks_dist as cw

EXPECT = {"kind": "deadlock", "ranks": 2}

COUNT = 1


def _forward(world):
    return [cw.equals(1, "out", 0, 2 * COUNT, (0, "x", 0))]


@cw.schedule(expect=cw.custom(_forward, label="two blocks to PE 1"), ranks=(2,))
def lost_wakeup_set_signal(r):
    x = r.buffer("x", count=2 * COUNT, role="input")
    out = r.buffer("out", count=2 * COUNT, role="output")
    box = r.symmetric("box", count=2 * COUNT, role="scratch")
    seq = r.signal("seq")
    if r.rank == 0:
        r.put_signal(1, box.chunk(0, 2), x.chunk(0, 2), seq, value=1, op="set")
        r.fence()
        r.put_signal(1, box.chunk(1, 2), x.chunk(1, 2), seq, value=2, op="set")
        r.quiet()
    else:
        r.wait_until(seq, "eq", 1)  # BUG: misses the 1 if the 2 already overwrote it
        r.copy(out.chunk(0, 2), box.chunk(0, 2))
        r.wait_until(seq, "eq", 2)
        r.copy(out.chunk(1, 2), box.chunk(1, 2))
