"""The `mpi-cpu` executor: a schedule run by numpy and MPI (mpi4py), one process per rank.

A table keyed by op class (`semantics.backends`), each entry implementing its op's rule in
`semantics.rules`: the data flow of local ops is the rule's `Move`s, a wait reads the rule's
`awaits`, a delivery's word update is the rule's `word_update`, a put reads its source at issue or
at delivery as the rule's accesses say. mpi4py is imported when an executor starts, so this module
(and its table, which the coverage test walks) loads without it.

How each part of the semantics (DESIGN.md) maps onto MPI, and why the MPI rule is at least as
strong (it may forbid executions the checker allows, never allow one it forbids):
- send/recv: `Issend`/`Irecv`. A synchronous send completes only once its receive has matched, so
  no send completes alone (rendezvous, no eager buffering). One tag per communicator: MPI's
  non-overtaking rule matches sends and receives first-in-first-out per (communicator, sender,
  receiver), exactly the checker's FIFO matching. A group posts every member, then waits for all
  (`Testall` in a loop bounded by the timeout), completing in any order. A channel other than 0 has
  a tag of its own, so each (communicator, channel, sender, receiver) is matched in order on its own.
- connections with slots (`ir.Send.slots`): the send copies `src` into an `Isend` and completes; the
  recv, once its data is in `dst`, sends the sender a zero-byte credit on the channel's credit tag;
  the send of message k waits for the credit of message k - slots. So a send completes alone only
  while its FIFO has room, and room comes back only once a recv has completed, as the checker's
  rule says (the sender waits at least as long). At the end of its program a rank takes the credits
  still owed to it and completes its sends (`drain_connections`), bounded by the timeout.
- collectives: the MPI collective of the same name on a communicator split as the schedule declares
  (`Comm.Split(color, key)` orders members by (key, world rank), as `ir.Communicator.members`
  does), so chunk i of a gather or scatter is communicator member i, as the rules' chunk maps say.
- collectives in a group: NCCL posts a group's collectives together, each matching the k-th
  collective of its communicator in the order each rank posts them, so two communicators' may be
  posted in different orders by different ranks. MPI: each member is its nonblocking collective
  (`Iallreduce`, `Iallgather`, `Ireduce_scatter_block`, `Ibcast`, `Ireduce`, `Ialltoall`) on the
  member's communicator, posted beside the group's `Issend`/`Irecv`, in the rank's posting order
  per communicator (a rooted one's barrier completed first, and the communicator's later members
  posted after it), then all completed together, in any order, bounded by the deadline. MPI
  matches nonblocking collectives per communicator in the order each process posts them, as the
  checker's matching does, and collectives on different communicators progress independently, so
  the group never waits for one member to finish before another starts. At least as strong: each
  member is the same MPI collective, with the same barrier, as the op alone, and writes its dst
  (from scratch, for the reductions and the broadcast) only once it completes.
- one-sided: one RMA window per symmetric buffer and one of uint64 signal words, passive target
  (`Lock_all` once). Each NVSHMEM rule, next to its op below, names the MPI rule it maps to.
- local reduce, copy, fill, compute: numpy, through the rules' data flow and `numeric`'s arithmetic.

Where MPI orders less than one might assume, the checker's semantics follows MPI (found by running
random verified schedules; each is a seeded race in protocols/buggy/ now): a send's source may be
read at any time from its post until it completes; a synchronous send completes once its recv has
matched, before the receiver has written (or reduced into) dst; a collective completes on one
member before another has written its output. Where the checker's semantics is stronger than MPI,
the executor adds the order: a rooted collective (broadcast, reduce) starts with a barrier, since
the checker starts a collective only once every member has arrived and MPI lets a root return
before the others arrive.
"""

from __future__ import annotations

import os
import random
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from .. import ir
from ..semantics.arithmetic import compare
from ..semantics.backends import Backend, register
from ..semantics.match import members_of
from ..semantics.rules import When, rule
from ..semantics import numeric
from .progress import Phase, Progress

NAME = "mpi-cpu"
TAG = 7  # the tag of channel 0's sends and recvs: FIFO per (communicator, sender, receiver)


def data_tag(channel: int) -> int:
    """The tag of a channel's messages: FIFO per (communicator, channel, sender, receiver)."""
    return TAG if channel == 0 else 16 + 2 * channel


def credit_tag(channel: int) -> int:
    """The tag of the credits a receiver returns on a connection with slots."""
    return 17 + 2 * channel
SPIN = 32  # tests of a request before a wait starts to sleep between tests
NAP_S = (2e-5, 1e-3)  # first and longest sleep between tests: ranks may outnumber the cores
JITTER_S = 2e-3  # --jitter: up to this long before an op, for half the ops


class Stopped(Exception):
    """The run of a rank stopped before the end of its program; `detail` says what it waited for."""

    status = "error"

    def __init__(self, message: str, detail: str = ""):
        super().__init__(message)
        self.detail = detail


class Hang(Stopped):
    """A wait passed the deadline."""

    status = "timeout"


class PeerFailed(Stopped):
    """Another rank of the job died (the launcher's mpiexec signalled it)."""

    status = "stopped"


def _mpi():
    from mpi4py import MPI

    return MPI


