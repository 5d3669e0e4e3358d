"""All-to-all dispatch over NVSHMEM as DeepEP writes it: per peer, the tokens with a plain put,
then a fence, then the routing metadata with put_signal; the receiver waits for each source's
signal and copies that source's tokens and metadata out of the symmetric receive buffers.

Chunk j of `tokens` goes into slot [rank] of the symmetric `recv` on PE j, and the metadata for PE
j into slot [rank] of `recv_meta`, whose put_signal sets arrived[rank] there. The signal implies
the put_signal's own data only: it is the fence that makes the earlier token put land first, so a
PE that sees arrived[p] may read both of p's slots. Without the fence, the copy of the tokens races
with their put (as in buggy/signal_without_fence.py). The own chunk is a local copy."""

import clockworks_dist as cw

CHUNK = cw.size("CHUNK", 4)


@cw.schedule(expect=[cw.alltoall("tokens", "out"), cw.alltoall("meta", "out_meta")], ranks=(2, 4, 8))
def nvshmem_fenced_dispatch(r):
    n, me = r.world, r.rank
    tokens = r.buffer("tokens", count=n * CHUNK, role="input")
    meta = r.buffer("meta", count=n, role="input")  # per destination: what the receiver needs to route
    out = r.buffer("out", count=n * CHUNK, role="output")
    out_meta = r.buffer("out_meta", count=n, role="output")
    recv = r.symmetric("recv", count=n * CHUNK, role="scratch")
    recv_meta = r.symmetric("recv_meta", count=n, role="scratch")
    arrived = r.signal("arrived", count=n)
    peers = [(me + k) % n for k in range(1, n)]  # staggered destinations spread the load
    for pe in peers:
        r.put(pe, recv.chunk(me, n), tokens.chunk(pe, n))
        r.fence()  # the tokens to pe land before the metadata and its signal
        r.put_signal(pe, recv_meta.chunk(me, n), meta.chunk(pe, n), arrived[me])
    r.copy(out.chunk(me, n), tokens.chunk(me, n))
    r.copy(out_meta.chunk(me, n), meta.chunk(me, n))
    for pe in peers:
        r.wait_until(arrived[pe], "eq", 1)  # with the fence: pe's tokens have landed too
        r.copy(out.chunk(pe, n), recv.chunk(pe, n))
        r.copy(out_meta.chunk(pe, n), recv_meta.chunk(pe, n))
