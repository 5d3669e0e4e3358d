"""Rabenseifner all-reduce: recursive-halving reduce-scatter, then recursive-doubling all-gather.
Partners differ in one bit, so the world must be a power of two."""

import clockworks_dist as cw

CHUNK = cw.size("CHUNK", 4)


@cw.schedule(expect=cw.allreduce("x"), ranks=(2, 4, 8))
def halving_doubling_allreduce(r):
    n = r.world
    if n & (n - 1):
        raise ValueError(f"halving-doubling needs a power-of-two world, got {n} ranks")
    x = r.buffer("x", count=n * CHUNK, role="inout")
    tmp = r.buffer("tmp", count=max(n // 2, 1) * CHUNK, role="scratch")
    lo, hi = 0, n  # the chunks this rank is still responsible for
    dist = n // 2
    while dist:  # halving: keep the half named by my bit, give the other half to the partner
        partner, mid = r.rank ^ dist, (lo + hi) // 2
        keep, give = ((lo, mid), (mid, hi)) if not r.rank & dist else ((mid, hi), (lo, mid))
        half = (hi - lo) // 2
        with r.group():
            r.send(partner, x[give[0] * CHUNK:give[1] * CHUNK])
            r.recv(partner, tmp[0:half * CHUNK])
        mine = x[keep[0] * CHUNK:keep[1] * CHUNK]
        r.reduce(mine, mine, tmp[0:half * CHUNK])
        lo, hi = keep
        dist //= 2
    # now lo == rank: x chunk `rank` is fully reduced
    dist = 1
    while dist < n:  # doubling: swap owned ranges with the partner, the range doubles
        partner, size = r.rank ^ dist, hi - lo
        other = lo + size if not r.rank & dist else lo - size
        with r.group():
            r.send(partner, x[lo * CHUNK:hi * CHUNK])
            r.recv(partner, x[other * CHUNK:(other + size) * CHUNK])
        lo, hi = min(lo, other), max(hi, other + size)
        dist *= 2
