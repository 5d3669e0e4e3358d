"""A ring all-reduce step split over two thread blocks of each GPU, as MSCCL runs it: block `recv`
takes the left neighbour's chunk into scratch, block `send` sends this GPU's chunk right and then adds
the received chunk into it. The blocks run concurrently; the sum waits for a flag the receiving block
sets once its data is in (`wait_until` on a signal word of the GPU's own).

protocols/buggy/blocks_race_without_flag.py drops the wait: the sum then races with the recv.
"""

import clockworks_dist as cw

CHUNK = 4


@cw.schedule(expect=cw.custom(lambda world: [cw.equals(q, "x", 0, CHUNK, (q, "x", 0), ((q - 1) % world, "x", 0))
                                             for q in range(world)], label="x + left x"), ranks=(2, 4, 8))
def blocks_reduce_after_recv(r):
    n = r.world
    right, left = (r.rank + 1) % n, (r.rank - 1) % n
    x = r.buffer("x", count=CHUNK, role="inout")
    tmp = r.buffer("tmp", count=CHUNK, role="scratch")
    sent = r.buffer("sent", count=CHUNK, role="scratch")
    ready = r.signal("ready")
    with r.thread("recv"):
        r.recv(left, tmp, slots=1)
        r.signal_op(r.rank, ready, 1)  # the received chunk is in tmp
    with r.thread("send"):
        r.copy(sent, x)
        r.send(right, sent, slots=1)
        r.wait_until(ready, "ge", 1)
        r.reduce(x, x, tmp)