@dataclass
class Executor:
    """One rank of one schedule: its buffers, windows and communicators, and the ops' implementations.

    `comm` holds exactly the schedule's ranks (world rank = rank in `comm`); `deadline` is a
    `time.time()` after which every wait raises `Hang`; `jitter` seeds the random delays (None:
    none); `failed` is a callable telling whether the launcher reported a dead peer."""

    sched: ir.Schedule
    rank: int
    comm: object
    deadline: float
    progress: Progress
    jitter: int | None = None
    failed: object = None
    hook: object = None  # called with each op's index before it runs (fault injection in tests)
    buffers: dict[str, np.ndarray] = field(default_factory=dict)
    windows: dict[str, object] = field(default_factory=dict)
    comms: dict[str, tuple[object, tuple[int, ...]]] = field(default_factory=dict)
    signal_offset: dict[str, int] = field(default_factory=dict)
    # plain puts not yet issued to MPI: (window, bytes, pe, target), issued at the rank's next
    # fence, quiet or barrier_all, or after the run (`flush_all`), the latest NVSHMEM allows
    deferred: list = field(default_factory=list)
    # connections with slots, per (communicator, peer, channel): messages sent and credits taken this
    # run; and the requests (data sent, credits returned) completed at the program's end
    fifo_sent: dict = field(default_factory=dict)
    fifo_credits: dict = field(default_factory=dict)
    outstanding: list = field(default_factory=list)
    _here: threading.local = field(default_factory=threading.local)  # per thread of the rank: its op
    # events and thread barriers of the rank's threads, this run: the (event, record)s made, and per
    # barrier each thread's arrivals so far
    recorded: set = field(default_factory=set)
    arrivals: dict = field(default_factory=dict)
    sync_lock: threading.Lock = field(default_factory=threading.Lock)

    # -- setup and teardown -------------------------------------------------------------------
    def setup(self) -> None:
        """Create the communicators, buffers and windows (collective over the schedule's ranks)."""
        MPI = _mpi()
        self.MPI = MPI
        self.program = self.sched.programs[self.rank]
        for comm in self.sched.comms:  # the same order on every rank: Split is collective
            color = comm.color[self.rank]
            split = self.comm.Split(MPI.UNDEFINED if color is None else color, comm.key[self.rank])
            self.comms[comm.name] = (split, comm.members(self.rank))
        self.comms["world"] = (self.comm, tuple(range(self.sched.world)))
        decls = {b.name: b for b in self.program.buffers}
        for name in sorted(n for n, b in decls.items() if b.symmetric):  # collective: one order everywhere
            nbytes = decls[name].count * numeric.storage(decls[name].dtype).itemsize
            win = MPI.Win.Allocate(nbytes, 1, comm=self.comm)
            self.windows[name] = win
            self.buffers[name] = np.frombuffer(win.tomemory(), dtype=numeric.storage(decls[name].dtype))
        for name, decl in decls.items():
            if not decl.symmetric:
                self.buffers[name] = np.zeros(decl.count, dtype=numeric.storage(decl.dtype))
        words = 0
        for decl in self.sched.programs[0].signals:  # the machine's word layout (`Model.sig_word`)
            self.signal_offset[decl.name] = words
            words += decl.count
        self.signal_win = MPI.Win.Allocate(max(words, 1) * 8, 1, comm=self.comm)
        self.signals = np.frombuffer(self.signal_win.tomemory(), dtype=np.uint64)[:words]
        self.all_windows = list(self.windows.values()) + [self.signal_win]
        for win in self.all_windows:
            win.Lock_all(MPI.MODE_NOCHECK)
        self.rng = random.Random(self.jitter * 1_000_003 + self.rank) if self.jitter is not None else None

    def close(self) -> None:
        """Release the windows and communicators (collective)."""
        for win in self.all_windows:
            win.Unlock_all()
            win.Free()
        for name, (comm, _members) in self.comms.items():
            if name != "world" and comm != self.MPI.COMM_NULL:
                comm.Free()

    # -- one iteration ------------------------------------------------------------------------
    def reset(self) -> None:
        """Inputs by the formula of `numeric`, signal words 0, then every rank meets."""
        self.deferred.clear()  # a run that stopped early may leave some
        self.fifo_sent.clear()
        self.fifo_credits.clear()
        self.outstanding.clear()
        self.recorded.clear()
        self.arrivals.clear()
        for decl in self.program.buffers:
            self.buffers[decl.name][:] = numeric.input_values(self.rank, decl.name, decl.dtype, 0, decl.count)
        self.signals[:] = 0
        self.sync_windows()
        self.meet(self.comm, "the other ranks to arrive at the barrier before the run")

    def run(self) -> None:
        """Execute the rank's program, op by op (a rank with threads: each thread on its own)."""
        if self.program.threads:
            self.run_threads()
        else:
            self.actor = self.rank
            for index, op in enumerate(self.program.ops):
                self.run_op(index, index, op)
        self.drain_connections()

    def run_op(self, flat: int, index: int, op) -> None:
        """One op: `flat` is its place among the rank's ops (threads one after another: the progress
        row's), `index` its place in its own program (as the checker numbers it)."""
        self.progress.op(flat)
        self.index = index
        if self.hook is not None:
            self.hook(self, flat)
        if self.rng is not None and self.rng.random() < 0.5:
            time.sleep(self.rng.uniform(0, JITTER_S))
        MPI_CPU.lookup(op)(self, op)

    def run_threads(self) -> None:
        """The rank's threads (`ir.Thread`), each on a Python thread of its own that runs its ops in
        order, all at once; the program ends when every one has (the rank's end). MPI is started with
        MPI_THREAD_MULTIPLE, so the threads call it concurrently. Each thread's sends and recvs use its
        connection's tag, so two threads' messages never meet each other's recvs. A thread that stops
        (a hang, an error) stops the run, naming the thread."""
        if self.MPI.Query_thread() < self.MPI.THREAD_MULTIPLE:
            raise Stopped("MPI was not started with MPI_THREAD_MULTIPLE", "a rank with threads needs it")
        threads = self.program.threads
        # the checker's actor of each thread (`semantics.threads.expand`): ranks first, then every thread
        first = self.sched.world + sum(len(p.threads) for p in self.sched.programs[:self.rank])
        failures: list[tuple[ir.Thread, BaseException]] = []
        offsets = [sum(len(t.ops) for t in threads[:i]) for i in range(len(threads))]

        def body(number: int, thread: ir.Thread) -> None:
            self.actor = first + number
            try:
                for index, op in enumerate(thread.ops):
                    self.run_op(offsets[number] + index, index, op)
            except BaseException as exc:  # noqa: BLE001 (reported by the rank, below)
                failures.append((thread, exc))

        runners = [threading.Thread(target=body, args=(n, t), name=f"cw-{t.name}", daemon=True)
                   for n, t in enumerate(threads)]
        for runner in runners:
            runner.start()
        for runner in runners:
            runner.join(max(self.deadline - time.time(), 0) + 1)
        if failures:
            thread, exc = failures[0]
            if isinstance(exc, Stopped):
                raise type(exc)(str(exc), f"{thread.kind} {thread.name}: {exc.detail}") from exc
            raise RuntimeError(f"{thread.kind} {thread.name}: {type(exc).__name__}: {exc}") from exc
        alive = [t for t, r in zip(threads, runners) if r.is_alive()]
        if alive:
            raise Hang("the deadline passed", ", ".join(f"{t.kind} {t.name} still running" for t in alive))

    @property
    def index(self) -> int:
        """The op running on the calling thread: its place in its program."""
        return self._here.index

    @index.setter
    def index(self, value: int) -> None:
        self._here.index = value

    @property
    def actor(self) -> int:
        """The checker's actor of the calling thread: the rank, or one of its threads."""
        return self._here.actor

    @actor.setter
    def actor(self, value: int) -> None:
        self._here.actor = value

    def drain_connections(self) -> None:
        """After the program: take the credits still owed on connections with slots, and complete
        every message and credit sent, bounded by the deadline."""
        for (comm, peer, channel), sent in self.fifo_sent.items():
            mpi_comm, at = self.peer(comm, peer)
            owed = sent - self.fifo_credits.get((comm, peer, channel), 0)
            requests = [mpi_comm.Irecv([np.empty(0, np.uint8), self.MPI.BYTE], source=at, tag=credit_tag(channel))
                        for _ in range(owed)]
            self.wait_requests(requests, lambda: f"rank {peer} to receive the messages sent to it on {comm} "
                                                 f"channel {channel}")
            self.fifo_credits[(comm, peer, channel)] = sent
        if self.outstanding:
            self.wait_requests(self.outstanding, lambda: "the messages and credits sent to be received")
            self.outstanding.clear()

    def at_end(self) -> dict[str, np.ndarray]:
        """The rank's memory when its program has ended, before `settle`: what the caller reads of
        its outputs (DESIGN.md: outputs are final when their rank finishes; the checker's
        `unfinished_output`). `Win_sync` first, so local loads see every remote write that has
        completed; then every rank meets, so that no put a program left to be completed after its
        end (`deferred`) lands before every rank has read its outputs: a program that does not wait
        for a put into an output reads it stale here, every time."""
        self.sync_windows()
        memory = self.memory()
        self.meet(self.comm, "the other ranks to read their outputs at the end of their programs")
        return memory

    def settle(self) -> None:
        """After the last op: complete every delivery, meet, and make remote writes visible, so the
        memory is the checker's terminal state (no delivery in flight). The harness's, not the
        program's: outputs are read before it (`at_end`), the rest after."""
        self.progress.set(Phase.SETTLING)
        self.flush_all()
        self.meet(self.comm, "the other ranks to arrive at the barrier after the run")
        self.sync_windows()

    def memory(self) -> dict[str, np.ndarray]:
        """A copy of every buffer."""
        return {name: array.copy() for name, array in self.buffers.items()}

    # -- helpers ------------------------------------------------------------------------------
    def view(self, region: ir.Region) -> np.ndarray:
        """The elements of a region of this rank (a view: writes land in the buffer)."""
        return self.buffers[region.buffer][region.start:region.stop]

    def dtype(self, region: ir.Region) -> str:
        """The IR dtype of a region's buffer."""
        return self.program.buffer(region.buffer).dtype

    def peer(self, comm: str, world_rank: int) -> tuple[object, int]:
        """The MPI communicator of `comm` and the rank of `world_rank` in it."""
        mpi_comm, members = self.comms[comm]
        return mpi_comm, members.index(world_rank)

    def sync_windows(self) -> None:
        """`MPI_Win_sync` on every window: local loads see remote writes that completed, and remote
        accesses see local stores (the unified model's memory barrier)."""
        for win in self.all_windows:
            win.Sync()

    def flush_all(self) -> None:
        """Complete every RMA operation this rank issued, at origin and target (the deferred puts
        issued first)."""
        self.issue_deferred()
        for win in self.all_windows:
            win.Flush_all()

    def issue_deferred(self) -> None:
        """Hand the deferred plain puts to MPI, in the order they were issued."""
        for win, data, pe, target in self.deferred:
            win.Put([data, self.MPI.BYTE], pe, target=target)
        self.deferred.clear()

    def expired(self) -> bool:
        """Whether the deadline has passed."""
        return time.time() > self.deadline

    def wait(self, test, waiting) -> None:
        """Call `test()` until it returns True; raise `Hang(waiting())` at the deadline and
        `PeerFailed` when a rank of the job died. Sleeps between tests once it has spun a while."""
        tries = 0
        while not test():
            tries += 1
            self.progress.beat()
            if self.failed is not None and self.failed():
                raise PeerFailed("another rank of the job died", waiting())
            if self.expired():
                raise Hang("the deadline passed", waiting())
            if tries > SPIN:
                time.sleep(min(NAP_S[1], NAP_S[0] * 2 ** min(tries - SPIN, 10)))
            else:
                os.sched_yield()

    def wait_requests(self, requests: list, waiting) -> None:
        """Complete every request (a group's members, a collective), bounded by the deadline."""
        Request = self.MPI.Request
        self.wait(lambda: Request.Testall(requests), waiting)

    def meet(self, comm, what: str) -> None:
        """A barrier with a timeout."""
        request = comm.Ibarrier()
        self.wait_requests([request], lambda: what)


