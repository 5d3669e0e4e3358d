"""Ring all-gather from grouped send/recv, in place: chunk q of x starts on rank q and travels
n - 1 hops around the ring."""

import clockworks_dist as cw

CHUNK = cw.size("CHUNK", 4)


@cw.schedule(expect=cw.allgather("x"), ranks=(2, 4, 8))
def ring_allgather(r):
    n = r.world
    x = r.buffer("x", count=n * CHUNK, role="inout")
    right, left = (r.rank + 1) % n, (r.rank - 1) % n
    for step in range(n - 1):
        # forward what arrived last step; the group lets every rank send and receive at once
        send_c, recv_c = (r.rank - step) % n, (r.rank - step - 1) % n
        with r.group():
            r.send(right, x.chunk(send_c, n))
            r.recv(left, x.chunk(recv_c, n))
