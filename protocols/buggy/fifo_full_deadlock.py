"""All-pairs all-gather whose connections hold fewer messages than each one carries.

Every rank sends its chunk to every peer in two halves before it receives anything, over connections
of one slot. The first half fills the FIFO; the second half's send blocks until the peer receives the
first, but every peer is itself blocked in a send: a full-channel deadlock. (The correct twin,
protocols/fifo_allpairs_allgather.py, gives each connection two slots.)
"""

import clockworks_dist as cw

EXPECT = {"kind": "deadlock", "ranks": 3}

CHUNK = cw.size("CHUNK", 4)
PIECES = 2


@cw.schedule(expect=cw.allgather("x"), ranks=(3,))
def fifo_full_deadlock(r):
    n = r.world
    x = r.buffer("x", count=n * PIECES * CHUNK, role="inout")
    mine = x.chunk(r.rank, n)
    for k in range(1, n):
        to = (r.rank + k) % n
        r.send(to, mine.chunk(0, PIECES), slots=1)
        r.send(to, mine.chunk(1, PIECES), slots=1)  # BUG: the connection holds one message, not two
    for k in range(1, n):
        frm = (r.rank - k) % n
        for piece in range(PIECES):
            r.recv(frm, x.chunk(frm, n).chunk(piece, PIECES), slots=1)