# ----------------------------------------------------------------------------- two-sided ops
def _bytes(array: np.ndarray) -> np.ndarray:
    return array.view(np.uint8)


class _Member:
    """One send or recv of a p2p op in flight: its request."""

    def __init__(self, ex: Executor, sub: int | None, op):
        self.ex, self.sub, self.op = ex, sub, op
        self.comm, self.peer = ex.peer(op.comm, op.peer)
        self.done = False
        self.received = None
        self.request = self.credit = None
        self.conn = (op.comm, op.peer, op.channel)
        if op.kind == "send":
            if not op.slots:
                self.request = self.comm.Issend([_bytes(ex.view(op.src)), ex.MPI.BYTE], dest=self.peer,
                                                tag=data_tag(op.channel))
            return  # a connection with slots: sent by `step` once its FIFO has room
        into = ex.view(op.dst)
        if op.reduce is not None:
            into = self.received = np.empty_like(into)
        self.request = self.comm.Irecv([_bytes(into), ex.MPI.BYTE], source=self.peer, tag=data_tag(op.channel))

    def _send_with_room(self) -> bool:
        """A send on a connection with slots: take a credit while the FIFO is full, then send a copy
        of `src` (read now, as the checker reads it when the send goes) and complete."""
        ex, op, conn = self.ex, self.op, self.conn
        sent = ex.fifo_sent.get(conn, 0)
        while sent - ex.fifo_credits.get(conn, 0) >= op.slots:
            if self.credit is None:
                self.credit = self.comm.Irecv([np.empty(0, np.uint8), ex.MPI.BYTE], source=self.peer,
                                              tag=credit_tag(op.channel))
            if not self.credit.Test():
                return False
            self.credit = None
            ex.fifo_credits[conn] = ex.fifo_credits.get(conn, 0) + 1
        ex.outstanding.append(self.comm.Isend([_bytes(ex.view(op.src).copy()), ex.MPI.BYTE], dest=self.peer,
                                              tag=data_tag(op.channel)))
        ex.fifo_sent[conn] = sent + 1
        self.done = True
        return True

    def step(self) -> bool:
        """Advance; True once this member is complete."""
        if self.done:
            return True
        if self.request is None:
            return self._send_with_room()
        if not self.request.Test():
            return False
        if self.received is not None:
            dst = self.ex.view(self.op.dst)
            dst[:] = numeric.combine(self.op.reduce, dst, self.received, self.ex.dtype(self.op.dst))
            self.received = None
        if self.op.slots:  # dst is written: the sender's FIFO has room for one more message
            self.ex.outstanding.append(self.comm.Isend([np.empty(0, np.uint8), self.ex.MPI.BYTE], dest=self.peer,
                                                       tag=credit_tag(self.op.channel)))
        self.done = True
        return True

    def waiting(self) -> str:
        if self.op.kind == "send" and self.op.slots:
            return f"room in its connection to rank {self.op.peer} ({self.op.slots} message(s) not yet received)"
        what = "its matching recv on" if self.op.kind == "send" else "the matching send from"
        return f"{what} rank {self.op.peer}"


