"""The `cupy` executor: a schedule run on GPUs by CuPy and NCCL (`cupy.cuda.nccl`), one process
and one GPU per rank.

A table keyed by op class (`semantics.backends`), like `mpi_cpu`: the data flow of local ops is
the rule's `Move`s, collectives follow the rules' chunk maps. CuPy is imported when an executor
starts, so this module (and its table, which the coverage test walks) loads without it.

Each rank drives GPU `local rank % visible GPUs` and issues its whole program, op by op, onto one
CUDA stream: the stream runs the ops in program order, as the checker's semantics runs a rank's
ops. The host does not wait after each op (a GPU program does not either); it records an event
after each op and, at the end, polls the events until the last is done, so it knows which op the
GPU is in when a wait passes the deadline. Timing: CUDA events before the first and after the last
op of each iteration (`elapsed`); a launch-bound schedule (small messages) measures how fast the
host issues, a bandwidth-bound one what the GPUs and NVLink move.

How each op maps onto NCCL, and why NCCL's guarantees are at least as strong as the checker's
semantics where it says so:
- send, recv, group: `ncclSend`/`ncclRecv` inside `ncclGroupStart`/`ncclGroupEnd` (a lone send or
  recv is a group of one), bytes as `ncclUint8`. NCCL matches the p2p operations of one
  (communicator, sender, receiver) in the order they were issued: the checker's FIFO matching.
  A group's members progress together and the group completes when all have, in any order. A
  recv with `reduce` receives into scratch, then `dst = dst OP received` on the stream (the rule's
  operand order; `numeric`'s arithmetic in the buffer's dtype).
- all_reduce, all_gather, reduce_scatter, broadcast, reduce (`reduce_to`): the NCCL collective of
  the same name on an NCCL communicator per schedule communicator, built over the MPI split
  exactly as `mpi_cpu` splits it (`Comm.Split(color, key)`), so NCCL rank i is member i of
  `ir.Communicator.members` and chunk i of a gather or scatter is member i's, as the chunk maps
  say. The unique id is made by member 0 and broadcast over the split.
- all_to_all: NCCL has none; a group of sends and recvs (chunk j of member i's src to chunk i of
  member j's dst) with the own chunk copied on the stream.
- barrier: a one-element all-reduce of the communicator: no member's next op starts on the GPU
  before every member's previous ops have.
- local reduce, copy, fill: CuPy kernels on the stream following the rule's data flow; a source
  that overlaps a destination without being the same elements is copied first (sources are read
  before any destination is written). compute: the stream is drained, the kernel's output is
  `numeric.opaque_output` of the bytes it read, computed on the host and copied back: a
  deterministic function of what it read, the same one the expected values use, and a
  serialisation of the GPU pipeline whose time counts in the run's time.
- one-sided ops (put, put_signal, signal_op, atomics, get, get_nbi, fetch atomics, waits, fence,
  quiet, barrier_all, sync_all): `UNSUPPORTED`, with the reason.

Exactness. NCCL reduces in its own order (rings, trees, chunks); the inputs of `numeric` make every
partial result of a sum, product, max or min representable, so every order gives the checker's
bits. float16 travels and reduces as float16 (NCCL's own arithmetic; exact for the same reason),
bfloat16 is stored as float32 holding bfloat16 values (as `numeric` stores it), reduced as float32
and rounded back to bfloat16 after the reduction (nearest even, `numeric.to_dtype`'s bits),
integers wrap in NCCL as in numpy. Every dtype and reduction op of the IR has an exact NCCL
mapping (`NCCL_TYPES`, `NCCL_OPS`); a missing one is an error that names it.

Where NCCL orders less than the checker's semantics:
- a send may complete before its recv is posted: NCCL writes into the receiver's staging buffers
  while there is room (no rendezvous), so a schedule that deadlocks under rendezvous, which the
  checker reports, may run to the end here; and a broadcast's root (or a reduce's other members)
  may return before the other members arrive. With two-sided ops and collectives alone (all this
  backend runs) neither is visible in memory: a rank's buffers change only through its own ops.
- a collective member, or a send, completes and goes on while the other side still writes its
  output, and a send reads its source while its group runs: the checker models both (each side
  completes on its own; a posted send may read its source until it completes).
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import random
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field, replace

import numpy as np

from .. import ir
from ..errors import MissingDependency
from ..semantics.backends import Backend, no_grouped_collectives, plain_connection, register
from ..semantics.match import members_of
from ..semantics.rules import chunks, rule
from ..semantics import numeric
from .mpi_cpu import JITTER_S, NAP_S, SPIN, Hang, PeerFailed
from .progress import Phase, Progress

NAME = "cupy"
CUPY_HINT = ("pip install 'clockworks-dist[gpu-cu13]' (CUDA 13), or pip install cupy-cuda12x nvidia-nccl-cu12 "
             "(CUDA 12)")
ONE_SIDED = ("NVSHMEM one-sided ops run in the generated CUDA of `clockworks codegen` (to come); the mpi-cpu "
             "backend runs them on CPUs (--backend mpi-cpu)")
# NCCL's datatype for each IR dtype, as stored (`numeric.STORAGE`: bfloat16 as float32 values)
NCCL_TYPES = {"float16": "NCCL_FLOAT16", "bfloat16": "NCCL_FLOAT32", "float32": "NCCL_FLOAT32",
              "float64": "NCCL_FLOAT64", "int32": "NCCL_INT32", "int64": "NCCL_INT64", "uint32": "NCCL_UINT32",
              "uint64": "NCCL_UINT64"}
NCCL_OPS = {"sum": "NCCL_SUM", "prod": "NCCL_PROD", "max": "NCCL_MAX", "min": "NCCL_MIN"}
ABORT_WAIT_S = 2.0  # how long a rank that stops waits for ncclCommAbort before it reports anyway
DELAY_KERNEL = r"""
extern "C" __global__ void clockworks_delay(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < ns);
}
"""


# ------------------------------------------------------------------------- the launcher's side
def require_cupy() -> None:
    """`MissingDependency` unless CuPy and its NCCL binding are importable (imported here: the
    launcher needs it to count GPUs anyway)."""
    if importlib.util.find_spec("cupy") is None:
        raise MissingDependency(f"the cupy backend needs CuPy with NCCL, which is not installed: {CUPY_HINT}")
    try:
        from cupy.cuda import nccl
    except Exception as exc:  # noqa: BLE001 (a broken install says why)
        raise MissingDependency(f"the cupy backend cannot import cupy.cuda.nccl ({type(exc).__name__}: {exc}): "
                                f"{CUPY_HINT}") from None
    if not getattr(nccl, "available", False):
        raise MissingDependency(f"CuPy is installed but finds no NCCL library: {CUPY_HINT}")


def visible_gpus() -> int:
    """The GPUs this process sees (CuPy's count, which honours CUDA_VISIBLE_DEVICES; else the lines
    of `nvidia-smi -L`; 0 when neither finds one)."""
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # noqa: BLE001 (no driver, no device: count another way)
        pass
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        done = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in done.stdout.splitlines() if line.startswith("GPU "))


# ----------------------------------------------------------------------- per process: NCCL
# NCCL communicators live as long as the process: a job of many schedules (a sweep of sizes)
# initialises each communicator once. Keyed by the schedule communicator's name and its members'
# world ranks in NCCL rank order: two communicators of the same ranks stay two NCCL communicators,
# since each orders its collectives, and matches its sends and recvs, on its own.
_NCCL: dict[tuple[str, tuple[int, ...]], object] = {}
_PROCESS: dict[str, object] = {}


def _abort_all() -> None:
    """Abort every NCCL communicator of this process (a kernel stuck in one returns), bounded by
    `ABORT_WAIT_S`: a stopping rank reports whether or not the abort returns."""
    comms = list(_NCCL.values())
    _NCCL.clear()

    def abort() -> None:
        for comm in comms:
            try:
                comm.abort()
            except Exception:  # noqa: BLE001
                pass

    worker = threading.Thread(target=abort, daemon=True)
    worker.start()
    worker.join(ABORT_WAIT_S)


def _mpi():
    from mpi4py import MPI

    return MPI


@dataclass
class Executor:
    """One rank of one schedule on one GPU: its device buffers, NCCL communicators and stream.

    The interface of `mpi_cpu.Executor` (setup, reset, run, settle, memory, close; `deadline`,
    `progress`, `jitter`, `failed`, `hook`), plus `elapsed` (the GPU's time of the last iteration)
    and `compare` (the comparison with the checker's values, on the device)."""

    sched: ir.Schedule
    rank: int
    comm: object
    deadline: float
    progress: Progress
    jitter: int | None = None
    failed: object = None
    hook: object = None
    buffers: dict[str, object] = field(default_factory=dict)
    initial: dict[str, object] = field(default_factory=dict)
    comms: dict[str, tuple[object, tuple[int, ...]]] = field(default_factory=dict)

    # -- setup and teardown -------------------------------------------------------------------
    def setup(self) -> None:
        """Pick the GPU, create the NCCL communicators (collective over the schedule's ranks), the
        buffers and their initial values."""
        MPI = _mpi()
        self.MPI = MPI
        os.environ.setdefault("NCCL_RUNTIME_CONNECT", "0")  # connect at init: no handshake inside a run
        import cupy
        from cupy.cuda import nccl

        self.cp, self.nccl = cupy, nccl
        self._device(MPI)
        self.stream = _PROCESS.get("stream")
        if self.stream is None:
            self.stream = _PROCESS["stream"] = cupy.cuda.Stream(non_blocking=True)
            atexit.register(_abort_all)  # at exit, before MPI finalises: local, waits for no peer
        self.stream.use()
        self.program = self.sched.programs[self.rank]
        for comm in self.sched.comms:  # the same order on every rank: Split is collective
            color = comm.color[self.rank]
            split = self.comm.Split(MPI.UNDEFINED if color is None else color, comm.key[self.rank])
            members = comm.members(self.rank)
            if split != MPI.COMM_NULL:
                self.comms[comm.name] = (self._nccl(split, comm.name, members), members)
                split.Free()
        world = tuple(range(self.sched.world))
        self.comms["world"] = (self._nccl(self.comm, "world", world), world)
        for decl in self.program.buffers:
            stored = numeric.storage(decl.dtype)
            values = numeric.input_values(self.rank, decl.name, decl.dtype, 0, decl.count)
            self.initial[decl.name] = cupy.asarray(values, dtype=stored)
            self.buffers[decl.name] = cupy.empty(decl.count, dtype=stored)
        words = sum(decl.count for decl in self.sched.programs[0].signals)
        self.signals = np.zeros(words, dtype=np.uint64)  # no op of this backend writes one
        self.marks = [cupy.cuda.Event(disable_timing=True) for _ in self.program.ops]
        self.start, self.end = cupy.cuda.Event(), cupy.cuda.Event()
        self.barrier_word = cupy.zeros(1, dtype=np.int32)
        self.rng = random.Random(self.jitter * 1_000_003 + self.rank) if self.jitter is not None else None
        self.expected_on_device: tuple[int, dict] | None = None
        self.drain("the setup's copies of the inputs")

    def _device(self, MPI) -> None:
        """Use GPU `local rank % visible GPUs` (the local rank: among the ranks of this node)."""
        local = self.comm.Split_type(MPI.COMM_TYPE_SHARED, key=self.rank)
        index = local.Get_rank()
        local.Free()
        if "device" not in _PROCESS:
            count = self.cp.cuda.runtime.getDeviceCount()
            if count == 0:
                raise RuntimeError("no GPU is visible to this rank")
            _PROCESS["device"] = index % count
        self.device = _PROCESS["device"]
        self.cp.cuda.Device(self.device).use()

    def _nccl(self, mpi_comm, name: str, members: tuple[int, ...]):
        """The NCCL communicator `name` of `members` (the ranks of `mpi_comm`, in its rank order):
        made once per process, its unique id from member 0 over `mpi_comm`, then warmed up (every
        p2p connection and the collectives' rings made now, not inside a timed run)."""
        found = _NCCL.get((name, members))
        if found is not None:
            return found
        nccl = self.nccl
        uid = nccl.get_unique_id() if mpi_comm.Get_rank() == 0 else None
        uid = mpi_comm.bcast(uid, root=0)
        made = nccl.NcclCommunicator(len(members), uid, mpi_comm.Get_rank())
        _NCCL[(name, members)] = made
        if len(members) > 1:
            me = mpi_comm.Get_rank()
            word = self.cp.zeros(2 * len(members), dtype=np.uint8)
            made.allReduce(word.data.ptr, word.data.ptr, 1, nccl.NCCL_UINT8, nccl.NCCL_SUM, self.stream.ptr)
            nccl.groupStart()
            try:
                for peer in range(len(members)):
                    if peer != me:
                        made.send(word.data.ptr + peer, 1, nccl.NCCL_UINT8, peer, self.stream.ptr)
                        made.recv(word.data.ptr + len(members) + peer, 1, nccl.NCCL_UINT8, peer, self.stream.ptr)
            finally:
                nccl.groupEnd()
            self.drain(f"the first exchange of a new NCCL communicator of ranks {', '.join(map(str, members))}")
        return made

    def close(self) -> None:
        """Release the buffers (the NCCL communicators stay for the next schedule of the job)."""
        self.drain("the end of the schedule")
        self.buffers.clear()
        self.initial.clear()
        self.expected_on_device = None
        self.cp.get_default_memory_pool().free_all_blocks()

    # -- one iteration ------------------------------------------------------------------------
    def reset(self) -> None:
        """Inputs by the formula of `numeric` (copied from the device's initial values), then every
        rank meets."""
        for name, values in self.initial.items():
            self.buffers[name][...] = values
        self.signals[:] = 0
        self.drain("the copies of the inputs")
        self.meet(self.comm, "the other ranks to arrive at the barrier before the run")

    def run(self) -> None:
        """Issue the rank's program onto the stream, op by op, with an event after each."""
        stream = self.stream
        self.start.record(stream)
        for index, op in enumerate(self.program.ops):
            self.progress.op(index)
            self.index = index
            if self.hook is not None:
                self.hook(self, index)
            if self.rng is not None and self.rng.random() < 0.5:
                self.delay(self.rng.uniform(0, JITTER_S))
            CUPY.lookup(op)(self, op)
            self.marks[index].record(stream)
        self.end.record(stream)

    def settle(self) -> None:
        """Wait (bounded) until the GPU has run every op, then every rank meets: the memory is the
        checker's terminal state. It is also the memory when the rank's program ended, which is
        when the caller reads its outputs: this executor runs no one-sided op (`UNSUPPORTED`), and
        NCCL's recvs and collectives complete on the rank's own stream, so once its last op has
        run no other rank writes its memory (the meeting after it changes nothing)."""
        self.wait_ops()
        self.progress.set(Phase.SETTLING)
        self.end.synchronize()  # recorded after the last op, which is done
        self.meet(self.comm, "the other ranks to arrive at the barrier after the run")

    def elapsed(self) -> float:
        """Seconds between the events before the first and after the last op of the last run."""
        return self.cp.cuda.get_elapsed_time(self.start, self.end) / 1e3

    def memory(self) -> dict[str, np.ndarray]:
        """A host copy of every buffer."""
        self.drain("the copies of the buffers to the host")
        return {name: self.cp.asnumpy(array) for name, array in self.buffers.items()}

    def compare(self, expect, iteration: int):
        """`compare.compare_rank` of this rank's memory, done on the device when every element
        equals the checker's value (the common case); else on the host, for the full report."""
        from .compare import compare_rank

        cp = self.cp
        if self.expected_on_device is None or self.expected_on_device[0] != id(expect):
            self.expected_on_device = (id(expect), {
                name: (cp.asarray(want.expected), cp.asarray(want.checked), int(want.checked.sum()),
                       None if want.post is None else cp.asarray(want.post),
                       None if want.post is None else cp.asarray(want.post_mask),
                       0 if want.post is None else int(want.post_mask.sum()))
                for name, want in expect.buffers.items()})
        checked = post_checked = 0
        for name, (want, mask, count, post, post_mask, post_count) in self.expected_on_device[1].items():
            got = _bits(cp, self.buffers[name])
            wrong = int(cp.count_nonzero(mask & (got != _bits(cp, want))))
            if post is not None:
                wrong += int(cp.count_nonzero(post_mask & (got != _bits(cp, post))))
            if wrong:
                return compare_rank(expect, self.memory(), self.signals.copy(), iteration)
            checked += count
            post_checked += post_count
        out = compare_rank(replace(expect, buffers={}), {}, self.signals.copy(), iteration)
        out.checked += checked
        out.post_checked += post_checked
        return out

    # -- helpers ------------------------------------------------------------------------------
    def view(self, region: ir.Region):
        """The elements of a region of this rank (a view: writes land in the buffer)."""
        return self.buffers[region.buffer][region.start:region.stop]

    def dtype(self, region: ir.Region) -> str:
        """The IR dtype of a region's buffer."""
        return self.program.buffer(region.buffer).dtype

    def nbytes(self, region: ir.Region) -> int:
        return region.count * numeric.storage(self.dtype(region)).itemsize

    def nccl_type(self, region: ir.Region) -> int:
        """NCCL's datatype for a region's buffer (`NCCL_TYPES`)."""
        dtype = self.dtype(region)
        if dtype not in NCCL_TYPES or not hasattr(self.nccl, NCCL_TYPES[dtype]):
            raise ValueError(f"the cupy backend has no exact NCCL datatype for {dtype} (NCCL has "
                             f"{', '.join(sorted(NCCL_TYPES))}); run this schedule with --backend mpi-cpu")
        return getattr(self.nccl, NCCL_TYPES[dtype])

    def nccl_op(self, name: str) -> int:
        if name not in NCCL_OPS:
            raise ValueError(f"the cupy backend has no NCCL reduction for {name!r} (it has "
                             f"{', '.join(NCCL_OPS)}); run this schedule with --backend mpi-cpu")
        return getattr(self.nccl, NCCL_OPS[name])

    def source(self, src: ir.Region, dsts) -> object:
        """`src`'s view, or a copy of it when it overlaps a destination in `dsts` without being the
        same elements as the only one (an elementwise op reading and writing the same element is
        safe; a shifted overlap, or a second destination written after it, is not)."""
        array = self.view(src)
        targets = [dst for dst in dsts if dst is not None]
        for dst in targets:
            if self.overlaps(src, dst) and (len(targets) > 1 or (dst.start, dst.stop) != (src.start, src.stop)):
                return array.copy()
        return array

    def overlaps(self, a: ir.Region, b: ir.Region | None) -> bool:
        return b is not None and a.buffer == b.buffer and a.start < b.stop and b.start < a.stop

    def round(self, region: ir.Region) -> None:
        """After an NCCL reduction of bfloat16 (as float32): round to bfloat16 in place."""
        if self.dtype(region) == "bfloat16":
            array = self.view(region)
            array[...] = _round_bfloat16(self.cp, array)

    def delay(self, seconds: float) -> None:
        """--jitter: a kernel that spins on the GPU's clock for `seconds` before the next op."""
        kernel = _PROCESS.get("delay")
        if kernel is None:
            kernel = _PROCESS["delay"] = self.cp.RawKernel(DELAY_KERNEL, "clockworks_delay")
        kernel((1,), (1,), (np.uint64(int(seconds * 1e9)),))  # on the current stream: ours

    def expired(self) -> bool:
        return time.time() > self.deadline

    def wait(self, test, waiting) -> None:
        """Call `test()` until it returns True; at the deadline abort NCCL and raise `Hang`, and
        raise `PeerFailed` when a rank of the job died. Sleeps between tests once it has spun."""
        tries = 0
        while not test():
            tries += 1
            self.progress.beat()
            if self.failed is not None and self.failed():
                detail = waiting()
                _abort_all()
                raise PeerFailed("another rank of the job died", detail)
            if self.expired():
                detail = waiting()
                _abort_all()
                raise Hang("the deadline passed", detail)
            if tries > SPIN:
                time.sleep(min(NAP_S[1], NAP_S[0] * 2 ** min(tries - SPIN, 10)))
            else:
                os.sched_yield()

    def wait_ops(self) -> None:
        """Poll the events after each op until the last op is done; the progress word follows the
        op the GPU is in, so a hang names it."""
        done = 0
        count = len(self.marks)

        def test() -> bool:
            nonlocal done
            start = done
            while done < count and self.marks[done].done:
                done += 1
            if done < count and done != start:
                self.progress.op(done)
            return done == count

        if count:
            self.progress.op(0)
        self.wait(test, lambda: _waiting(self, self.program.ops[done]))

    def drain(self, what: str) -> None:
        """Wait (bounded) until everything issued on the stream so far is done."""
        event = self.cp.cuda.Event(disable_timing=True)
        event.record(self.stream)
        self.wait(lambda: event.done, lambda: f"the GPU to finish {what}")

    def meet(self, comm, what: str) -> None:
        """An MPI barrier with a timeout (the GPU's work before it is done: `drain` first)."""
        request = comm.Ibarrier()
        self.wait(lambda: request.Test(), lambda: what)


def _bits(cp, array):
    """`array` viewed as unsigned integers of its width (bitwise comparison, as `numeric.same_bits`)."""
    return array.view({1: cp.uint8, 2: cp.uint16, 4: cp.uint32, 8: cp.uint64}[array.dtype.itemsize])


def _round_bfloat16(cp, values):
    """float32 values rounded to the nearest bfloat16 (ties to even), as `numeric.to_dtype` does."""
    bits = values.view(cp.uint32)
    rounded = (bits + cp.uint32(0x7FFF) + ((bits >> cp.uint32(16)) & cp.uint32(1))) & cp.uint32(0xFFFF0000)
    return cp.where(cp.isnan(values), cp.float32(np.nan), rounded.view(cp.float32))


def _combine(ex: Executor, how: str, left, right, dtype: str, out=None):
    """`left how right` elementwise in the stored dtype, rounded to `dtype` (`numeric.combine`)."""
    cp = ex.cp
    ufunc = {"sum": cp.add, "prod": cp.multiply, "max": cp.maximum, "min": cp.minimum}[how]
    if dtype == "bfloat16":
        result = _round_bfloat16(cp, ufunc(left, right))
        if out is None:
            return result
        out[...] = result
        return out
    return ufunc(left, right) if out is None else ufunc(left, right, out=out)


def _waiting(ex: Executor, op) -> str:
    """What an op the GPU is in waits for (the shape of `mpi_cpu`'s reports)."""
    if op.kind in ("send", "recv", "group"):
        parts = []
        for _sub, member in members_of(op):
            parts.append(f"its matching recv on rank {member.peer}" if member.kind == "send"
                         else f"the matching send from rank {member.peer}")
        return " and ".join(parts) + " (NCCL, on the GPU)"
    if op.kind in ir.COLLECTIVE_KINDS:
        name = getattr(op, "comm", "world")
        _comm, members = ex.comms.get(name, (None, ()))
        return f"the other members of {name} (ranks {', '.join(map(str, members))}) (NCCL, on the GPU)"
    return "the GPU to finish it"


# ----------------------------------------------------------------------------- two-sided ops
def p2p(ex: Executor, op) -> None:
    """Send, recv or a group: every member issued inside one NCCL group; a recv with `reduce`
    receives into scratch, then `dst = dst reduce received` on the stream (RecvRule)."""
    nccl, stream = ex.nccl, ex.stream.ptr
    combine = []
    nccl.groupStart()
    try:
        for _sub, member in members_of(op):
            comm, members = ex.comms[member.comm]
            peer = members.index(member.peer)
            if member.kind == "send":
                comm.send(ex.view(member.src).data.ptr, ex.nbytes(member.src), nccl.NCCL_UINT8, peer, stream)
                continue
            into = ex.view(member.dst)
            if member.reduce is not None:
                into = ex.cp.empty_like(into)
                combine.append((member, into))
            comm.recv(into.data.ptr, ex.nbytes(member.dst), nccl.NCCL_UINT8, peer, stream)
    finally:
        nccl.groupEnd()
    for member, received in combine:
        dst = ex.view(member.dst)
        _combine(ex, member.reduce, dst, received, ex.dtype(member.dst), out=dst)


# ------------------------------------------------------------------------------- collectives
def _comm(ex: Executor, op):
    return ex.comms[op.comm]


def all_reduce(ex: Executor, op: ir.AllReduce) -> None:
    """AllReduceRule: every member's dst = the reduction of every src (ncclAllReduce; in place
    when src and dst are the same elements)."""
    comm, _members = _comm(ex, op)
    send = ex.source(op.src, (op.dst,))
    comm.allReduce(send.data.ptr, ex.view(op.dst).data.ptr, op.src.count, ex.nccl_type(op.src),
                   ex.nccl_op(op.op), ex.stream.ptr)
    ex.round(op.dst)


def all_gather(ex: Executor, op: ir.AllGather) -> None:
    """AllGatherRule: chunk j of dst = member j's src (ncclAllGather, NCCL rank j = member j)."""
    comm, _members = _comm(ex, op)
    send = ex.view(op.src).copy() if ex.overlaps(op.src, op.dst) else ex.view(op.src)
    comm.allGather(send.data.ptr, ex.view(op.dst).data.ptr, ex.nbytes(op.src), ex.nccl.NCCL_UINT8, ex.stream.ptr)


def reduce_scatter(ex: Executor, op: ir.ReduceScatter) -> None:
    """ReduceScatterRule: member i's dst = the reduction of chunk i of every src
    (ncclReduceScatter)."""
    comm, _members = _comm(ex, op)
    send = ex.view(op.src).copy() if ex.overlaps(op.src, op.dst) else ex.view(op.src)
    comm.reduceScatter(send.data.ptr, ex.view(op.dst).data.ptr, op.dst.count, ex.nccl_type(op.src),
                       ex.nccl_op(op.op), ex.stream.ptr)
    ex.round(op.dst)


def broadcast(ex: Executor, op: ir.Broadcast) -> None:
    """BroadcastRule: every member's dst = the root's src (ncclBroadcast), the root's included."""
    comm, members = _comm(ex, op)
    dst = ex.view(op.dst)
    send = ex.source(op.src, (op.dst,)) if op.root == ex.rank else dst
    comm.broadcast(send.data.ptr, dst.data.ptr, ex.nbytes(op.dst), ex.nccl.NCCL_UINT8, members.index(op.root),
                   ex.stream.ptr)


def reduce_to(ex: Executor, op: ir.ReduceTo) -> None:
    """ReduceToRule: the root's dst = the reduction of every member's src (ncclReduce)."""
    comm, members = _comm(ex, op)
    mine = op.root == ex.rank
    send = ex.source(op.src, (op.dst,)) if mine else ex.view(op.src)
    into = ex.view(op.dst) if mine else send
    comm.reduce(send.data.ptr, into.data.ptr, op.src.count, ex.nccl_type(op.src), ex.nccl_op(op.op),
                members.index(op.root), ex.stream.ptr)
    if mine:
        ex.round(op.dst)


def all_to_all(ex: Executor, op: ir.AllToAll) -> None:
    """AllToAllRule: chunk j of member i's src lands in chunk i of member j's dst. NCCL has no
    all-to-all: one group of a send and a recv per other member; the own chunk is a copy on the
    stream, before the group (src is copied first if it overlaps dst)."""
    comm, members = _comm(ex, op)
    nccl, stream, n = ex.nccl, ex.stream.ptr, len(members)
    me = members.index(ex.rank)
    src_cut, dst_cut = chunks(op.src, n), chunks(op.dst, n)
    staged = ex.view(op.src).copy() if ex.overlaps(op.src, op.dst) else None

    def send_view(j: int):
        if staged is None:
            return ex.view(src_cut[j])
        offset = src_cut[j].start - op.src.start
        return staged[offset:offset + src_cut[j].count]

    ex.view(dst_cut[me])[...] = send_view(me)
    nccl.groupStart()
    try:
        for j in range(n):
            if j != me:
                comm.send(send_view(j).data.ptr, ex.nbytes(src_cut[j]), nccl.NCCL_UINT8, j, stream)
                comm.recv(ex.view(dst_cut[j]).data.ptr, ex.nbytes(dst_cut[j]), nccl.NCCL_UINT8, j, stream)
    finally:
        nccl.groupEnd()


def barrier(ex: Executor, op: ir.Barrier) -> None:
    """BarrierRule: a one-element all-reduce on the communicator (every member's ops before it are
    done on its GPU before any member's ops after it start)."""
    comm, _members = _comm(ex, op)
    word = ex.barrier_word
    comm.allReduce(word.data.ptr, word.data.ptr, 1, ex.nccl.NCCL_INT32, ex.nccl.NCCL_MAX, ex.stream.ptr)


# -------------------------------------------------------------------------------------- local
def local(ex: Executor, op) -> None:
    """reduce, copy, fill, compute: the rule's data flow (`Move`s) as CuPy kernels on the stream,
    sources read before any destination is written, combined left to right in the dtype."""
    for move in rule(op).flows(op, ex.rank):
        dsts = [dst for _r, dst in move.dsts]
        if move.value is not None:
            for dst in dsts:
                ex.view(dst).fill(numeric.constant(move.value, 1, ex.dtype(dst))[0])
            continue
        if move.opaque is not None:
            _opaque(ex, move)
            continue
        sources = [ex.source(src, dsts) for _r, src in move.srcs]
        for dst in dsts:
            out = ex.view(dst)
            if len(sources) == 1:
                out[...] = sources[0]
                continue
            acc = sources[0]
            for i, source in enumerate(sources[1:], start=1):
                acc = _combine(ex, move.combine, acc, source, ex.dtype(dst), out=out if i == len(sources) - 1 else None)


def _opaque(ex: Executor, move) -> None:
    """A compute kernel: the stream is drained, then `numeric.opaque_output` of what it read (on the
    host) is copied into its writes, in order."""
    ex.drain("the ops before this compute kernel")
    sources = [ex.cp.asnumpy(ex.view(src)) for _r, src in move.srcs]
    total = sum(dst.count for _r, dst in move.dsts)
    out = numeric.opaque_output(move.opaque, ex.rank, ex.index, sources, total)
    offset = 0
    for _r, dst in move.dsts:
        values = numeric.to_dtype(out[offset:offset + dst.count], ex.dtype(dst))
        ex.view(dst)[...] = ex.cp.asarray(values)
        offset += dst.count


TABLE = {
    ir.Send: p2p, ir.Recv: p2p, ir.Group: p2p,
    ir.AllReduce: all_reduce, ir.AllGather: all_gather, ir.ReduceScatter: reduce_scatter, ir.Broadcast: broadcast,
    ir.ReduceTo: reduce_to, ir.AllToAll: all_to_all, ir.Barrier: barrier,
    ir.LocalReduce: local, ir.Copy: local, ir.Fill: local, ir.Compute: local,
}
UNSUPPORTED = {cls: ONE_SIDED for cls in (
    ir.Put, ir.PutSignal, ir.SignalUpdate, ir.Atomic, ir.Get, ir.GetNbi, ir.FetchAtomic, ir.SignalStore, ir.WaitUntil,
    ir.WaitUntilAll, ir.WaitUntilAny, ir.Fence, ir.Quiet, ir.BarrierAll, ir.SyncAll, ir.TeamSplit, ir.TeamBarrier)}
THREAD_SYNC = ("events and thread barriers order the threads of a rank, which this backend does not run "
               "(the mpi-cpu executor runs them, `clockworks check` explores them)")
UNSUPPORTED.update({cls: THREAD_SYNC for cls in (ir.RecordEvent, ir.WaitEvent, ir.ThreadBarrier)})
CUPY = register(Backend(NAME, table=TABLE, unsupported=UNSUPPORTED,
                        limits={ir.Send: plain_connection, ir.Recv: plain_connection,
                                ir.Group: no_grouped_collectives}))
