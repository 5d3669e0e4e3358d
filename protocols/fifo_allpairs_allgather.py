"""All-pairs all-gather over connections with slots, as MSCCL's all-pairs algorithms run it: every
rank first sends its chunk to every peer, then receives every peer's chunk, with no group.

With rendezvous sends this deadlocks (every rank blocks in its first send). Here each connection is a
FIFO of SLOTS messages (`slots=`, as NCCL's and MSCCL's connections are), and each connection carries
CHUNKS messages: a send completes on its own while its FIFO has room, so every send finishes before
any rank receives. protocols/buggy/fifo_full_deadlock.py sends one message more than the FIFO holds.
"""

import clockworks_dist as cw

CHUNK = cw.size("CHUNK", 4)
PIECES = 2  # messages per connection: the chunk in two halves
SLOTS = 2  # each connection holds both halves


@cw.schedule(expect=cw.allgather("x"), ranks=(2, 4, 8))
def fifo_allpairs_allgather(r):
    n = r.world
    x = r.buffer("x", count=n * PIECES * CHUNK, role="inout")
    mine = x.chunk(r.rank, n)
    for k in range(1, n):  # every send first: each one finds room in its connection's FIFO
        to = (r.rank + k) % n
        for piece in range(PIECES):
            r.send(to, mine.chunk(piece, PIECES), slots=SLOTS)
    for k in range(1, n):  # then every recv, oldest message first on each connection
        frm = (r.rank - k) % n
        for piece in range(PIECES):
            r.recv(frm, x.chunk(frm, n).chunk(piece, PIECES), slots=SLOTS)