def p2p(ex: Executor, op) -> None:
    """Send, recv or a group: every member posted at once (`Issend`, `Irecv`, and a group's
    collectives as `_Collective`s, in the rank's order per communicator), then all completed, in any
    order, bounded by the deadline. A recv with `reduce` receives into scratch and then computes
    `dst reduce received` (RecvRule: the received data on the right)."""
    members = [_Collective(ex, sub, member) if type(member) in POST else _Member(ex, sub, member)
               for sub, member in members_of(op)]
    queues: dict[str, list[_Collective]] = {}  # per communicator, its collectives in posting order
    for member in members:
        if isinstance(member, _Collective):
            queues.setdefault(member.comm, []).append(member)

    def test() -> bool:
        for queue in queues.values():  # the next collective on a communicator once the one before is posted
            while queue and queue[0].post():
                queue.pop(0)
        left = [m for m in members if not m.step()]
        if left and left[0].sub is not None:
            ex.progress.member(left[0].sub)
        return not left

    ex.wait(test, lambda: " and ".join(m.waiting() for m in members if not m.done))


# ------------------------------------------------------------------------------- collectives
REDUCE_OPS = {"sum": "SUM", "prod": "PROD", "max": "MAX", "min": "MIN"}


def _wire(array: np.ndarray, dtype: str) -> np.ndarray:
    """A copy of `array` in the dtype a reduction travels in (`numeric.WIRE`)."""
    return np.array(array, dtype=numeric.WIRE[dtype])


def _members_waiting(ex: Executor, op) -> str:
    _comm, members = ex.comms[getattr(op, "comm", "world")]
    return f"the other members of {getattr(op, 'comm', 'world')} (ranks {', '.join(map(str, members))})"


def _land(ex: Executor, dst: ir.Region, received: np.ndarray, wire: bool = True):
    """What writes a collective's dst from the scratch it was received into, once it completes (in
    the wire dtype of a reduction when `wire`, else already as dst stores it)."""
    def write() -> None:
        ex.view(dst)[:] = numeric.to_dtype(received, ex.dtype(dst)) if wire else received
    return write


