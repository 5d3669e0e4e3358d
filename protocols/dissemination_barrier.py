"""A dissemination barrier from signal atomics, used twice to pass data along a ring.

Barrier episode e (1, 2, ...): in round k every PE adds 1 to word k of the signal on PE
(rank + 2^k) % n and waits until its own word k reaches e. Counting (add, compare ge) makes the
words reusable across episodes without a reset, whatever order the adds arrive in. After
ceil(log2 n) rounds every PE has heard, transitively, from every other one.

The data: each PE puts x to its right neighbour, quiet (the put is delivered before this PE
signals anyone), barrier, then adds what it got to its own x and passes the sum right again,
quiet, barrier, and reads it. Reading `got1`/`got2` before the matching barrier would be a race."""

import clockworks_dist as cw

CHUNK = cw.size("CHUNK", 4)


def _two_hops(n):
    # result on PE q = x of the two PEs to its left
    return [cw.equals(q, "result", 0, int(CHUNK), ((q - 1) % n, "x", 0), ((q - 2) % n, "x", 0))
            for q in range(n)]


@cw.schedule(expect=cw.custom(_two_hops, label="two hops right"), ranks=(2, 4, 8))
def dissemination_barrier(r):
    n = r.world
    rounds = (n - 1).bit_length()  # ceil(log2 n)
    bar = r.signal("bar", count=max(rounds, 1))
    x = r.buffer("x", count=CHUNK, role="input")
    got1 = r.symmetric("got1", count=CHUNK, role="scratch")
    got2 = r.symmetric("got2", count=CHUNK, role="scratch")
    mine = r.buffer("mine", count=CHUNK, role="scratch")
    result = r.buffer("result", count=CHUNK, role="output")
    right = (r.rank + 1) % n

    def barrier(epoch):
        for k in range(rounds):
            r.signal_op((r.rank + 2**k) % n, bar[k], 1, op="add")
            r.wait_until(bar[k], "ge", epoch)

    r.put(right, got1, x)
    r.quiet()
    barrier(1)
    r.reduce(mine, got1, x)
    r.put(right, got2, mine)
    r.quiet()
    barrier(2)
    r.copy(result, got2)
