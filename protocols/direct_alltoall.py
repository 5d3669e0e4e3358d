"""Direct all-to-all from one group of send/recv: chunk j of src goes to rank j, chunk i of dst
comes from rank i. The own chunk is a local copy."""

import clockworks_dist as cw

CHUNK = cw.size("CHUNK", 4)


@cw.schedule(expect=cw.alltoall("src", "dst"), ranks=(2, 4, 8))
def direct_alltoall(r):
    n = r.world
    src = r.buffer("src", count=n * CHUNK, role="input")
    dst = r.buffer("dst", count=n * CHUNK, role="output")
    r.copy(dst.chunk(r.rank, n), src.chunk(r.rank, n))
    # one group: every pair's send and recv are posted together, so no order can deadlock
    with r.group():
        for k in range(1, n):
            to, frm = (r.rank + k) % n, (r.rank - k) % n  # staggered, as NCCL does
            r.send(to, src.chunk(to, n))
            r.recv(frm, dst.chunk(frm, n))