def _post_all_reduce(ex: Executor, op: ir.AllReduce, c, _m):
    dtype = ex.dtype(op.src)
    send, received = _wire(ex.view(op.src), dtype), _wire(ex.view(op.dst), dtype)
    request = c.Iallreduce(send, received, op=getattr(ex.MPI, REDUCE_OPS[op.op]))
    return request, _land(ex, op.dst, received)


def _post_all_gather(ex: Executor, op: ir.AllGather, c, _m):
    send = ex.view(op.src).copy()  # sources are read before any destination is written
    return c.Iallgather([_bytes(send), ex.MPI.BYTE], [_bytes(ex.view(op.dst)), ex.MPI.BYTE]), None


def _post_reduce_scatter(ex: Executor, op: ir.ReduceScatter, c, _m):
    dtype = ex.dtype(op.src)
    send, received = _wire(ex.view(op.src), dtype), _wire(ex.view(op.dst), dtype)
    request = c.Ireduce_scatter_block(send, received, op=getattr(ex.MPI, REDUCE_OPS[op.op]))
    return request, _land(ex, op.dst, received)


def _post_broadcast(ex: Executor, op: ir.Broadcast, c, m):
    data = ex.view(op.src).copy() if op.root == ex.rank else np.empty_like(ex.view(op.dst))
    request = c.Ibcast([_bytes(data), ex.MPI.BYTE], root=m.index(op.root))
    return request, _land(ex, op.dst, data, wire=False)


def _post_reduce_to(ex: Executor, op: ir.ReduceTo, c, m):
    dtype = ex.dtype(op.src)
    send = _wire(ex.view(op.src), dtype)
    received = np.empty_like(send) if op.root == ex.rank else None
    request = c.Ireduce(send, received, op=getattr(ex.MPI, REDUCE_OPS[op.op]), root=m.index(op.root))
    return request, (_land(ex, op.dst, received) if op.root == ex.rank else None)


def _post_all_to_all(ex: Executor, op: ir.AllToAll, c, _m):
    send = ex.view(op.src).copy()
    return c.Ialltoall([_bytes(send), ex.MPI.BYTE], [_bytes(ex.view(op.dst)), ex.MPI.BYTE]), None


# How each collective is posted: (op, communicator, members) -> (its request, what to do once it
# completes: write dst from the scratch it was received into, or None)
POST = {ir.AllReduce: _post_all_reduce, ir.AllGather: _post_all_gather, ir.ReduceScatter: _post_reduce_scatter,
        ir.Broadcast: _post_broadcast, ir.ReduceTo: _post_reduce_to, ir.AllToAll: _post_all_to_all}
# A rooted collective starts with a barrier of its members: the checker's semantics starts a
# collective once every member has arrived, and MPI lets a broadcast's root (or a reduce's other
# members) return before the others arrive.
ROOTED = (ir.Broadcast, ir.ReduceTo)


class _Collective:
    """One collective in flight, alone or a member of a group: a rooted one's barrier (`ROOTED`),
    then its nonblocking MPI collective, then the write of its dst. `post` is called in the order the
    rank posts its collectives on the communicator, so every member posts the same MPI collectives
    on it in the same order (MPI's rule), whatever a group does on other communicators."""

    def __init__(self, ex: Executor, sub: int | None, op):
        self.ex, self.sub, self.op = ex, sub, op
        self.comm = getattr(op, "comm", "world")
        self.barrier = self.request = self.finish = None
        self.done = False

    def post(self) -> bool:
        """Post what can be posted now; True once the collective itself is posted (the next
        collective on the communicator may then be posted)."""
        if self.request is not None:
            return True
        mpi_comm, members = self.ex.comms[self.comm]
        if isinstance(self.op, ROOTED):
            if self.barrier is None:
                self.barrier = mpi_comm.Ibarrier()
            if not self.barrier.Test():
                return False
        self.request, self.finish = POST[type(self.op)](self.ex, self.op, mpi_comm, members)
        return True

    def step(self) -> bool:
        """Advance; True once this collective is complete and its dst written."""
        if self.done:
            return True
        if self.request is None or not self.request.Test():
            return False
        if self.finish is not None:
            self.finish()
        self.done = True
        return True

    def waiting(self) -> str:
        return _members_waiting(self.ex, self.op)  # the progress row names the member


def _collective(ex: Executor, op) -> None:
    """A collective of its own: post it (after a rooted one's barrier) and wait for it."""
    member = _Collective(ex, None, op)
    ex.wait(lambda: member.post() and member.step(), lambda: _members_waiting(ex, op))


def all_reduce(ex: Executor, op: ir.AllReduce) -> None:
    """AllReduceRule: every member's dst = the reduction of every src (MPI_Iallreduce)."""
    _collective(ex, op)


def all_gather(ex: Executor, op: ir.AllGather) -> None:
    """AllGatherRule: chunk j of dst = member j's src (MPI_Iallgather, member j = comm rank j)."""
    _collective(ex, op)


def reduce_scatter(ex: Executor, op: ir.ReduceScatter) -> None:
    """ReduceScatterRule: member i's dst = the reduction of chunk i of every src
    (MPI_Ireduce_scatter_block)."""
    _collective(ex, op)


def broadcast(ex: Executor, op: ir.Broadcast) -> None:
    """BroadcastRule: every member's dst = the root's src (MPI_Ibcast), the root's included; after
    a barrier of the members (`ROOTED`)."""
    _collective(ex, op)


