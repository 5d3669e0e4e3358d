"""Put bandwidth over NVSHMEM: every PE puts its whole buffer into the next PE's inbox with one
put_signal, and waits for the previous PE's signal. At 2 ranks both directions of the link carry
a full buffer at once, so the time per run is what one multi-block put of that many bytes takes
(`clockworks validate ... --sizes 1MiB..1GiB` gives the put bandwidth per size)."""

import clockworks_dist as cw

CHUNK = cw.size("CHUNK", 4)


def _shifted(world):
    """Rank r's inbox holds rank r - 1's x."""
    return [cw.equals(r, "inbox", 0, CHUNK.value, ((r - 1) % world, "x", 0)) for r in range(world)]


@cw.schedule(expect=cw.custom(_shifted, "shift"), ranks=(2, 4, 8))
def nvshmem_put_bandwidth(r):
    n, me = r.world, r.rank
    x = r.buffer("x", count=CHUNK, role="input")
    inbox = r.symmetric("inbox", count=CHUNK, role="output")
    landed = r.signal("landed", count=1)
    r.put_signal((me + 1) % n, inbox, x, landed[0])
    r.wait_until(landed[0], "eq", 1)  # the previous PE's buffer is in the inbox
