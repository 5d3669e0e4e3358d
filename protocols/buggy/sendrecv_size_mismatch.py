"""1-D halo exchange where one side receives one element too many.

Each of two ranks owns N interior cells with a halo of H cells on each side; rank 0 sends its
last H interior cells to rank 1 and receives rank 1's first H. Rank 1's receive region is off by
one (H + 1 elements), so the matched send and recv differ in size.
"""

import clockworks_dist as cw

EXPECT = {"kind": "send_recv_mismatch", "ranks": 2}

N = 4
H = 1


@cw.schedule(ranks=(2,))
def halo_size_mismatch(r):
    x = r.buffer("x", count=N + 2 * H, role="inout")  # [left halo | interior | right halo]
    if r.rank == 0:
        with r.group():
            r.send(1, x.region(N, N + H))  # last interior cells
            r.recv(1, x.region(N + H, N + 2 * H))  # right halo
    else:
        with r.group():
            r.send(0, x.region(H, 2 * H))  # first interior cells
            r.recv(0, x.region(0, H + 1))  # BUG: H + 1 elements, rank 0 sends H