def reduce_to(ex: Executor, op: ir.ReduceTo) -> None:
    """ReduceToRule: the root's dst = the reduction of every member's src (MPI_Ireduce); after a
    barrier of the members (`ROOTED`)."""
    _collective(ex, op)


def all_to_all(ex: Executor, op: ir.AllToAll) -> None:
    """AllToAllRule: chunk j of member i's src lands in chunk i of member j's dst (MPI_Ialltoall)."""
    _collective(ex, op)


def barrier(ex: Executor, op: ir.Barrier) -> None:
    """BarrierRule: every member arrives before any leaves (MPI_Ibarrier). Window memory is synced
    on both sides, since a barrier may order one-sided accesses too."""
    ex.sync_windows()
    mpi_comm, _members = ex.comms[op.comm]
    ex.wait_requests([mpi_comm.Ibarrier()], lambda: _members_waiting(ex, op))
    ex.sync_windows()


# ---------------------------------------------------------------------------------- one-sided
MPI_TYPES = {"int32": "INT32_T", "int64": "INT64_T", "uint32": "UINT32_T", "uint64": "UINT64_T"}
ATOMIC_OPS = {"add": "SUM", "inc": "SUM", "set": "REPLACE", "and": "BAND", "or": "BOR", "xor": "BXOR"}
FETCH_OPS = {"fetch": "NO_OP", "fetch_add": "SUM", "fetch_inc": "SUM", "swap": "REPLACE", "fetch_and": "BAND",
             "fetch_or": "BOR", "fetch_xor": "BXOR"}


def _target(ex: Executor, region: ir.Region) -> tuple[object, tuple[int, int, object]]:
    """The window of a symmetric region and its (byte displacement, byte count, MPI.BYTE)."""
    itemsize = numeric.storage(ex.dtype(region)).itemsize
    return ex.windows[region.buffer], (region.start * itemsize, region.count * itemsize, ex.MPI.BYTE)


def _word(ex: Executor, where) -> tuple[object, int, str]:
    """(window, byte displacement, dtype) of an atomic's word: a signal word or a data element."""
    if isinstance(where, ir.SignalRef):
        return ex.signal_win, (ex.signal_offset[where.signal] + where.index) * 8, "uint64"
    dtype = ex.dtype(where)
    return ex.windows[where.buffer], where.start * numeric.storage(dtype).itemsize, dtype


def _read_at_issue(op, rank: int, name: str) -> bool:
    """Whether the rule reads field `name` of `op` when it is issued (a blocking put's src)."""
    return any(a.field == name and a.when is When.ISSUE for a in rule(op).accesses(op, rank))


def _overlaps_target(ex: Executor, local: ir.Region, pe: int, remote: ir.Region) -> bool:
    """Whether a local region is the very window memory a self-targeted op accesses: MPI forbids an
    origin buffer that overlaps its target (NVSHMEM allows it), so such a transfer is staged
    through a copy."""
    return (pe == ex.rank and local.buffer == remote.buffer and local.start < remote.stop
            and remote.start < local.stop)


def put(ex: Executor, op: ir.Put) -> None:
    """NVSHMEM: a put's write lands later, unordered, complete by the issuer's next fence (before
    what follows it to that PE), quiet or barrier_all; a blocking put's src may be reused once it
    returns, an nbi put's src is read until quiet. MPI: the put waits in `deferred` and is issued
    (`Put`) at the next fence, quiet or barrier_all, whose flush completes it at the target, or
    after the run: the latest NVSHMEM allows, so a program that reads the data without the order
    that completes it reads it stale. A blocking put's src is copied now (read at issue); an nbi
    put's is read when it is issued to MPI, one of the times NVSHMEM may read it."""
    win, target = _target(ex, op.dst)
    origin = ex.view(op.src)
    if _read_at_issue(op, ex.rank, "src") or _overlaps_target(ex, op.src, op.pe, op.dst):
        origin = origin.copy()
    ex.deferred.append((win, _bytes(origin), op.pe, target))


def _update_word(ex: Executor, op, how: str, value: int, where) -> None:
    """A delivery's atomic word update (`Rule.word_update`): `Accumulate` with the matching op.
    MPI accumulates to one location are atomic with each other and ordered per origin, at least
    as strong as NVSHMEM's atomics and signal updates."""
    win, disp, dtype = _word(ex, where)
    operand = numeric.from_int(1 if how == "inc" else value, dtype)
    mpi_type = getattr(ex.MPI, MPI_TYPES[dtype])
    win.Accumulate([operand, mpi_type], op.pe, target=(disp, 1, mpi_type), op=getattr(ex.MPI, ATOMIC_OPS[how]))


def put_signal(ex: Executor, op: ir.PutSignal) -> None:
    """NVSHMEM: the signal update is visible only after the data is delivered (one delivery). MPI:
    `Put`, then `Win_flush(pe)` (the data is complete at the target), then the signal update as an
    atomic `Accumulate`: a reader that sees the signal finds the data, as NVSHMEM promises."""
    win, target = _target(ex, op.dst)
    origin = ex.view(op.src)
    if _overlaps_target(ex, op.src, op.pe, op.dst):
        origin = origin.copy()
    win.Put([_bytes(origin), ex.MPI.BYTE], op.pe, target=target)
    win.Flush(op.pe)
    word, how, value = rule(op).word_update(op)
    _update_word(ex, op, how, value, word)


def word_update(ex: Executor, op) -> None:
    """signal_op and non-fetching atomics: one atomic `Accumulate` (completed by fence/quiet)."""
    word, how, value = rule(op).word_update(op)
    _update_word(ex, op, how, value, word)


