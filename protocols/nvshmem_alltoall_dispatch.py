"""All-to-all dispatch over NVSHMEM, as in DeepEP: chunk j of the send buffer goes into slot
[rank] of the symmetric receive buffer on PE j with put_signal; a per-source signal tells PE j
that its slot has landed. The own chunk is a local copy."""

import clockworks_dist as cw

CHUNK = cw.size("CHUNK", 4)


@cw.schedule(expect=cw.alltoall("send", "recv"), ranks=(2, 4, 8))
def nvshmem_alltoall_dispatch(r):
    n, me = r.world, r.rank
    send = r.buffer("send", count=n * CHUNK, role="input")
    recv = r.symmetric("recv", count=n * CHUNK, role="output")
    arrived = r.signal("arrived", count=n)
    peers = [(me + k) % n for k in range(1, n)]  # staggered destinations spread the load
    for pe in peers:
        r.put_signal(pe, recv.chunk(me, n), send.chunk(pe, n), arrived[me])
    r.copy(recv.chunk(me, n), send.chunk(me, n))  # peers write other slots: no conflict
    for pe in peers:
        r.wait_until(arrived[pe], "eq", 1)  # the signal implies that call's data is there
