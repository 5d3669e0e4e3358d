"""Ring reduce-scatter from grouped send/recv, in place: after n - 1 steps chunk r of x on rank r
holds the sum over ranks. The receive accumulates directly (recv with reduce="sum")."""

import clockworks_dist as cw

CHUNK = cw.size("CHUNK", 4)


@cw.schedule(expect=cw.reduce_scatter("x"), ranks=(2, 4, 8))
def ring_reduce_scatter(r):
    n = r.world
    x = r.buffer("x", count=n * CHUNK, role="inout")
    right, left = (r.rank + 1) % n, (r.rank - 1) % n
    for step in range(n - 1):
        # offset by one so that the last chunk a rank completes is its own
        send_c, recv_c = (r.rank - step - 1) % n, (r.rank - step - 2) % n
        with r.group():
            r.send(right, x.chunk(send_c, n))
            r.recv(left, x.chunk(recv_c, n), reduce="sum")