def signal_store(ex: Executor, op: ir.SignalStore) -> None:
    """SignalStoreRule: the rank stores into its own signal word, done when the op is. MPI: an atomic
    `Accumulate` (REPLACE) to its own window, flushed at once: stronger than NVSHMEM's plain store,
    which the checker reports when anything can touch the word concurrently."""
    word, how, value = rule(op).word_update(op)
    _update_word(ex, op, how, value, word)
    ex.signal_win.Flush(ex.rank)


def get(ex: Executor, op: ir.Get) -> None:
    """NVSHMEM: a blocking get has read src on pe and written dst when it returns. MPI: `Get`, then
    `Win_flush(pe)`, after which dst holds the data."""
    win, target = _target(ex, op.src)
    staged = _overlaps_target(ex, op.dst, op.pe, op.src)
    into = np.empty_like(ex.view(op.dst)) if staged else ex.view(op.dst)
    win.Get([_bytes(into), ex.MPI.BYTE], op.pe, target=target)
    win.Flush(op.pe)
    if staged:
        ex.view(op.dst)[:] = into


def get_nbi(ex: Executor, op: ir.GetNbi) -> None:
    """NVSHMEM: dst holds the data only after the next quiet. MPI: `Get`, completed by the flush of
    the next quiet or barrier_all (or of a fence, earlier than NVSHMEM requires). A get from the
    rank's own window into that same memory completes at once, one of the times NVSHMEM allows."""
    if _overlaps_target(ex, op.dst, op.pe, op.src):
        get(ex, op)
        return
    win, target = _target(ex, op.src)
    win.Get([_bytes(ex.view(op.dst)), ex.MPI.BYTE], op.pe, target=target)


def fetch_atomic(ex: Executor, op: ir.FetchAtomic) -> None:
    """NVSHMEM: a fetching atomic is one blocking atomic step that returns the old value. MPI:
    `Fetch_and_op` (or `Compare_and_swap`), then `Win_flush(pe)`; the old value, cast to the dtype
    of `into`, is written there."""
    win, disp, dtype = _word(ex, op.target)
    mpi_type = getattr(ex.MPI, MPI_TYPES[dtype])
    old = np.zeros(1, dtype=numeric.storage(dtype))
    if op.op == "compare_swap":
        value, cond = numeric.from_int(op.value, dtype), numeric.from_int(op.cond, dtype)
        win.Compare_and_swap([value, mpi_type], [cond, mpi_type], [old, mpi_type], op.pe, disp)
    else:
        operand = numeric.from_int(1 if op.op == "fetch_inc" else op.value, dtype)
        win.Fetch_and_op([operand, mpi_type], [old, mpi_type], op.pe, disp, op=getattr(ex.MPI, FETCH_OPS[op.op]))
    win.Flush(op.pe)
    ex.view(op.into)[:] = old


def wait_until(ex: Executor, op) -> None:
    """NVSHMEM: wait_until (all, any) blocks until the rank's own words compare true; what the
    satisfying write's delivery carried is then visible. MPI: poll the words with an atomic read
    (`Get_accumulate` with `MPI.NO_OP`, flushed) until the rule's comparison holds, then
    `Win_sync` every window so local loads see the data delivered before the signal."""
    awaits = rule(op).awaits(op, ex.rank)
    words = [ex.signal_offset[ref.signal] + ref.index for ref in awaits.words]
    MPI = ex.MPI
    seen = np.zeros(len(ex.signals), dtype=np.uint64)
    dummy = np.zeros(1, dtype=np.uint64)

    def test() -> bool:
        ex.signal_win.Get_accumulate([dummy, MPI.UINT64_T], [seen, MPI.UINT64_T], ex.rank,
                                     target=(0, len(seen), MPI.UINT64_T), op=MPI.NO_OP)
        ex.signal_win.Flush(ex.rank)
        hold = [compare(awaits.cmp, int(seen[w]), awaits.value) for w in words]
        return all(hold) if awaits.all else any(hold)

    def waiting() -> str:
        now = ", ".join(f"{ref} (now {int(seen[w])})" for ref, w in zip(awaits.words, words))
        which = "" if len(words) == 1 else ("every one of " if awaits.all else "one of ")
        return f"{which}{now} to be {awaits.cmp} {awaits.value}"

    ex.wait(test, waiting)
    ex.sync_windows()


def fence(ex: Executor, op: ir.Fence) -> None:
    """NVSHMEM: fence orders the deliveries to each PE issued before it before those after it.
    MPI: `Win_flush_all` on every window completes them all at their targets first (stronger)."""
    ex.flush_all()


def quiet(ex: Executor, op: ir.Quiet) -> None:
    """NVSHMEM: quiet returns once every delivery issued (puts, atomics, signals, nbi gets) is done.
    MPI: `Win_flush_all` on every window: each is complete at origin and target."""
    ex.flush_all()
    ex.sync_windows()


def barrier_all(ex: Executor, op: ir.BarrierAll) -> None:
    """NVSHMEM: quiet, then a barrier over every PE. MPI: `Win_flush_all` on every window, then a
    barrier (bounded), with `Win_sync` so the delivered data is visible on every side."""
    ex.flush_all()
    ex.sync_windows()
    ex.meet(ex.comm, "the other ranks to arrive at barrier_all")
    ex.sync_windows()


def team_split(ex: Executor, op: ir.TeamSplit) -> None:
    """TeamSplitRule: every member of the parent team arrives before any leaves; no delivery is
    completed. MPI: the team's communicator is split at setup (`Comm.Split`, every rank in one order),
    so here the parent's members meet (a bounded barrier), with `Win_sync` on both sides as `sync_all`."""
    mpi_comm, _members = ex.comms[op.comm]
    ex.sync_windows()
    ex.meet(mpi_comm, f"the other members of {op.comm} to arrive at team_split_strided({op.team})")
    ex.sync_windows()


