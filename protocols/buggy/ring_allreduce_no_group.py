"""Ring all-reduce whose send and recv are not grouped.

Sends are rendezvous: a send completes only together with its matching recv. Every rank sends to
its right neighbour first, and every right neighbour is itself blocked in its own send, so no
recv is ever posted: all ranks block in the first send. The fix is `with r.group():` around the
send/recv pair, as in protocols/ring_allreduce.py.
"""

import clockworks_dist as cw

EXPECT = {"kind": "deadlock", "ranks": 4}

CHUNK = cw.size("CHUNK", 2)


@cw.schedule(expect=cw.allreduce("x"), ranks=(4,))
def ring_allreduce_no_group(r):
    n = r.world
    x = r.buffer("x", count=n * CHUNK, role="inout")
    tmp = r.buffer("tmp", count=CHUNK, role="scratch")
    right, left = (r.rank + 1) % n, (r.rank - 1) % n
    for step in range(n - 1):  # reduce-scatter
        send_c, recv_c = (r.rank - step) % n, (r.rank - step - 1) % n
        r.send(right, x.chunk(send_c, n))  # BUG: not grouped with the recv
        r.recv(left, tmp)
        r.reduce(x.chunk(recv_c, n), x.chunk(recv_c, n), tmp)
    for step in range(n - 1):  # all-gather
        send_c, recv_c = (r.rank + 1 - step) % n, (r.rank - step) % n
        with r.group():
            r.send(right, x.chunk(send_c, n))
            r.recv(left, x.chunk(recv_c, n))
