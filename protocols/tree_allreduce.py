"""Binomial-tree all-reduce from send/recv: reduce up the tree to rank 0, then broadcast down it.
Works for any number of ranks, powers of two or not."""

import clockworks_dist as cw

CHUNK = cw.size("CHUNK", 4)


@cw.schedule(expect=cw.allreduce("x"), ranks=(2, 4, 8))
def tree_allreduce(r):
    n = r.world
    x = r.buffer("x", count=CHUNK, role="inout")
    mask = 1
    while mask < n:  # reduce: a rank gathers its subtree, then hands it to its parent
        if r.rank & mask:
            r.send(r.rank - mask, x)
            break
        if r.rank + mask < n:
            r.recv(r.rank + mask, x, reduce="sum")
        mask <<= 1
    top = 1 << (n - 1).bit_length()
    low = r.rank & -r.rank if r.rank else top  # the parent edge is the lowest set bit
    if r.rank:
        r.recv(r.rank - low, x)
    mask = low >> 1
    while mask:  # broadcast: biggest subtree first, so the far ranks start early
        if r.rank + mask < n:
            r.send(r.rank + mask, x)
        mask >>= 1