def team_barrier(ex: Executor, op: ir.TeamBarrier) -> None:
    """TeamBarrierRule: a quiet on every member of the team, then the members meet. MPI: as
    `barrier_all`, on the team's communicator: `Win_flush_all` (this rank's deliveries done at their
    targets), then a bounded barrier of the members, with `Win_sync` so what landed is visible."""
    mpi_comm, _members = ex.comms[op.comm]
    ex.flush_all()
    ex.sync_windows()
    ex.meet(mpi_comm, f"the other members of team {op.comm} to arrive at team_barrier")
    ex.sync_windows()


def sync_all(ex: Executor, op: ir.SyncAll) -> None:
    """NVSHMEM: a barrier over every PE that leaves deliveries in flight. MPI: a barrier (bounded),
    without flushing (a delivery that has landed is visible after `Win_sync`)."""
    ex.sync_windows()
    ex.meet(ex.comm, "the other ranks to arrive at sync_all")
    ex.sync_windows()


# -------------------------------------------------------------- synchronisation inside a rank
def record_event(ex: Executor, op: ir.RecordEvent) -> None:
    """CUDA: the event captures the stream's work so far. Here the thread's earlier ops have run when
    it gets here (a Python thread runs its ops in order, memory is the process's), so the record is
    made at once; deliveries in flight stay in flight, as the checker has it."""
    with ex.sync_lock:
        ex.recorded.add((op.event, op.record))


def wait_event(ex: Executor, op: ir.WaitEvent) -> None:
    """CUDA: the stream's later work waits for the work the named record captured. Here: wait, bounded
    by the deadline, until that record is made. A wait with no record before it can never return
    (the checker reports it as a deadlock): it stops the run at once, naming the event."""
    if op.record == 0:
        raise Hang(f"{op.loc}: wait_event({op.event}) with no record of {op.event} before it",
                   f"event {op.event} is never recorded before this wait")
    ex.wait(lambda: (op.event, op.record) in ex.recorded,
            lambda: f"event {op.event} record {op.record} to be made")


def thread_barrier(ex: Executor, op: ir.ThreadBarrier) -> None:
    """The threads listed meet: this thread's k-th arrival counts, then it waits, bounded by the
    deadline, until every listed thread has arrived k times (the checker's words of the barrier)."""
    me = ex.program.threads[ex.actor - ex.sched.world - sum(len(p.threads) for p in ex.sched.programs[:ex.rank])]
    with ex.sync_lock:
        counts = ex.arrivals.setdefault(op.name, {})
        counts[me.name] = k = counts.get(me.name, 0) + 1

    def waiting() -> str:
        behind = [t for t in op.threads if counts.get(t, 0) < k]
        return f"thread barrier {op.name}: {', '.join(behind)} to arrive (arrival {k})"

    ex.wait(lambda: all(counts.get(t, 0) >= k for t in op.threads), waiting)


# -------------------------------------------------------------------------------------- local
def local(ex: Executor, op) -> None:
    """reduce, copy, fill, compute: the rule's data flow (`Move`s), sources read before any
    destination is written, combined left to right in the dtype (`numeric`)."""
    for move in rule(op).flows(op, ex.rank):
        if move.value is not None:
            for _r, dst in move.dsts:
                ex.view(dst)[:] = numeric.constant(move.value, dst.count, ex.dtype(dst))
            continue
        sources = [ex.view(src).copy() for _r, src in move.srcs]
        if move.opaque is not None:
            _opaque(ex, move, sources)
            continue
        for _r, dst in move.dsts:
            acc = sources[0]
            for source in sources[1:]:
                acc = numeric.combine(move.combine, acc, source, ex.dtype(dst))
            ex.view(dst)[:] = acc


def _opaque(ex: Executor, move, sources: list[np.ndarray]) -> None:
    """A compute kernel: `numeric.opaque_output` of what it read, over its writes in order."""
    total = sum(dst.count for _r, dst in move.dsts)
    out = numeric.opaque_output(move.opaque, ex.actor, ex.index, sources, total)
    offset = 0
    for _r, dst in move.dsts:
        ex.view(dst)[:] = numeric.to_dtype(out[offset:offset + dst.count], ex.dtype(dst))
        offset += dst.count


TABLE = {
    ir.Send: p2p, ir.Recv: p2p, ir.Group: p2p,
    ir.AllReduce: all_reduce, ir.AllGather: all_gather, ir.ReduceScatter: reduce_scatter,
    ir.Broadcast: broadcast, ir.ReduceTo: reduce_to,
    ir.AllToAll: all_to_all, ir.Barrier: barrier,
    ir.Put: put, ir.PutSignal: put_signal, ir.SignalUpdate: word_update, ir.Atomic: word_update, ir.Get: get,
    ir.GetNbi: get_nbi, ir.FetchAtomic: fetch_atomic, ir.WaitUntil: wait_until, ir.WaitUntilAll: wait_until,
    ir.WaitUntilAny: wait_until, ir.Fence: fence, ir.Quiet: quiet, ir.BarrierAll: barrier_all, ir.SyncAll: sync_all,
    ir.TeamSplit: team_split, ir.TeamBarrier: team_barrier, ir.SignalStore: signal_store,
    ir.LocalReduce: local, ir.Copy: local, ir.Fill: local, ir.Compute: local,
    ir.RecordEvent: record_event, ir.WaitEvent: wait_event, ir.ThreadBarrier: thread_barrier,
}
MPI_CPU = register(Backend(NAME, table=TABLE, unsupported={}, threads=True))
