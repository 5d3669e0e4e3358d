"""The calibration microbenchmarks as schedules: each measured GPU call, written in the DSL, so the
fit and the accuracy benchmark predict them with the same simulator as any user schedule (NCCL's
calls, NVSHMEM puts, and plain kernels)."""

from __future__ import annotations

from ..dsl import allgather, allreduce, alltoall, broadcast, reduce_scatter, schedule, size

ELEMS = size("ELEMS", 256, min=1)  # float32 elements per rank (the nccl-tests "size" / 4)


@schedule(expect=allreduce("x"))
def allreduce_op(r):
    x = r.buffer("x", count=ELEMS, role="inout")
    r.all_reduce(x)


@schedule(expect=allgather("x"))
def allgather_op(r):
    x = r.buffer("x", count=ELEMS * r.world, role="inout")
    r.all_gather(x.chunk(r.rank, r.world), x)


@schedule(expect=reduce_scatter("x", "y"))
def reducescatter_op(r):
    x = r.buffer("x", count=ELEMS * r.world, role="input")
    y = r.buffer("y", count=ELEMS, role="output")
    r.reduce_scatter(x, y)


@schedule(expect=broadcast("x", root=0))
def broadcast_op(r):
    x = r.buffer("x", count=ELEMS, role="inout")
    r.broadcast(x, root=0)


@schedule(expect=alltoall("x", "y"))
def alltoall_op(r):
    x = r.buffer("x", count=ELEMS * r.world, role="input")
    y = r.buffer("y", count=ELEMS * r.world, role="output")
    with r.group():  # one NCCL launch, the own chunk included (a send to itself)
        for peer in range(r.world):
            r.send(peer, x.chunk(peer, r.world))
            r.recv(peer, y.chunk(peer, r.world))


@schedule
def sendrecv_op(r):
    """Rank 0 sends to rank 1 (one direction), as a ping."""
    x = r.buffer("x", count=ELEMS, role="input")
    if r.rank == 0:
        r.send(1, x)
    elif r.rank == 1:
        r.recv(0, x)


@schedule
def sendrecv_bidir_op(r):
    """Every rank sends to the next and receives from the previous at once, in one group (a ring
    step; at 2 ranks an exchange over both directions of the link), as bench_nccl.cu's
    sendrecv_bidir does at any rank count."""
    x = r.buffer("x", count=ELEMS, role="input")
    y = r.buffer("y", count=ELEMS, role="output")
    with r.group():
        r.send((r.rank + 1) % r.world, x)
        r.recv((r.rank - 1) % r.world, y)


@schedule
def put_op(r):
    """PE 0 puts its buffer into PE 1 with a signal; PE 1 waits for it."""
    x = r.symmetric("x", count=ELEMS, role="input")
    y = r.symmetric("y", count=ELEMS, role="output")
    ready = r.signal("ready")
    if r.rank == 0:
        r.put_signal(1, y, x, ready, 1, op="set", nbi=True)
    elif r.rank == 1:
        r.wait_until(ready, "ge", 1)


@schedule
def signal_op(r):
    """PE 0 sets a signal on PE 1, which waits for it: one way of bench_nvshmem.cu's signal ping-pong
    (nothing but the signal word crosses; `x`, which nothing moves, is the cell's size axis)."""
    r.buffer("x", count=ELEMS, role="input")
    ready = r.signal("ready")
    if r.rank == 0:
        r.signal_op(1, ready, 1, op="set")
    elif r.rank == 1:
        r.wait_until(ready, "ge", 1)


# bench_kernels.cu's spinning kernel runs this long (its --spin-us default).
SPIN_US = 50.0


@schedule
def kernel_empty_op(r):
    """One plain kernel that writes a float (bench_kernels.cu's kernel_empty): its start alone."""
    x = r.buffer("x", count=ELEMS, role="output")
    r.fill(x, 1.0)


@schedule
def kernel_spin_op(r):
    """One plain kernel that spins SPIN_US (kernel_spin): the gap between kernels on the GPU."""
    x = r.buffer("x", count=ELEMS, role="output")
    r.compute("spin", writes=x, us=SPIN_US)


@schedule
def kernel_reduce_op(r):
    """dst = dst + src (kernel_reduce): a plain kernel's rate over HBM."""
    x = r.buffer("x", count=ELEMS, role="inout")
    y = r.buffer("y", count=ELEMS, role="input")
    r.reduce(x, x, y)


MICROBENCHMARKS = {
    "allreduce": allreduce_op, "allgather": allgather_op, "reducescatter": reducescatter_op,
    "broadcast": broadcast_op, "alltoall": alltoall_op, "sendrecv": sendrecv_op,
    "sendrecv_bidir": sendrecv_bidir_op, "put": put_op, "signal": signal_op,
    "kernel_empty": kernel_empty_op, "kernel_spin": kernel_spin_op, "kernel_reduce": kernel_reduce_op,
}
# The microbenchmarks of bench_kernels.cu (one process on one GPU, no MPI).
KERNEL_OPS = ("kernel_empty", "kernel_spin", "kernel_reduce")
