"""Ring all-reduce from grouped send/recv: reduce-scatter, then all-gather (NCCL's ring)."""

import clockworks_dist as cw

CHUNK = cw.size("CHUNK", 4)


@cw.schedule(expect=cw.allreduce("x"), ranks=(2, 4, 8))
def ring_allreduce(r):
    n = r.world
    x = r.buffer("x", count=n * CHUNK, role="inout")
    tmp = r.buffer("tmp", count=CHUNK, role="scratch")
    right, left = (r.rank + 1) % n, (r.rank - 1) % n
    for step in range(n - 1):  # reduce-scatter
        send_c, recv_c = (r.rank - step) % n, (r.rank - step - 1) % n
        with r.group():
            r.send(right, x.chunk(send_c, n))
            r.recv(left, tmp)
        r.reduce(x.chunk(recv_c, n), x.chunk(recv_c, n), tmp)
    for step in range(n - 1):  # all-gather
        send_c, recv_c = (r.rank + 1 - step) % n, (r.rank - step) % n
        with r.group():
            r.send(right, x.chunk(send_c, n))
            r.recv(left, x.chunk(recv_c, n))
