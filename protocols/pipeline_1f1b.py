"""1F1B pipeline-parallel schedule (PipeDream-flush / Megatron): stage = rank, M microbatches.
Forward activations go right, gradients go left. Each stage runs a warm-up of forwards, a steady
phase of one forward then one backward, and a cool-down of backwards.

The paired transfers of the steady phase are grouped (Megatron's send_forward_recv_backward and
send_backward_recv_forward): with rendezvous send/recv, two neighbours that both send first
would deadlock. Every microbatch has its own buffers, so nothing is overwritten while in use.

No postcondition: the stage outputs are opaque `compute` results, not sums of inputs, so the
check covers deadlocks, mismatched transfers and data races only."""

import clockworks_dist as cw

CHUNK = cw.size("CHUNK", 4)
M = 4  # microbatches


@cw.schedule(ranks=(2, 4, 8))
def pipeline_1f1b(r):
    n, s = r.world, r.rank
    first, last = s == 0, s == n - 1
    w = r.buffer("w", count=CHUNK, role="input")           # this stage's weights
    wgrad = r.buffer("wgrad", count=CHUNK, role="output")  # accumulated over microbatches
    x = r.buffer("x", count=M * CHUNK, role="input")       # the data (read by stage 0)
    act = r.buffer("act", count=M * CHUNK, role="scratch")    # activations from the left
    out = r.buffer("out", count=M * CHUNK, role="scratch")    # activations to the right / loss
    gin = r.buffer("gin", count=M * CHUNK, role="scratch")    # gradients from the right
    gout = r.buffer("gout", count=M * CHUNK, role="scratch")  # gradients to the left

    def mb(buf, m):
        return buf.chunk(m, M)

    def forward(m):
        r.compute("fwd", reads=(mb(x if first else act, m), w), writes=(mb(out, m),))

    def backward(m):
        grad = mb(out, m) if last else mb(gin, m)  # the last stage starts from its loss
        r.compute("bwd", reads=(grad, mb(act if not first else x, m), w, wgrad),
                  writes=(mb(gout, m), wgrad))

    def recv_forward(m):
        if not first:
            r.recv(s - 1, mb(act, m))

    def send_backward(m):
        if not first:
            r.send(s - 1, mb(gout, m))

    warmup = min(n - s - 1, M)
    steady = M - warmup
    r.fill(wgrad, 0.0)
    for m in range(warmup):
        recv_forward(m)
        forward(m)
        if not last:
            r.send(s + 1, mb(out, m))
    if steady:
        recv_forward(warmup)
    for i in range(steady):
        fwd_m, bwd_m = warmup + i, i
        forward(fwd_m)
        if not last:
            with r.group():  # send_forward_recv_backward
                r.send(s + 1, mb(out, fwd_m))
                r.recv(s + 1, mb(gin, bwd_m))
        backward(bwd_m)
        if i == steady - 1:
            send_backward(bwd_m)
        elif not first:
            with r.group():  # send_backward_recv_forward
                r.send(s - 1, mb(gout, bwd_m))
                r.recv(s - 1, mb(act, fwd_m + 1))
    for m in range(steady, M):  # cool-down
        if not last:
            r.recv(s + 1, mb(gin, m))
        backward(m)
        send_backward(m)
