"""1F1B pipeline (one forward, one backward) with blocking send/recv, one pair swapped.

Stage s runs `warmup = p - s - 1` forwards, then alternates forward(i) / backward(j), then
drains the remaining backwards. Sends are rendezvous, so each pair of neighbours must agree on the
order of their two exchanges in the steady state: the stage on the left sends the next activation
first and then receives a gradient; the stage on the right must therefore receive that activation
before it sends its gradient back. Here the right-hand stage sends first: both neighbours block in
send (stage s-1 in the send of out[i], stage s in the send of gout[j]).
"""

import clockworks_dist as cw

EXPECT = {"kind": "deadlock", "ranks": 4}

MICRO = 4  # microbatches, one element each


@cw.schedule(ranks=(4,))
def pipeline_1f1b_swapped(r):
    s, p, m = r.rank, r.world, MICRO
    first, last = s == 0, s == p - 1
    prev, nxt = s - 1, s + 1
    act = r.buffer("act", count=m, role="input")  # forward input of each microbatch
    out = r.buffer("out", count=m, role="scratch")  # forward output
    gin = r.buffer("gin", count=m, role="scratch")  # gradient from the next stage
    gout = r.buffer("gout", count=m, role="output")  # gradient for the previous stage

    def forward(i):
        r.compute("forward", reads=[act[i]], writes=[out[i]])

    def backward(j):
        r.compute("backward", reads=[act[j], gin[j]], writes=[gout[j]])

    warmup = min(p - s - 1, m)
    steady = m - warmup
    for i in range(warmup):
        if not first:
            r.recv(prev, act[i])
        forward(i)
        r.send(nxt, out[i])
    if steady and not first:
        r.recv(prev, act[warmup])
    for j in range(steady):
        i = warmup + j
        forward(i)
        if not last:
            r.send(nxt, out[i])
            r.recv(nxt, gin[j])
        backward(j)
        if not first:
            r.send(prev, gout[j])  # BUG: swapped with the recv below; stage s-1 is sending out[i+1]
            if i + 1 < m:
                r.recv(prev, act[i + 1])
    for j in range(steady, m):
        r.recv(nxt, gin[j])
        backward(j)
        if not first:
            r.send(prev, gout[j])
