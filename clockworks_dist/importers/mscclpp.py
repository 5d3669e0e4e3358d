"""MSCCL++ execution plans as schedules: `clockworks check plan.json` (and show, run, import).

An execution plan is the JSON the MSCCL++ DSL writes and the MSCCL++ executor runs (`mscclpp_json` reads
it, with each object's line). What each part becomes, and why that is MSCCL++'s meaning (the executor's
kernel, `src/core/include/execution_kernel.hpp`, is the reference):

- each gpu is a rank; each thread block a thread (`ir.Thread`, kind "block") of that rank, running its ops
  in order. The checker explores every order of a gpu's thread blocks, as the hardware may pick any.
- buffers: `i` input, `o` output, `s` scratch, each `*_chunks` chunks of `chunk` elements. With
  `"inplace": true` input and output are one buffer (`buffer`): at the same offset for allreduce and
  alltoall, the input at `rank * input_chunks` of the output for allgather, the output at
  `rank * output_chunks` of the input for reducescatter, as the executor is called in place. A thread block
  group (`tbg_info`) gives thread block `tb_id` its slice of each buffer range, cut as the executor cuts it
  (`calcOffset`, on elements). `tmp` holds what a thread block reads from a peer before it reduces it.
- memory channels: `put` (and the remote halves of `res` and `rres`) is a one-sided `put` into the peer's
  buffer: the block's stores read the source at once and land in the peer's memory later. `get`, `rre` and
  the remote reads of `rres` read the peer's buffer (`get`). `signal` is a release, then an increment of the
  peer's semaphore: `fence` then `signal_op(add 1)` on the peer's semaphore of the paired channel (the k-th
  channel from gpu a to gpu b is paired with the k-th from b to a, as MSCCL++ connects them). `wait` waits
  for the gpu's own semaphore of that channel to reach the next expected count (`wait_until ge k`, k
  counting that channel's waits). `rlxsignal` is the increment without the release (see "Relaxed
  signals" below); `rlxwait` is the wait without the acquire (see "Relaxed waits" below).
- port channels (a CPU proxy moves the data): `put` is a non-blocking put (`put nbi`: the proxy reads the
  source later, so writing it before the put completes is a race); `signal` comes after the channel's
  earlier puts (`fence`, then the increment); `pws` is both, `pwsf` then flushes; `flush` waits until the
  channel's puts are done (`quiet`), which is exact only when the thread block drives one port channel and
  no memory-channel writes, so any other thread block that flushes is refused.
- packets (LL): a packet carries its flag, so writing packets (`ppkt`, `rppkt`, `cpkt`, the packet halves
  of `respkt`, `recpkt`, `recspkt`) is a `put_signal` per element that sets that element's flag word
  (`mscclpp_pkt`) with the data, and reading packets (`upkt`, `rppkt`, `repkt`, `respkt`, `recpkt`,
  `recspkt` read their scratch sources) waits until every element's flag is set (`wait_until_all`). One
  execution of the plan is checked, so a flag is set once (the executor's flag changes per execution). A packet
  orders nothing but its own data (see "Packets" below).
- `barrier` (a grid barrier among `num_threadblocks` thread blocks of the gpu): an increment of the
  barrier's word on the gpu, then a wait until it counts every member's arrival (cumulative over the
  barrier's uses). `nop` (`__syncthreads`, inside one thread block) is nothing in the schedule: a block is one
  thread here, which is exact only where a `nop` or a `barrier` separates the ops whose order matters (see
  "Thread blocks" below).
- `sem_release` / `sem_acquire` (a counting semaphore of the gpu, `init_value`): an increment, and a wait
  until the releases cover the acquires so far; one acquiring thread block per semaphore, so that the wait
  is exact.
- `copy` copies; `re`/`res` reduce local sources (in their order) into the first destination, `res` then
  puts the sum to the remote destinations; `rre`/`rres` reduce the first (local) source with the remote
  ones; `repkt`/`respkt` sum the packets, then the local source, as the kernel does (the order matters to
  bitwise reproducibility).
- the postcondition comes from `collective`: allreduce, allgather, alltoall, reducescatter. Any other
  (the DSL's unit tests say `"test"`) is checked for deadlocks and races only.

Refused, with the op and its line: `pipeline` (its iteration count depends on the message size), the
switch-channel (NVLS multimem) ops `glres`, `gstore`, `gstorepkt`, port-channel packets, op names the
executor does not accept, and `reuse_resources` (the scratch then wraps at a fixed size).

Relaxed waits. `rlxwait` is MSCCL++'s `relaxedWait`: a relaxed load of the semaphore, no acquire ("use it
only for synchronizing execution, not data"). The GPU's stores after it are not performed before the wait
returns, so it orders the writes after it, which is how the DSL uses it (`wait(..., relaxed=True)` in a
handshake before puts into the peer); but the loads after it may see stale data: what the peer wrote before
its signal, and what reached the peer before that, need not be visible to them. The checker's `wait_until`
orders both, so an `rlxwait` becomes a `wait_until` (for the writes) and the importer refuses, at the op's
line, every op of the thread block that, after an `rlxwait` on a channel and before the block's next
acquiring `wait` on that channel, reads memory that anything but that thread block writes anywhere in the
plan (a peer's put or packets into the gpu, another thread block's copy, reduce or get, the peer's own
writes to a buffer the op reads with `get`, `rre` or `rres`). Not refused: reading packets (a packet
carries its flag, so reading it is valid without an acquire), memory that only the reading thread block
writes (program order) or that nothing writes (the input as the kernel starts), and everything after the
acquiring `wait` on the channel (it reads the semaphore at or after the count the relaxed wait saw, and the
increments are one release sequence). A barrier, a `sem_acquire` or a wait on another channel does not end
the window: an acquire synchronizes only with the release it reads, and a barrier is among the gpu's thread
blocks. The check is conservative (a read it refuses may be ordered by an earlier acquire), never the other
way.

Relaxed signals. `rlxsignal` is MSCCL++'s `relaxedSignal`: a relaxed atomic increment of the peer's
semaphore, no release. It becomes a `signal_op` add without a `fence`, which leaves the delivery
of the block's puts unordered before it, as on the GPU; but the checker performs a thread block's loads and
stores in program order, so its signal would still order them (and what the block acquired before it) for
the peer that waits on it, and on the GPU nothing does. The IR has no signal that leaves a thread's own
accesses unordered, so the importer refuses, at the `rlxsignal`'s line (naming the thread block's access
and the peer's), a plan in which one of them conflicts with an access only that signal orders after it:
- the thread block's accesses in the window: its copies, reductions, gets and the reads of its puts (their
  stores are deliveries, modelled exactly) since its last release `signal` to the same semaphore (a relaxed
  increment after a release is in that release's release sequence, so a waiter that reads it synchronizes
  with the release), or since the block's start;
- the peer's accesses that only the signal orders: those of the thread block that waits on the semaphore,
  after its wait for the count this signal reaches (any wait on the semaphore, when other thread blocks
  signal it too) and before its acquiring `wait` for the count of the block's next release signal; if the
  waiter signals anything (or writes packets) in between, every access of every other thread block counts,
  as what it signals may order anything after it.
Two accesses conflict when they overlap in one gpu's memory and one writes (a read after a write: stale
data; a write after a read: the read may see the new data). When the window holds an acquire (a `wait`,
a barrier, a `sem_acquire`, a packet read), what it acquired is not ordered before the relaxed signal
either, so a peer access of the set above that conflicts with any access of a third thread block is
refused too. The check is conservative, never the other way. The DSL's uses are exact: a relaxed signal
first in a thread block (the handshake `signal(..., relaxed=True)`, as in the corpus's DSL plans) has an
empty window and nothing acquired, so the checker's order is the GPU's; a relaxed signal after puts at the
end, which the peer waits for last, leaves only the puts' delivery to order, which the model does
(`buggy/reduce_relaxed_final_signal.json`: its unfinished output is found).

Packets. An LL packet (`LL8Packet`, `LL16Packet` in `packet_device.hpp`) is written with one volatile store of
its data and flag, with no fence before it, and read with a volatile load until the flag matches, with no fence
after it: no release, no acquire. It carries its own data and nothing else. Its `put_signal` would let the
checker order everything the sender did before the packet (and what it acquired) before everything the reader
does after reading it (and what it releases), and the IR has no flag that carries only its own data, so the
importer refuses, at the packet op's line (naming both accesses), a plan in which two accesses of different
thread blocks conflict (overlap in one gpu's memory, one a write) when one is ordered before a packet write and
the other after a read of those packets: "ordered" closes over program order and every synchronization edge
(each release to a word matched with every wait on it, each packet write with every read of its flags), a
superset of what the checker orders. Not refused, as the GPU orders them without the packet:
- the packet's data read as packets (each element written by one packet write), exactly what the packet carries;
- a write whose value is computed from the read it conflicts with, through the op's own outputs and the packets
  it reads (each element's one writer): the read cannot see that write, as the GPU's memory model has no values
  out of thin air (the in-place LL allreduces put their input chunks as packets and unpack the sums into them);
- a pair that a release `signal` after the first access and an acquiring `wait` before the second order (the
  semaphore signalled by that thread block only, the wait's count at least the signal's), or a `barrier` (its
  count reached only with the first block's arrival after the access).
Everything else that only a chain through packets could order is refused, so the check is conservative (a pair it
refuses may be ordered by fences on both sides, or by a longer chain of signals), never the other way.

Thread blocks. A thread block is one thread of the checker, its ops each complete before the next starts; on
the GPU it is blockDim.x threads, and the executor (microsoft/mscclpp at 1f5f065, `src/core/include/
execution_kernel.hpp`) runs the ops one after the other on every thread (`executionKernel`, line 867: no
synchronization between ops) with a `__syncthreads` only for a `nop` (`handleNop`, line 75) and a `barrier`
(`handleBarrier`, line 77: `DeviceSyncer::sync`, `include/mscclpp/concurrency_device.hpp` line 44, begins and ends
with `__syncthreads`). Data ops spread their elements over all the threads (`handleCopy`, `handlePut`, `handleGet`:
`mscclpp::copy`, 16-byte units aligned to the pointer, the remainders as ints; the reductions, line 190 and 444:
16-byte unit k from the op's offset to thread k % blockDim.x, the tail by elements of the data type; the packet
ops, lines 259-441: packet k of each operand to thread k % blockDim.x), while `signal`, `rlxsignal`, `wait`,
`rlxwait`, `flush`, `sem_release`, `sem_acquire` and port-channel puts run on the threads below their channel
(semaphore, destination) count only (lines 83-127, 148-186, 671-685): the others go straight on. So thread t's part
of an op is ordered after thread u's part of an earlier op of its block only through a `nop` or a `barrier` between
them, or when t = u. The MSCCL++ DSL writes those nops (python/mscclpp/language: `BuffersAccess.process_operations`,
internal/buffer_access.py line 19, puts a nop before an op whose local chunks overlap an earlier op's since the
last nop or barrier, one of them a write; `add_data_sync`, internal/operations.py line 1059, puts them before and
after a signal, wait, flush or semaphore op, by default), so its plans are exact; a plan written or edited by
hand need not be. The importer refuses, at the later op's line (naming the earlier op, the fix a `nop` between
them), two ops of one thread block with no `nop` or `barrier` between them where:
- they access overlapping memory of one gpu, one of them a write, except a read of packets after the packet
  write of those elements (the reader waits for each element's own flag), and two packet ops on the same operand
  region (same buffer, start and stop, same `tbg_info`), which give each element to the same thread;
- the earlier is a `wait`, `rlxwait`, `sem_acquire` or `flush` and the later accesses memory or is a `signal`,
  `rlxsignal`, `sem_release`, `pws`, `pwsf` or `flush` (the other threads do not wait);
- the earlier accesses memory and the later is one of those releases (thread 0's fence does not order the other
  threads' accesses before its signal);
unless both are performed by thread 0 alone (one channel, semaphore or destination each): then program order is
the GPU's. A release before an acquire or a data op, and a data op before an acquire, need nothing: the checker's
order adds no happens-before edge there that the GPU lacks between memory accesses. The check is conservative (a
copy and a reduction that give the elements to the threads alike for the plan's message size and data type are
still refused), never the other way. No corpus plan changes verdict: the DSL's and the executor tests' plans have
their nops, and the in-place LL allreduces' `ppkt` and `upkt` on one input chunk are packet ops on the same operand.

Not modelled exactly, and said here so that nothing is approximated silently: a memory-channel `signal` is
a fence to the channel's peer only here, while the hardware's release orders the block's writes to every
peer: the model can report a race the hardware cannot have, never the reverse.
"""

from __future__ import annotations

import os
from math import lcm

from .. import ir
from ..errors import ScheduleError
from .mscclpp_json import Obj, Plan, parse
from .names import schedule_name

# The op names the MSCCL++ executor accepts (`getOpType` in execution_plan.cc), with what each does.
OP_TYPES: dict[str, str] = {
    "nop": "__syncthreads within the thread block",
    "barrier": "barrier among thread blocks of the gpu",
    "put": "put into a peer's buffer",
    "pws": "put with signal (port channel)",
    "pwsf": "put with signal and flush (port channel)",
    "get": "read a peer's buffer",
    "copy": "local copy",
    "signal": "signal the channel's peer",
    "wait": "wait for the channel's peer",
    "flush": "wait for the port channel's puts",
    "re": "local reduce",
    "res": "local reduce, put the sum",
    "rre": "reduce with peers' buffers",
    "rres": "reduce with peers' buffers, put the sum",
    "ppkt": "put packets",
    "rppkt": "read packets, put them on",
    "respkt": "reduce packets, put the sum as packets",
    "cpkt": "copy into local packets",
    "upkt": "unpack packets",
    "repkt": "reduce packets",
    "recpkt": "reduce packets, copy the sum into local packets",
    "recspkt": "reduce packets, copy into local packets and put as packets",
    "glres": "multimem load-reduce-store (switch channel)",
    "gstore": "multimem store (switch channel)",
    "gstorepkt": "multimem packet store (switch channel)",
    "rlxsignal": "relaxed signal",
    "rlxwait": "relaxed wait",
    "pipeline": "loop over the inner ops",
    "sem_acquire": "acquire a gpu semaphore",
    "sem_release": "release a gpu semaphore",
}
REFUSED: dict[str, str] = {
    "pipeline": "its iteration count depends on the message size, which a plan does not fix",
    "glres": "switch channels (NVLS multimem) are not modelled",
    "gstore": "switch channels (NVLS multimem) are not modelled",
    "gstorepkt": "switch channels (NVLS multimem) are not modelled",
}
# Intra-block ordering (see "Thread blocks" in the module docstring).
BLOCK_SYNC = ("nop", "barrier")  # __syncthreads (handleNop), DeviceSyncer::sync (begins and ends with one)
ACQUIRES = ("wait", "rlxwait", "sem_acquire", "flush")  # what the ops after them are ordered after
RELEASES = ("signal", "rlxsignal", "sem_release", "pws", "pwsf", "flush")  # what orders the ops before them
# Ops whose handler gives packet index idx (from each operand's own offset) to thread idx % blockDim.x.
PACKET_MAPPED = ("ppkt", "rppkt", "cpkt", "upkt", "repkt", "respkt", "recpkt", "recspkt")
BUFFER_TYPES = {"i": "input", "o": "output", "s": "scratch"}
CHANNEL_TYPES = ("memory", "port", "switch")

MEM_SEM = "mscclpp_mem"  # per rank, one word per memory channel (and per unpaired peer channel)
PORT_SEM = "mscclpp_port"
PKT_FLAG = "mscclpp_pkt"  # per rank, one word per scratch element
BARRIER = "mscclpp_barrier"  # per rank, one word per barrier id
DEV_SEM = "mscclpp_sem"  # per rank, one word per device semaphore
COLLECTIVES = ("allreduce", "allgather", "alltoall", "reducescatter")


def _name(name: str) -> str:
    """The plan's name as an identifier."""
    return schedule_name(name, "mscclpp")


class _Gpu:
    """One gpu of the plan, its fields checked."""

    def __init__(self, plan: Plan, obj: Obj, index: int):
        self.obj = obj
        what = f"gpu {index}"
        self.id = plan.field(obj, "id", int, what)
        if self.id != index:
            raise plan.error(obj, f"gpu {index} has \"id\": {self.id}; the executor reads gpu r at position r",
                             hint="list the gpus in order of their ids")
        self.chunks = {t: plan.field(obj, f"{n}_chunks", int, what) for t, n in BUFFER_TYPES.items()}
        self.channels: dict[str, list[int]] = {"memory": [], "port": []}  # flattened, as the executor does
        self.switch = 0
        for ch in plan.objects(obj, "channels", what):
            kind = plan.field(ch, "channel_type", str, f"{what} channel")
            if kind not in CHANNEL_TYPES:
                raise plan.error(ch, f"unknown channel type \"{kind}\"", rank=self.id,
                                 hint="the executor knows memory, port and switch channels")
            if kind == "switch":
                self.switch += 1
                continue
            for peer in plan.ints(ch, "connected_to", f"{what} {kind} channel"):
                self.channels[kind].append(peer)
        self.remote: list[tuple[int, str, tuple[str, ...], Obj]] = []
        for rb in plan.objects(obj, "remote_buffers", what, default=[]):
            rank = plan.field(rb, "rank", int, f"{what} remote buffer")
            kind = plan.field(rb, "type", str, f"{what} remote buffer")
            if kind not in BUFFER_TYPES:
                raise plan.error(rb, f"unknown buffer type \"{kind}\"", rank=self.id, hint="use i, o or s")
            access = plan.field(rb, "access_channel_types", list, f"{what} remote buffer")
            for a in access:
                if a not in CHANNEL_TYPES:
                    raise plan.error(rb, f"unknown channel type {a!r}", rank=self.id,
                                     hint="the executor knows memory, port and switch channels")
            self.remote.append((rank, kind, tuple(access), rb))
        self.semaphores = [plan.field(s, "init_value", int, f"{what} semaphore")
                           for s in plan.objects(obj, "semaphores", what, default=[])]
        self.tbs = plan.objects(obj, "threadblocks", what)
        for i, tb in enumerate(self.tbs):
            tid = plan.field(tb, "id", int, f"{what} thread block")
            if tid != i:
                raise plan.error(tb, f"thread block {i} has \"id\": {tid}; the executor indexes thread blocks "
                                 "by id", rank=self.id, hint="list the thread blocks in order of their ids")


class _Builder:
    """The schedule of one plan."""

    def __init__(self, plan: Plan, chunk: int | None):
        self.plan = plan
        top = plan.top
        self.name = plan.field(top, "name", str, "the plan")
        self.collective = plan.field(top, "collective", str, "the plan").lower().replace("_", "")
        self.protocol = plan.field(top, "protocol", str, "the plan")
        self.inplace = plan.field(top, "inplace", bool, "the plan")
        if plan.field(top, "reuse_resources", bool, "the plan", default=False):
            raise plan.error(top, "\"reuse_resources\": true is not supported: the scratch buffer then wraps at "
                             "a fixed size, which depends on the message size",
                             hint="write the plan without reuse_resources")
        gpus = plan.objects(top, "gpus", "the plan")
        if not gpus:
            raise plan.error(top, "the plan has no gpus", hint="write the plan with the MSCCL++ DSL")
        self.gpus = [_Gpu(plan, g, i) for i, g in enumerate(gpus)]
        self.world = len(self.gpus)
        for g in self.gpus:
            for kind, peers in g.channels.items():
                for p in peers:
                    if p >= self.world or p == g.id:
                        raise plan.error(g.obj, f"a {kind} channel connects to gpu {p}, which is "
                                         + ("itself" if p == g.id else f"not among the plan's {self.world}"),
                                         rank=g.id, hint="connect channels to other gpus of the plan")
            for rank, _kind, _access, rb in g.remote:
                if rank >= self.world:
                    raise plan.error(rb, f"the remote buffer is on gpu {rank}, not among the plan's {self.world}",
                                     rank=g.id, hint="name a gpu of the plan")
        sizes = {1}
        for g in self.gpus:
            for tb in g.tbs:
                for op in self._all_ops(tb):
                    info = op.get("tbg_info")
                    if isinstance(info, dict) and isinstance(info.get("tbg_size"), int) and info["tbg_size"] > 0:
                        sizes.add(info["tbg_size"])
        self.chunk = chunk or lcm(*sizes)
        self.loc = ir.SourceLoc(file=plan.file, line=top.line)
        self.relaxed_reads: list[_RelaxedRead] = []  # reads after a relaxed wait, checked once all gpus are built
        self.blocks: dict[tuple[int, int], _Block] = {}  # (gpu, thread block) -> its ops, for the relaxed signals

    def _all_ops(self, tb: Obj) -> list[Obj]:
        ops = tb.get("ops")
        return [o for o in ops if isinstance(o, Obj)] if isinstance(ops, list) else []

    # --- buffers ----------------------------------------------------------------------------------------------

    def buffer_name(self, kind: str) -> str:
        if self.inplace and kind in "io":
            return "buffer"
        return BUFFER_TYPES[kind]

    def base(self, rank: int, kind: str) -> int:
        """The chunk at which buffer `kind` starts in the memory it names (in place, a slice of the other)."""
        if not self.inplace:
            return 0
        g = self.gpus[rank]
        if kind == "i" and self.collective == "allgather":
            return rank * g.chunks["i"]
        if kind == "o" and self.collective == "reducescatter":
            return rank * g.chunks["o"]
        return 0

    def buffer_chunks(self, rank: int, name: str) -> int:
        g = self.gpus[rank]
        if name == "buffer":
            return max(self.base(rank, k) + g.chunks[k] for k in "io")
        return g.chunks[{v: k for k, v in BUFFER_TYPES.items()}[name]]

    def region(self, op: Obj, rank: int, kind: str, ref: Obj, what: str, me: int) -> ir.Region:
        plan = self.plan
        index = plan.field(ref, "index", int, what)
        size = plan.field(ref, "size", int, what)
        have = self.gpus[rank].chunks[kind]
        if index + size > have:
            raise plan.error(op, f"{what} is chunks {index}..{index + size - 1} of gpu {rank}'s "
                             f"{BUFFER_TYPES[kind]}, which has {have} chunk(s)", rank=me, op=op.get("name"),
                             hint="check the op's index and size")
        c = self.chunk
        start = (self.base(rank, kind) + index) * c
        n = size * c
        info = op.get("tbg_info")
        if info is not None:
            tb_id = plan.field(info, "tb_id", int, "the thread block group")
            tbg_size = plan.field(info, "tbg_size", int, "the thread block group")
            if tbg_size < 1 or tb_id >= tbg_size:
                raise plan.error(op, f"thread block group member {tb_id} of {tbg_size}", rank=me, op=op.get("name"),
                                 hint="tb_id counts from 0 below tbg_size")
            lo, hi = _slice(n, tb_id, tbg_size), _slice(n, tb_id + 1, tbg_size)
            start, n = start + lo, hi - lo
        return ir.Region(buffer=self.buffer_name(kind), start=start, stop=start + n)

    # --- the schedule -----------------------------------------------------------------------------------------

    def schedule(self) -> ir.Schedule:
        programs = []
        for g in self.gpus:
            programs.append(_Rank(self, g).program())
        self.check_relaxed_reads(programs)
        self.check_relaxed_signals()
        self.check_packets()
        self.check_block_sync()
        sched = ir.Schedule(name=_name(self.name), world=self.world, ranks_per_node=self.world, loc=self.loc,
                            programs=tuple(programs))
        return sched.model_copy(update={"expect": self.expect()})

    def check_block_sync(self) -> None:
        """Refuse a pair of ops of one thread block, with no `nop` or `barrier` between them, whose order the
        checker relies on and the GPU's threads do not keep (see "Thread blocks" in the module docstring)."""
        for (rank, tid), block in sorted(self.blocks.items()):
            segment: list[tuple[int, Obj, str, int | None, list]] = []  # since the block's last block-wide sync
            for e, (op, name, out) in enumerate(block.events):
                if name in BLOCK_SYNC:
                    segment = []
                    continue
                threads = _op_threads(self.plan, op, name)
                accesses = _block_accesses(rank, block, e, out)
                for _f, prev, pname, pthreads, paccesses in segment:
                    one = pthreads == 1 and threads == 1  # both performed by thread 0 alone: program order
                    if one:
                        continue
                    if pname in ACQUIRES and (accesses or name in RELEASES):
                        raise self.block_sync_error(
                            rank, tid, op, f"follows the {pname} at line {prev.line} with no nop between them; "
                            f"the {pname} is performed by {_by(pthreads)}, so the block's other threads run this "
                            f"op's part without waiting for it", pname, prev)
                    if name in RELEASES and paccesses:
                        raise self.block_sync_error(
                            rank, tid, op, f"follows the {pname} at line {prev.line} with no nop between them; "
                            f"the {name} is performed by {_by(threads)}, which does not order the other threads' "
                            f"part of the {pname} ({_say(rank, paccesses[0][0], True)}) before it", pname, prev)
                    for a, apkt in paccesses:
                        for b, bpkt in accesses:
                            if not _overlap(a, b):
                                continue
                            if apkt == "write" and bpkt == "read":
                                continue  # each element read as a packet waits for its own flag
                            if (pname in PACKET_MAPPED and name in PACKET_MAPPED and a[:4] == b[:4]
                                    and prev.get("tbg_info") == op.get("tbg_info")):
                                continue  # each element at the same packet index of both ops: the same thread
                            raise self.block_sync_error(
                                rank, tid, op, f"{_say(rank, b, True)} overlaps the {pname} at line {prev.line} "
                                f"({_say(rank, a, True)}) with no nop between them; the two ops spread their "
                                "elements over the block's threads differently, so one thread's part of this op may "
                                "run before another's part of that one", pname, prev)
                segment.append((e, op, name, threads, accesses))

    def block_sync_error(self, rank: int, tid: int, op: Obj, what: str, pname: str, prev: Obj) -> ScheduleError:
        return self.plan.error(
            op, f"thread block {tid}: this op {what}; the executor runs a thread block's ops without "
            "synchronizing its threads between them (only a nop, __syncthreads, or a barrier does), so the plan "
            "cannot be verified", rank=rank, op=op.get("name"),
            hint=f"put {{\"name\": \"nop\"}} between the {pname} at line {prev.line} and this op "
            "(the MSCCL++ DSL does so where ops of a thread block depend on each other)")

    def check_relaxed_reads(self, programs: list[ir.Program]) -> None:
        """Refuse a read after a relaxed wait (see "Relaxed waits" in the module docstring) of memory that
        anything but the reading thread block writes, anywhere in the plan."""
        if not self.relaxed_reads:
            return
        writers: dict[tuple[int, str], list[tuple[int, int, int, int, int]]] = {}  # (gpu, buffer) -> writes
        for prog in programs:
            for tid, thread in enumerate(prog.threads):
                for op in thread.ops:
                    for owner, region in _writes(prog.rank, op):
                        if region.buffer != "tmp":  # a thread block's own
                            writers.setdefault((owner, region.buffer), []).append(
                                (region.start, region.stop, prog.rank, tid, op.loc.line if op.loc else 0))
        for rr in self.relaxed_reads:
            for owner, region in rr.reads:
                for start, stop, rank, tid, line in writers.get((owner, region.buffer), []):
                    if (rank, tid) == (rr.rank, rr.tid) or stop <= region.start or region.stop <= start:
                        continue
                    whose = "its own" if owner == rr.rank else f"gpu {owner}'s"
                    writer = f"thread block {tid} of the gpu" if rank == rr.rank else f"gpu {rank} thread block {tid}"
                    lo, hi = max(start, region.start), min(stop, region.stop)
                    raise self.plan.error(
                        rr.op, f"thread block {rr.tid} reads {whose} {region.buffer}[{lo}:{hi}] after the relaxed "
                        f"wait at line {rr.wait.line} (rlxwait: no acquire, so no memory ordering) and before an "
                        f"acquiring wait on that channel; {writer} writes it (line {line}), so the read may see stale "
                        "data and the plan cannot be verified", rank=rr.rank, op=rr.op.get("name"),
                        hint=f"use \"wait\" (the DSL's relaxed=False) at line {rr.wait.line}, or wait on the "
                        "channel again before the read")

    def check_relaxed_signals(self) -> None:
        """Refuse a plan in which a peer's access that only an rlxsignal orders after the signalling thread
        block's loads and stores (or after what that block acquired) conflicts with them (see "Relaxed
        signals" in the module docstring)."""
        relaxed = [(key, i) for key, b in self.blocks.items() for i, (_o, name, _out) in enumerate(b.events)
                   if name == "rlxsignal"]
        if not relaxed:
            return
        access = {key: [(i, a) for i, (_o, _n, out) in enumerate(b.events) for o in out for a in _accesses(key[0], o)]
                  for key, b in self.blocks.items()}
        signallers: dict[tuple[int, int], set[tuple[int, int]]] = {}  # (gpu, memory semaphore word) -> blocks
        waiter: dict[tuple[int, int], tuple[int, int]] = {}  # (gpu, word) -> the block that waits on it
        for key, b in self.blocks.items():
            for _o, _n, out in b.events:
                for o in out:
                    if isinstance(o, ir.SignalUpdate) and o.signal.signal == MEM_SEM:
                        signallers.setdefault((o.pe, o.signal.index), set()).add(key)
                    elif isinstance(o, ir.WaitUntil) and o.signal.signal == MEM_SEM:
                        waiter[(key[0], o.signal.index)] = key
        for key, i in relaxed:
            block = self.blocks[key]
            sig_op = block.events[i][0]
            for o in block.events[i][2]:
                target = (o.pe, o.signal.index)
                if target in waiter:
                    self.check_relaxed_signal(key, i, sig_op, target, waiter[target],
                                              signallers[target] == {key}, access)

    def check_relaxed_signal(self, key: tuple[int, int], at: int, sig_op: Obj, target: tuple[int, int],
                             wkey: tuple[int, int], alone: bool, access: dict) -> None:
        """The rlxsignal `at` (an event index) of block `key` to semaphore word `target`, waited on by `wkey`."""
        events = self.blocks[key].events

        def signals(lo: int, hi: int, release_only: bool = False) -> list[int]:
            return [e for e in range(lo, hi) for o in events[e][2] if isinstance(o, ir.SignalUpdate)
                    and (o.pe, o.signal.index) == target and (events[e][1] == "signal" or not release_only)]

        # the window: since the block's last release signal to that word (the relaxed increment is in that
        # release's release sequence, so a waiter reading it synchronizes with that release) or the block's start
        start = max(signals(0, at, release_only=True), default=-1) + 1
        mine = [(e, a) for e, a in access[key] if start <= e < at and not a[5]]
        acquired = next((events[e][0] for e in range(start, at)
                         if events[e][1] in ("wait", "barrier", "sem_acquire")
                         or any(isinstance(o, ir.WaitUntilAll) for o in events[e][2])), None)
        if not mine and acquired is None:
            return
        # the waiter's ops that only this signal may order: after its wait for the j-th increment (any wait on
        # the word when other blocks signal it too) and before its acquiring wait for the count of this block's
        # next release signal to the word
        j = len(signals(0, at)) + 1 if alone else 1
        later = signals(at + 1, len(events), release_only=True)
        upto = len(signals(0, later[0])) + 1 if alone and later else None
        wevents = self.blocks[wkey].events
        first = last = None
        for e, (_o, name, out) in enumerate(wevents):
            for o in out:
                if isinstance(o, ir.WaitUntil) and o.signal.signal == MEM_SEM and o.signal.index == target[1]:
                    if upto is not None and name == "wait" and o.value >= upto:
                        last = e  # synchronizes with the later release, which comes after the window
                    elif first is None and o.value >= j:
                        first = e
            if last is not None:
                break
        if first is None or (last is not None and last <= first):
            return
        stop = last if last is not None else len(wevents)
        theirs = [(wkey, e, a) for e, a in access[wkey] if first < e < stop]
        spread = next((wevents[e][0] for e in range(first + 1, stop) for o in wevents[e][2]
                       if isinstance(o, (ir.SignalUpdate, ir.PutSignal))), None)
        if spread is not None:  # what the waiter releases after the wait orders anything after it, anywhere
            theirs += [(k, e, a) for k, accs in access.items() if k not in (key, wkey) for e, a in accs]
        gpu, tid = key
        what = f"thread block {tid} signals gpu {target[0]} relaxed here (rlxsignal: no release, so no memory ordering)"
        hint = (f"use \"signal\" (the DSL's relaxed=False) at line {sig_op.line}, or have the peer wait for a "
                "release signal sent after that access")
        via = "" if spread is None else (f", and what it signals after that wait (line {spread.line}) orders "
                                         "everything after it")
        for k, e, z in theirs:
            for _e, x in mine:
                if _overlap(x, z):
                    through = via if k != wkey else ""
                    raise self.plan.error(
                        sig_op, f"{what} after {_say(gpu, x, True)} (line {x[6]}); gpu {wkey[0]} thread block "
                        f"{wkey[1]} waits for this signal (line {wevents[first][0].line}){through}, and "
                        f"{_who(k, wkey)} {_say(k[0], z, False)} (line {z[6]}), so the two accesses are not "
                        "ordered on the GPU and the plan cannot be verified", rank=gpu, op="rlxsignal", hint=hint)
        if acquired is None or not theirs:
            return
        for k, e, z in theirs:
            for k2, accs in access.items():
                if k2 in (key, k):
                    continue
                for _e, v in accs:
                    if _overlap(v, z):
                        raise self.plan.error(
                            sig_op, f"{what} after acquiring at line {acquired.line}: what it acquired is not "
                            f"ordered before this signal; gpu {wkey[0]} thread block {wkey[1]} waits for it (line "
                            f"{wevents[first][0].line}){via}, and {_who(k, wkey)} {_say(k[0], z, False)} (line "
                            f"{z[6]}), which gpu {k2[0]} thread block {k2[1]} also {'writes' if v[5] else 'reads'} "
                            f"(line {v[6]}), so the plan cannot be verified", rank=gpu, op="rlxsignal", hint=hint)

    def check_packets(self) -> None:
        """Refuse a plan in which two accesses conflict that only a packet orders, beyond the packet's own data
        (see "Packets" in the module docstring)."""
        events = {key: b.events for key, b in self.blocks.items()}
        releases: dict[tuple, list[tuple[tuple[int, int], int]]] = {}  # (gpu, signal, word) -> (block, event)
        receives: dict[tuple, list[tuple[tuple[int, int], int]]] = {}
        writers: dict[tuple[int, str, int], list[tuple[tuple[int, int], int, int]]] = {}  # packet element -> writes
        packet_ops = []
        for key, evs in events.items():
            for e, (_o, _n, out) in enumerate(evs):
                for j, o in enumerate(out):
                    if isinstance(o, (ir.SignalUpdate, ir.PutSignal)):
                        releases.setdefault((o.pe, o.signal.signal, o.signal.index), []).append((key, e))
                    if isinstance(o, ir.PutSignal):
                        writers.setdefault((o.pe, o.dst.buffer, o.dst.start), []).append((key, e, j))
                    if isinstance(o, ir.WaitUntil):
                        receives.setdefault((key[0], o.signal.signal, o.signal.index), []).append((key, e))
                    elif isinstance(o, ir.WaitUntilAll):
                        for sref in o.signals:
                            receives.setdefault((key[0], sref.signal, sref.index), []).append((key, e))
                if any(isinstance(o, ir.PutSignal) for o in out):
                    packet_ops.append((key, e))
        if not packet_ops:
            return

        def words(key, e, table_kind):
            out = events[key][e][2]
            if table_kind == "released":
                return {(o.pe, o.signal.signal, o.signal.index) for o in out
                        if isinstance(o, (ir.SignalUpdate, ir.PutSignal))}
            got = {(key[0], o.signal.signal, o.signal.index) for o in out if isinstance(o, ir.WaitUntil)}
            return got | {(key[0], r.signal, r.index) for o in out if isinstance(o, ir.WaitUntilAll) for r in o.signals}

        def closure(start: dict, forward: bool) -> dict:
            """Where each thread block's ops begin (forward) or end (backward) being ordered after (before) the
            start through any synchronization the checker has: static matching, every wait on a word with every
            release to it, so a superset of what the checker orders."""
            point, todo = dict(start), list(start)
            while todo:
                key = todo.pop()
                p = point[key]
                span = range(p, len(events[key])) if forward else range(0, p + 1)
                for e in span:
                    for w in words(key, e, "released" if forward else "received"):
                        for k2, f in (receives if forward else releases).get(w, []):
                            if k2 == key:
                                continue
                            if k2 not in point or (f < point[k2] if forward else f > point[k2]):
                                point[k2] = f
                                todo.append(k2)
            return point

        def accesses(point: dict, forward: bool) -> list:
            out = []
            for key, p in sorted(point.items()):
                span = range(p, len(events[key])) if forward else range(0, p + 1)
                for e in span:
                    for j, o in enumerate(events[key][e][2]):
                        out += [(key, e, j, a) for a in _accesses(key[0], o)]
            return out

        def as_packet(key, e, a) -> bool:
            regions = self.blocks[key].packet_regions[e]
            return not a[4] and a[0] == key[0] and any(r.buffer == a[1] and r.start <= a[2] and a[3] <= r.stop
                                                      for r in regions)

        memo: dict = {}

        def leaves(key, e, j, k) -> frozenset:
            """The plain reads element k of output j of event e of block `key` is computed from, through the
            op's own outputs and the packets it reads (each element's one packet writer)."""
            if (key, e, j, k) in memo:
                return memo[(key, e, j, k)]
            memo[(key, e, j, k)] = frozenset()
            out = events[key][e][2]
            o = out[j]
            found: set = set()
            for g, r in _reads(key[0], o):
                m = r.start + k
                earlier = next(((i, m - w.start) for i in range(j - 1, -1, -1) for g2, w in _writes(key[0], out[i])
                                if g2 == g and w.buffer == r.buffer and w.start <= m < w.stop), None)
                pw = writers.get((g, r.buffer, m), [])
                if earlier is not None:
                    found |= leaves(key, e, *earlier)
                elif (g == key[0] and len(pw) == 1 and any(p.buffer == r.buffer and p.start <= m < p.stop
                                                           for p in self.blocks[key].packet_regions[e])):
                    found |= leaves(pw[0][0], pw[0][1], pw[0][2], 0)
                else:
                    found.add((key, e, g, r.buffer, m))
            memo[(key, e, j, k)] = frozenset(found)
            return memo[(key, e, j, k)]

        def exact(x, z) -> bool:
            """Ordered on the GPU without the packet: the packet's own data, or a write computed from the read."""
            (kx, ex, jx, a), (kz, ez, jz, b) = x, z
            lo, hi = max(a[2], b[2]), min(a[3], b[3])
            ox = events[kx][ex][2][jx]
            if a[4] and isinstance(ox, ir.PutSignal) and as_packet(kz, ez, b):
                return all(writers.get((a[0], a[1], m)) == [(kx, ex, jx)] for m in range(lo, hi))
            if not a[4] and b[4] and not b[5]:
                oz = events[kz][ez][2][jz]
                [(_g, w)] = _writes(kz[0], oz)
                return all((kx, ex, a[0], a[1], m) in leaves(kz, ez, jz, m - w.start) for m in range(lo, hi))
            return False

        def uses(key, e, word) -> int:
            """How many increments block `key` makes to `word` in its events up to e."""
            return sum(1 for f in range(e + 1) for o in events[key][f][2] if isinstance(o, ir.SignalUpdate)
                       and (o.pe, o.signal.signal, o.signal.index) == word)

        def ordered(x, z) -> bool:
            """x happens before z on the GPU without any packet: a release signal after x that z's block waits for
            (acquiring) before z, or a grid barrier between them, each matched by its counts."""
            (kx, ex, _jx, _a), (kz, ez, _jz, _b) = x, z
            for er in range(ex + 1, len(events[kx])):
                _op, name, out = events[kx][er]
                if name not in ("signal", "barrier"):
                    continue
                for o in out:
                    if not isinstance(o, ir.SignalUpdate) or o.signal.signal not in (MEM_SEM, BARRIER):
                        continue
                    word = (o.pe, o.signal.signal, o.signal.index)
                    n = uses(kx, er, word)  # the count at which x's release is in what the waiter reads
                    others = {k for k, _f in releases.get(word, []) if k != kx}
                    if o.signal.signal == MEM_SEM:
                        if others:
                            continue  # another block's increments could satisfy the wait
                        need = n
                    else:  # the barrier's other members arrive at most this often in all
                        need = n + sum(uses(k, len(events[k]) - 1, word) for k in others)
                    for f in range(ez):
                        if events[kz][f][1] not in ("wait", "barrier"):
                            continue
                        for w in events[kz][f][2]:
                            if (isinstance(w, ir.WaitUntil) and (kz[0], w.signal.signal, w.signal.index) == word
                                    and w.cmp == "ge" and w.value >= need):
                                return True
            return False

        for skey, i in packet_ops:
            sig_op = events[skey][i][0]
            targets = words(skey, i, "released")
            readers = sorted({(k2, f) for w in targets for k2, f in receives.get(w, []) if w[1] == PKT_FLAG})
            before = accesses(closure({skey: i}, False), False)
            if not before:
                continue
            for wkey, j in readers:
                for z in accesses(closure({wkey: j}, True), True):
                    if z[0] == wkey and z[1] == j and as_packet(wkey, j, z[3]):
                        continue  # the packets themselves
                    for x in before:
                        if x[0] == z[0] or not _overlap(x[3], z[3]) or exact(x, z) or ordered(x, z):
                            continue
                        self.packet_error(skey, sig_op, x, wkey, events[wkey][j][0], z)

    def packet_error(self, skey, sig_op: Obj, x: tuple, wkey, read_op: Obj, z: tuple) -> None:
        gpu, tid = skey
        xkey, a, zkey, b = x[0], x[3], z[0], z[3]
        mine = _say(gpu, a, True) if xkey == skey else \
            f"what it is ordered after: gpu {xkey[0]} thread block {xkey[1]} {_say(xkey[0], a, False)}"
        theirs = f"then {_say(zkey[0], b, False)}" if zkey == wkey else \
            f"gpu {zkey[0]} thread block {zkey[1]}, ordered after that read, {_say(zkey[0], b, False)}"
        raise self.plan.error(
            sig_op, f"thread block {tid} writes packets here ({sig_op.get('name')}: an LL packet is a plain store of "
            f"its data and flag, no release, so it orders nothing but its own data) after {mine} (line {a[6]}); gpu "
            f"{wkey[0]} thread block {wkey[1]} reads these packets (line {read_op.line}), and {theirs} (line {b[6]}), "
            "so the two accesses are not ordered on the GPU and the plan cannot be verified", rank=gpu,
            op=sig_op.get("name"), hint=f"order the access at line {b[6]} after the one at line {a[6]} with a "
            "signal (a release) and a wait on a channel between their gpus (the DSL's signal/wait), or a barrier "
            "when both are on one gpu, or read the data from the packets")

    def expect(self) -> tuple[ir.Expectation, ...]:
        n, c, coll = self.world, self.chunk, self.collective
        label = f"mscclpp {coll}"
        g0 = self.gpus[0]

        def reg(rank: int, kind: str, first: int, count: int) -> ir.Region:
            start = (self.base(rank, kind) + first) * c
            return ir.Region(buffer=self.buffer_name(kind), start=start, stop=start + count * c)

        out = []
        if coll == "allreduce":
            k = g0.chunks["i"]
            for q in range(n):
                out.append(ir.Expectation(rank=q, region=reg(q, "o", 0, k), op="sum", label=label,
                                          contributions=tuple(ir.Contribution(rank=r, region=reg(r, "i", 0, k))
                                                              for r in range(n))))
        elif coll == "allgather":
            k = g0.chunks["i"]
            for q in range(n):
                for r in range(n):
                    out.append(ir.Expectation(rank=q, region=reg(q, "o", r * k, k), label=label,
                                              contributions=(ir.Contribution(rank=r, region=reg(r, "i", 0, k)),)))
        elif coll == "alltoall":
            k = g0.chunks["i"] // n
            for q in range(n):
                for r in range(n):
                    out.append(ir.Expectation(rank=q, region=reg(q, "o", r * k, k), label=label,
                                              contributions=(ir.Contribution(rank=r, region=reg(r, "i", q * k, k)),)))
        elif coll == "reducescatter":
            k = g0.chunks["o"]
            for q in range(n):
                out.append(ir.Expectation(rank=q, region=reg(q, "o", 0, k), op="sum", label=label,
                                          contributions=tuple(ir.Contribution(rank=r, region=reg(r, "i", q * k, k))
                                                              for r in range(n))))
        return tuple(out)


class _RelaxedRead:
    """The reads of op `op` of thread block `tid` of gpu `rank` while the relaxed wait `wait` is pending:
    (the gpu whose memory is read, the region)."""

    def __init__(self, op: Obj, wait: Obj, rank: int, tid: int, reads: list[tuple[int, ir.Region]]):
        self.op, self.wait, self.rank, self.tid, self.reads = op, wait, rank, tid, reads


def _reads(rank: int, op) -> list[tuple[int, ir.Region]]:
    """What an op this importer emits reads: (the gpu whose memory it is, the region)."""
    if isinstance(op, (ir.Put, ir.PutSignal, ir.Copy)):
        return [(rank, op.src)]
    if isinstance(op, ir.Get):
        return [(op.pe, op.src)]
    if isinstance(op, ir.LocalReduce):
        return [(rank, s) for s in op.srcs]
    return []


def _writes(rank: int, op) -> list[tuple[int, ir.Region]]:
    """What an op this importer emits writes: (the gpu whose memory it is, the region)."""
    if isinstance(op, (ir.Put, ir.PutSignal)):
        return [(op.pe, op.dst)]
    if isinstance(op, (ir.Get, ir.Copy, ir.LocalReduce)):
        return [(rank, op.dst)]
    return []


def _accesses(rank: int, op) -> list[tuple]:
    """The memory accesses of an op this importer emits, tmp left out (a thread block's own): (the gpu whose
    memory it is, buffer, start, stop, writes, delivered later (a put's store), line)."""
    line = op.loc.line if op.loc else 0
    out = [(owner, r.buffer, r.start, r.stop, False, False, line) for owner, r in _reads(rank, op)]
    delivered = isinstance(op, (ir.Put, ir.PutSignal))
    out += [(owner, r.buffer, r.start, r.stop, True, delivered, line) for owner, r in _writes(rank, op)]
    return [a for a in out if a[1] != "tmp"]


def _op_threads(plan: Plan, op: Obj, name: str) -> int | None:
    """How many of the block's threads perform the op: threads 0..n-1, one per channel, semaphore or port
    destination (handleSignal, handleWait, handleFlush, handleSem*, handlePut on a port channel), or None: all
    of them, each on its own elements."""
    if name in ("signal", "rlxsignal", "wait", "rlxwait", "flush"):
        return len(plan.ints(op, "channel_ids", "the op"))
    if name in ("sem_acquire", "sem_release"):
        return len(plan.ints(op, "semaphore_ids", "the op"))
    if name in ("put", "pws", "pwsf") and op.get("channel_type") == "port":
        dsts = op.get("dst_buff")
        return len(dsts) if isinstance(dsts, list) else 0
    return None


def _by(threads: int | None) -> str:
    return "thread 0 alone" if threads == 1 else f"threads 0..{threads - 1} only" if threads else "no thread"


def _block_accesses(rank: int, block: _Block, e: int, out: list) -> list[tuple[tuple, str]]:
    """The memory accesses of event `e` of a thread block, each a whole operand (packets too), with "write" for a
    packet write, "read" for a read of packets, "" otherwise."""
    res: list[tuple[tuple, str]] = []
    for o in out:
        if isinstance(o, ir.PutSignal):
            continue
        for a in _accesses(rank, o):
            packet = not a[4] and a[0] == rank and any(
                p.buffer == a[1] and p.start <= a[2] and a[3] <= p.stop for p in block.packet_regions[e])
            res.append((a, "read" if packet else ""))
    for pe, dst, src in block.packet_operands[e]:
        line = out[0].loc.line if out and out[0].loc else 0
        if src.buffer != "tmp":
            res.append(((rank, src.buffer, src.start, src.stop, False, False, line), ""))
        res.append(((pe, dst.buffer, dst.start, dst.stop, True, True, line), "write"))
    return res


def _overlap(a: tuple, b: tuple) -> bool:
    """Two accesses of `_accesses` conflict: the same memory, overlapping, one a write."""
    return a[:2] == b[:2] and a[2] < b[3] and b[2] < a[3] and (a[4] or b[4])


def _say(me: int, a: tuple, own: bool) -> str:
    whose = "its own" if a[0] == me else f"gpu {a[0]}'s"
    verb = ("writing" if a[4] else "reading") if own else ("writes" if a[4] else "reads")
    return f"{verb} {whose} {a[1]}[{a[2]}:{a[3]}]"


def _who(k: tuple[int, int], waiter: tuple[int, int]) -> str:
    return "then" if k == waiter else f"gpu {k[0]} thread block {k[1]}"


def _slice(n: int, index: int, slices: int) -> int:
    """Where slice `index` of `slices` of n elements starts (the executor's calcOffset, on elements)."""
    return index * (n // slices) + min(index, n % slices)


class _Rank:
    """The threads of one gpu."""

    def __init__(self, b: _Builder, g: _Gpu):
        self.b, self.g, self.plan = b, g, b.plan
        self.me = g.id
        # semaphore words: the k-th channel of a kind from a to b pairs with the k-th from b to a
        self.sem_words = {kind: len(g.channels[kind]) for kind in ("memory", "port")}
        self.expected: dict[tuple[str, int], tuple[int, int]] = {}  # (kind, channel) -> (waits so far, tb)
        self.barriers: dict[int, tuple[int, set[int], Obj]] = {}  # id -> (num_threadblocks, members, op)
        self.barrier_uses: dict[tuple[int, int], int] = {}  # (tb, id) -> uses so far
        self.acquires: dict[int, tuple[int, int]] = {}  # semaphore -> (acquires so far, tb)
        self.tmp_per_tb = 0
        self.tmp_need: dict[int, int] = {}

    def paired(self, kind: str, channel: int) -> tuple[int, int]:
        """(peer, the peer's semaphore word) for this gpu's channel `channel` of `kind`."""
        peers = self.g.channels[kind]
        peer = peers[channel]
        ordinal = sum(1 for p in peers[:channel] if p == peer)
        theirs = [i for i, p in enumerate(self.b.gpus[peer].channels[kind]) if p == self.me]
        if ordinal < len(theirs):
            return peer, theirs[ordinal]
        # the peer has fewer channels back: the executor adds unpaired ones, whose word no op of it waits on
        return peer, len(self.b.gpus[peer].channels[kind]) + ordinal - len(theirs)

    def program(self) -> ir.Program:
        g = self.g
        threads = tuple(self.thread(tb) for tb in g.tbs)
        for bid, (num, members, op) in self.barriers.items():
            if len(members) != num:
                raise self.plan.error(op, f"barrier {bid} counts {num} thread blocks, but {len(members)} use it "
                                      f"({', '.join(f'tb{m}' for m in sorted(members))})", rank=self.me,
                                      op="barrier", hint="num_threadblocks is the number of thread blocks that "
                                      "take part in the barrier")
        loc = self.b.loc
        c = self.b.chunk
        buffers = []
        names = ["buffer", "scratch"] if self.b.inplace else ["input", "output", "scratch"]
        for name in names:
            role = {"buffer": "inout", "input": "input", "output": "output", "scratch": "scratch"}[name]
            # registered with MSCCL++ so that peers reach it: symmetric memory, in the same order on every gpu
            buffers.append(ir.BufferDecl(name=name, count=self.b.buffer_chunks(self.me, name) * c, role=role,
                                         symmetric=True, loc=loc))
        tmp = max(self.tmp_need.values(), default=0)
        if tmp:
            buffers.append(ir.BufferDecl(name="tmp", count=tmp * len(g.tbs), role="scratch", loc=loc))
        signals = [ir.SignalDecl(name=MEM_SEM, count=self.words("memory"), loc=loc),
                   ir.SignalDecl(name=PORT_SEM, count=self.words("port"), loc=loc),
                   ir.SignalDecl(name=PKT_FLAG, count=max(g.chunks["s"] * c, 1), loc=loc),
                   ir.SignalDecl(name=BARRIER, count=max(self.barriers, default=0) + 1, loc=loc),
                   ir.SignalDecl(name=DEV_SEM, count=max(len(g.semaphores), 1), loc=loc)]
        if tmp:  # tmp regions were laid out per thread block at the largest need
            threads = tuple(self.place_tmp(t, i, tmp) for i, t in enumerate(threads))
        return ir.Program(rank=self.me, buffers=tuple(buffers), signals=tuple(signals), threads=threads)

    def words(self, kind: str) -> int:
        """Semaphore words of `kind` on this gpu: its channels, and those peers pair with beyond them."""
        most = len(self.g.channels[kind])
        for peer in self.b.gpus:
            if peer.id == self.me:
                continue
            for ch in range(len(peer.channels[kind])):
                if peer.channels[kind][ch] == self.me:
                    most = max(most, _Rank.paired(_Probe(self.b, peer), kind, ch)[1] + 1)
        return max(most, 1)

    def place_tmp(self, thread: ir.Thread, index: int, per_tb: int) -> ir.Thread:
        def move(region):
            if isinstance(region, ir.Region) and region.buffer == "tmp":
                return region.model_copy(update={"start": region.start + index * per_tb,
                                                 "stop": region.stop + index * per_tb})
            return region

        ops = []
        for op in thread.ops:
            update = {}
            for field in ("dst", "src"):
                if isinstance(getattr(op, field, None), ir.Region):
                    update[field] = move(getattr(op, field))
            if isinstance(op, ir.LocalReduce):
                update["srcs"] = tuple(move(s) for s in op.srcs)
            ops.append(op.model_copy(update=update) if update else op)
        return thread.model_copy(update={"ops": tuple(ops)})

    # --- one thread block -------------------------------------------------------------------------------------

    def thread(self, tb: Obj) -> ir.Thread:
        plan, me = self.plan, self.me
        tid = tb["id"]
        what = f"gpu {me} thread block {tid}"
        chans: dict[str, list[int]] = {"memory": [], "port": [], "switch": []}
        for ch in plan.objects(tb, "channels", what, default=[]):
            kind = plan.field(ch, "channel_type", str, f"{what} channel")
            if kind not in CHANNEL_TYPES:
                raise plan.error(ch, f"unknown channel type \"{kind}\"", rank=me,
                                 hint="the executor knows memory, port and switch channels")
            for i in plan.ints(ch, "channel_ids", f"{what} channel"):
                have = len(self.g.channels[kind]) if kind != "switch" else self.g.switch
                if i >= have:
                    raise plan.error(ch, f"{kind} channel {i} of gpu {me}, which has {have} {kind} channel(s)",
                                     rank=me, hint="channel_ids index the gpu's channels of that type")
                chans[kind].append(i)
        refs: dict[str, list[int]] = {"memory": [], "port": [], "switch": []}
        for ref in plan.objects(tb, "remote_buffer_refs", what, default=[]):
            kind = plan.field(ref, "access_channel_type", str, f"{what} remote buffer ref")
            if kind not in CHANNEL_TYPES:
                raise plan.error(ref, f"unknown channel type \"{kind}\"", rank=me,
                                 hint="the executor knows memory, port and switch channels")
            for i in plan.ints(ref, "remote_buffer_ids", f"{what} remote buffer ref"):
                if i >= len(self.g.remote):
                    raise plan.error(ref, f"remote buffer {i} of gpu {me}, which has {len(self.g.remote)}",
                                     rank=me, hint="remote_buffer_ids index the gpu's remote_buffers")
                if kind not in self.g.remote[i][2]:
                    raise plan.error(ref, f"remote buffer {i} is not accessible through {kind} channels",
                                     rank=me, hint="list the channel type in its access_channel_types")
                refs[kind].append(i)
        ctx = _Block(self, tb, tid, chans, refs)
        self.b.blocks[(me, tid)] = ctx
        ops: list = []
        for op in plan.objects(tb, "ops", what):
            ops += ctx.op(op)
        self.tmp_need[tid] = ctx.tmp_used
        return ir.Thread(name=f"tb{tid}", kind="block", ops=tuple(ops), loc=ir.SourceLoc(file=plan.file,
                                                                                        line=tb.line))


class _Probe(_Rank):
    """Another gpu's channel pairing, without building its threads."""

    def __init__(self, b: _Builder, g: _Gpu):
        self.b, self.g, self.me = b, g, g.id


class _Block:
    """The ops of one thread block."""

    def __init__(self, rank: _Rank, tb: Obj, tid: int, chans: dict, refs: dict):
        self.r, self.tb, self.tid, self.chans, self.refs = rank, tb, tid, chans, refs
        self.plan, self.me = rank.plan, rank.me
        self.tmp_used = 0
        self.port_channels: set[int] = set()  # port channels this block puts or signals on
        self.memory_writes = False  # this block writes peers' memory through memory channels
        self.relaxed: dict[int, Obj] = {}  # memory channel -> its relaxed wait, until an acquiring wait on it
        self.packet_reads: list[ir.Region] = []  # the regions the current op reads as packets
        self.events: list[tuple[Obj, str, list]] = []  # each op of the plan: (its object, its name, what it became)
        self.packet_regions: list[list[ir.Region]] = []  # per event, the regions it reads as packets
        self.packet_writes: list[tuple[int, ir.Region, ir.Region]] = []  # the current op's packets: (pe, dst, src)
        self.packet_operands: list[list[tuple[int, ir.Region, ir.Region]]] = []  # per event, its packet writes

    def error(self, op: Obj, message: str, hint: str | None = None) -> ScheduleError:
        return self.plan.error(op, message, rank=self.me, op=op.get("name"), hint=hint)

    # buffers of the op
    def local(self, op: Obj, ref: Obj, what: str) -> ir.Region:
        if "buffer_id" in ref or "type" not in ref:
            raise self.error(op, f"{what} must be a local buffer (\"type\"), not a remote one (\"buffer_id\")",
                             hint="this op reads and writes the gpu's own buffers there")
        kind = self.plan.field(ref, "type", str, what)
        if kind not in BUFFER_TYPES:
            raise self.error(op, f"{what}: unknown buffer type \"{kind}\"", hint="use i, o or s")
        return self.r.b.region(op, self.me, kind, ref, what, self.me)

    def remote(self, op: Obj, ref: Obj, what: str, chtype: str) -> tuple[int, str, ir.Region]:
        if "buffer_id" not in ref:
            raise self.error(op, f"{what} must be a peer's buffer (\"buffer_id\")",
                             hint="this op reaches the peer's memory there")
        i = self.plan.field(ref, "buffer_id", int, what)
        mine = self.refs.get(chtype, [])
        if i >= len(mine):
            raise self.error(op, f"{what}: buffer_id {i}, but the thread block has {len(mine)} remote buffer(s) "
                             f"for {chtype} channels", hint="buffer_id indexes the thread block's "
                             "remote_buffer_refs of the op's channel type")
        rank, kind, _access, _obj = self.r.g.remote[mine[i]]
        return rank, kind, self.r.b.region(op, rank, kind, ref, what, self.me)

    def channel(self, op: Obj, index: int, chtype: str) -> int:
        mine = self.chans.get(chtype, [])
        if index >= len(mine):
            raise self.error(op, f"{chtype} channel {index}, but the thread block has {len(mine)} {chtype} "
                             "channel(s)", hint="channel_ids index the thread block's channels of the op's type")
        return mine[index]

    def tmp(self, count: int) -> ir.Region:
        start = self.tmp_used
        self.tmp_used += count
        return ir.Region(buffer="tmp", start=start, stop=start + count)

    def flags(self, region: ir.Region) -> tuple[ir.SignalRef, ...]:
        base = self.r.b.base(self.me, "s") * self.r.b.chunk
        return tuple(ir.SignalRef(signal=PKT_FLAG, index=e - base) for e in range(region.start, region.stop))

    def packets_to(self, pe: int, dst: ir.Region, src: ir.Region, loc: ir.SourceLoc) -> list:
        """Write `src` as packets into `dst` (scratch of `pe`): data and its flag, element by element."""
        self.packet_writes.append((pe, dst, src))
        return [ir.PutSignal(pe=pe, dst=ir.Region(buffer=dst.buffer, start=dst.start + k, stop=dst.start + k + 1),
                             src=ir.Region(buffer=src.buffer, start=src.start + k, stop=src.start + k + 1),
                             signal=ir.SignalRef(signal=PKT_FLAG, index=dst.start + k), value=1, sig_op="set",
                             loc=loc)
                for k in range(src.stop - src.start)]

    def op(self, op: Obj) -> list:
        plan = self.plan
        name = plan.field(op, "name", str, "an op")
        loc = ir.SourceLoc(file=plan.file, line=op.line)
        if name not in OP_TYPES:
            raise self.error(op, f"unknown op type \"{name}\": the MSCCL++ executor does not accept it",
                             hint="the executor's op names are " + ", ".join(sorted(OP_TYPES)))
        if name in REFUSED:
            raise self.error(op, f"\"{name}\" ({OP_TYPES[name]}) is not supported: {REFUSED[name]}",
                             hint="check a plan without it")
        chtype = op.get("channel_type", "none")
        if chtype not in (*CHANNEL_TYPES, "none"):
            raise self.error(op, f"unknown channel type \"{chtype}\"",
                             hint="the executor knows memory, port and switch channels")
        srcs = plan.objects(op, "src_buff", "the op", default=[])
        dsts = plan.objects(op, "dst_buff", "the op", default=[])
        handler = getattr(self, "op_" + name)
        self.packet_reads = []
        self.packet_writes = []
        out = handler(op, loc, chtype, srcs, dsts)
        self.events.append((op, name, out))
        self.packet_regions.append(list(self.packet_reads))
        self.packet_operands.append(list(self.packet_writes))
        if self.relaxed:
            # a packet carries its flag, so reading one is valid without an acquire; anything else is recorded
            reads = [(owner, r) for o in out for owner, r in _reads(self.me, o)
                     if r.buffer != "tmp" and not (owner == self.me and self.read_as_packets(r))]
            if reads:
                first = min(self.relaxed.values(), key=lambda w: w.line)
                self.r.b.relaxed_reads.append(_RelaxedRead(op, first, self.me, self.tid, reads))
        return out

    def read_as_packets(self, region: ir.Region) -> bool:
        return any(p.buffer == region.buffer and p.start <= region.start and region.stop <= p.stop
                   for p in self.packet_reads)

    def need(self, op: Obj, chtype: str, allowed: tuple[str, ...]) -> None:
        if chtype not in allowed:
            raise self.error(op, f"\"{op['name']}\" on a {chtype} channel is not supported",
                             hint=f"the importer takes it on {' or '.join(allowed)} channels")

    def count(self, op: Obj, srcs: list, dsts: list, nsrc: int | None, ndst: int | None, least=False) -> None:
        for what, items, n in (("src_buff", srcs, nsrc), ("dst_buff", dsts, ndst)):
            if n is None:
                continue
            if (len(items) < n) if least else (len(items) != n):
                raise self.error(op, f"\"{what}\" has {len(items)} buffer(s), not {'at least ' if least else ''}{n}",
                                 hint="write the plan with the MSCCL++ DSL")

    def same_size(self, op: Obj, regions: list[ir.Region]) -> None:
        sizes = {r.stop - r.start for r in regions}
        if len(sizes) > 1:
            raise self.error(op, "its buffers differ in size", hint="every buffer of the op covers as many chunks")

    def channel_ids(self, op: Obj) -> list[int]:
        return self.plan.ints(op, "channel_ids", "the op")

    # --- control ----------------------------------------------------------------------------------------------

    def op_nop(self, op, loc, chtype, srcs, dsts):
        return []

    def op_signal(self, op, loc, chtype, srcs, dsts, relaxed=False):
        self.need(op, chtype, ("memory",) if relaxed else ("memory", "port"))
        out = [] if relaxed else [ir.Fence(loc=loc)]
        for c in self.channel_ids(op):
            ch = self.channel(op, c, chtype)
            if chtype == "port":
                self.port_channels.add(ch)
            peer, word = self.r.paired(chtype, ch)
            out.append(ir.SignalUpdate(pe=peer, signal=ir.SignalRef(signal=MEM_SEM if chtype == "memory" else PORT_SEM,
                                                                    index=word), value=1, sig_op="add", loc=loc))
        return out

    def op_rlxsignal(self, op, loc, chtype, srcs, dsts):
        return self.op_signal(op, loc, chtype, srcs, dsts, relaxed=True)

    def op_wait(self, op, loc, chtype, srcs, dsts, relaxed=False):
        self.need(op, chtype, ("memory",) if relaxed else ("memory", "port"))
        out = []
        for c in self.channel_ids(op):
            ch = self.channel(op, c, chtype)
            count, owner = self.r.expected.get((chtype, ch), (0, self.tid))
            if owner != self.tid:
                raise self.error(op, f"thread blocks {owner} and {self.tid} both wait on {chtype} channel {ch}: "
                                 "each would count the channel's signals for itself",
                                 hint="give each waiting thread block its own channel")
            self.r.expected[(chtype, ch)] = (count + 1, self.tid)
            out.append(ir.WaitUntil(signal=ir.SignalRef(signal=MEM_SEM if chtype == "memory" else PORT_SEM,
                                                        index=ch), cmp="ge", value=count + 1, loc=loc))
            if relaxed:
                self.relaxed.setdefault(ch, op)
            elif chtype == "memory":
                self.relaxed.pop(ch, None)
        return out

    def op_rlxwait(self, op, loc, chtype, srcs, dsts):
        return self.op_wait(op, loc, chtype, srcs, dsts, relaxed=True)

    def op_flush(self, op, loc, chtype, srcs, dsts):
        self.need(op, chtype, ("port",))
        for c in self.channel_ids(op):
            self.port_channels.add(self.channel(op, c, chtype))
        self.exact_flush(op)
        return [ir.Quiet(loc=loc)]

    def exact_flush(self, op: Obj) -> None:
        if len(self.port_channels) > 1:
            raise self.error(op, f"the thread block drives port channels {sorted(self.port_channels)}; a flush "
                             "completes one channel's puts, which the checker's quiet (all of the block's puts) "
                             "cannot say", hint="use one port channel per thread block")
        if self.memory_writes:
            raise self.error(op, "the thread block also writes peers' memory through memory channels; a flush "
                             "completes only the port channel's puts, which the checker's quiet (all of the "
                             "block's puts) cannot say", hint="put the port-channel ops in a thread block of their own")

    def op_barrier(self, op, loc, chtype, srcs, dsts):
        bid = self.plan.field(op, "barrier_id", int, "the barrier")
        num = self.plan.field(op, "num_threadblocks", int, "the barrier")
        known = self.r.barriers.get(bid)
        if known is not None and known[0] != num:
            raise self.error(op, f"barrier {bid} counts {num} thread blocks here and {known[0]} at line "
                             f"{known[2].line}", hint="every use of a barrier names the same num_threadblocks")
        members = known[1] if known else set()
        members.add(self.tid)
        self.r.barriers[bid] = (num, members, known[2] if known else op)
        k = self.r.barrier_uses.get((self.tid, bid), 0) + 1
        self.r.barrier_uses[(self.tid, bid)] = k
        word = ir.SignalRef(signal=BARRIER, index=bid)
        return [ir.SignalUpdate(pe=self.me, signal=word, value=1, sig_op="add", loc=loc),
                ir.WaitUntil(signal=word, cmp="ge", value=k * num, loc=loc)]

    def sem_ids(self, op: Obj) -> list[int]:
        ids = self.plan.ints(op, "semaphore_ids", "the op")
        for s in ids:
            if s >= len(self.r.g.semaphores):
                raise self.error(op, f"semaphore {s}, but gpu {self.me} has {len(self.r.g.semaphores)}",
                                 hint="semaphore_ids index the gpu's semaphores")
        return ids

    def op_sem_release(self, op, loc, chtype, srcs, dsts):
        out: list = [ir.Fence(loc=loc)]
        for s in self.sem_ids(op):
            out.append(ir.SignalUpdate(pe=self.me, signal=ir.SignalRef(signal=DEV_SEM, index=s), value=1,
                                       sig_op="add", loc=loc))
        return out

    def op_sem_acquire(self, op, loc, chtype, srcs, dsts):
        out = []
        for s in self.sem_ids(op):
            count, owner = self.r.acquires.get(s, (0, self.tid))
            if owner != self.tid:
                raise self.error(op, f"thread blocks {owner} and {self.tid} both acquire semaphore {s}; the "
                                 "checker has no atomic take-one for a shared counting semaphore",
                                 hint="one thread block acquires each semaphore")
            self.r.acquires[s] = (count + 1, self.tid)
            need = count + 1 - self.r.g.semaphores[s]
            if need > 0:
                out.append(ir.WaitUntil(signal=ir.SignalRef(signal=DEV_SEM, index=s), cmp="ge", value=need, loc=loc))
        return out

    # --- data -------------------------------------------------------------------------------------------------

    def op_copy(self, op, loc, chtype, srcs, dsts):
        self.count(op, srcs, dsts, 1, 1)
        src, dst = self.local(op, srcs[0], "the source"), self.local(op, dsts[0], "the destination")
        self.same_size(op, [src, dst])
        return [ir.Copy(dst=dst, src=src, loc=loc)]

    def op_put(self, op, loc, chtype, srcs, dsts, signal=False, flush=False):
        self.need(op, chtype, ("memory", "port") if not signal else ("port",))
        self.count(op, srcs, dsts, len(dsts), None)
        out: list = []
        ids = self.channel_ids(op) if chtype == "port" else []
        if chtype == "port" and len(ids) < len(dsts):
            raise self.error(op, f"{len(dsts)} destinations but {len(ids)} channel_ids",
                             hint="a port-channel put names a channel per destination")
        first = self.plan.field(srcs[0], "type", str, "the source") if srcs else "i"
        for i, dref in enumerate(dsts):
            pe, _kind, dst = self.remote(op, dref, "the destination", chtype)
            sref = srcs[i]
            if chtype == "memory":  # the kernel reads the first source's buffer at each source's offset
                sref = Obj({**sref, "type": first})
                sref.line = srcs[i].line
            src = self.local(op, sref, "the source")
            self.same_size(op, [src, dst])
            if chtype == "memory":
                self.memory_writes = True
                out.append(ir.Put(pe=pe, dst=dst, src=src, loc=loc))
                continue
            ch = self.channel(op, ids[i], "port")
            self.port_channels.add(ch)
            peer, word = self.r.paired("port", ch)
            if peer != pe:
                raise self.error(op, f"the put writes gpu {pe}'s buffer through a port channel to gpu {peer}",
                                 hint="the destination is a buffer of the channel's peer")
            out.append(ir.Put(pe=pe, dst=dst, src=src, nbi=True, loc=loc))
            if signal:
                out += [ir.Fence(loc=loc), ir.SignalUpdate(pe=pe, signal=ir.SignalRef(signal=PORT_SEM, index=word),
                                                           value=1, sig_op="add", loc=loc)]
        if flush:
            self.exact_flush(op)
            out.append(ir.Quiet(loc=loc))
        return out

    def op_pws(self, op, loc, chtype, srcs, dsts):
        return self.op_put(op, loc, chtype, srcs, dsts, signal=True)

    def op_pwsf(self, op, loc, chtype, srcs, dsts):
        return self.op_put(op, loc, chtype, srcs, dsts, signal=True, flush=True)

    def op_get(self, op, loc, chtype, srcs, dsts):
        self.need(op, chtype, ("memory",))
        self.count(op, srcs, dsts, len(dsts), None)
        out = []
        for sref, dref in zip(srcs, dsts):
            pe, _kind, src = self.remote(op, sref, "the source", "memory")
            dst = self.local(op, dref, "the destination")
            self.same_size(op, [src, dst])
            out.append(ir.Get(pe=pe, dst=dst, src=src, loc=loc))
        return out

    def sends(self, op, loc, dsts: list, value: ir.Region, packets: bool) -> list:
        """Put `value` to each remote destination (plain stores, or packets)."""
        out: list = []
        for dref in dsts:
            pe, kind, dst = self.remote(op, dref, "a remote destination", "memory")
            self.same_size(op, [value, dst])
            self.memory_writes = True
            if packets:
                if kind != "s":
                    raise self.error(op, "packets are written into a peer's scratch buffer, not its "
                                     f"{BUFFER_TYPES[kind]}", hint="the executor puts packets at the scratch")
                out += self.packets_to(pe, dst, value, loc)
            else:
                out.append(ir.Put(pe=pe, dst=dst, src=value, loc=loc))
        return out

    def op_re(self, op, loc, chtype, srcs, dsts, send=False):
        if send:
            self.need(op, chtype, ("memory",))
        self.count(op, srcs, dsts, 1, 1 if not send else 1, least=True)
        if not send:
            self.count(op, srcs, dsts, None, 1)
        ins = [self.local(op, s, "a source") for s in srcs]
        dst = self.local(op, dsts[0], "the destination")
        self.same_size(op, [*ins, dst])
        return [ir.LocalReduce(dst=dst, srcs=tuple(ins), loc=loc)] + \
            (self.sends(op, loc, dsts[1:], dst, packets=False) if send else [])

    def op_res(self, op, loc, chtype, srcs, dsts):
        return self.op_re(op, loc, chtype, srcs, dsts, send=True)

    def op_rre(self, op, loc, chtype, srcs, dsts, send=False):
        self.need(op, chtype, ("memory",))
        self.count(op, srcs, dsts, 2, 1, least=True)
        if not send:
            self.count(op, srcs, dsts, None, 1)
        first = self.local(op, srcs[0], "the first source")
        dst = self.local(op, dsts[0], "the destination")
        n = first.stop - first.start
        out: list = []
        parts = [first]
        for sref in srcs[1:]:
            pe, _kind, src = self.remote(op, sref, "a remote source", "memory")
            self.same_size(op, [first, src])
            t = self.tmp(n)
            out.append(ir.Get(pe=pe, dst=t, src=src, loc=loc))
            parts.append(t)
        self.same_size(op, [first, dst])
        out.append(ir.LocalReduce(dst=dst, srcs=tuple(parts), loc=loc))
        if send:
            out += self.sends(op, loc, dsts[1:], dst, packets=False)
        return out

    def op_rres(self, op, loc, chtype, srcs, dsts):
        return self.op_rre(op, loc, chtype, srcs, dsts, send=True)

    # --- packets ----------------------------------------------------------------------------------------------

    def read_packets(self, op: Obj, ref: Obj, what: str, loc: ir.SourceLoc) -> tuple[ir.Region, list]:
        """A local scratch region read as packets, and the wait for its flags."""
        region = self.local(op, ref, what)
        if ref.get("type") != "s":
            raise self.error(op, f"{what} is read as packets, which the executor reads from the scratch buffer",
                             hint="packets are read from \"type\": \"s\"")
        self.packet_reads.append(region)
        return region, [ir.WaitUntilAll(signals=self.flags(region), cmp="ge", value=1, loc=loc)]

    def local_packets(self, op: Obj, ref: Obj, what: str) -> ir.Region:
        region = self.local(op, ref, what)
        if ref.get("type") != "s":
            raise self.error(op, f"{what} is written as packets, which the executor writes into the scratch "
                             "buffer", hint="packets go to \"type\": \"s\"")
        return region

    def op_ppkt(self, op, loc, chtype, srcs, dsts):
        self.need(op, chtype, ("memory",))
        self.count(op, srcs, dsts, len(dsts), None)
        out: list = []
        for sref, dref in zip(srcs, dsts):
            out += self.sends(op, loc, [dref], self.local(op, sref, "the source"), packets=True)
        return out

    def op_rppkt(self, op, loc, chtype, srcs, dsts):
        self.need(op, chtype, ("memory",))
        self.count(op, srcs, dsts, 1, 1, least=True)
        src, out = self.read_packets(op, srcs[0], "the source", loc)
        return out + self.sends(op, loc, dsts, src, packets=True)

    def op_cpkt(self, op, loc, chtype, srcs, dsts):
        self.count(op, srcs, dsts, 1, 1)
        src = self.local(op, srcs[0], "the source")
        dst = self.local_packets(op, dsts[0], "the destination")
        self.same_size(op, [src, dst])
        return self.packets_to(self.me, dst, src, loc)

    def op_upkt(self, op, loc, chtype, srcs, dsts):
        self.count(op, srcs, dsts, 1, 1)
        src, out = self.read_packets(op, srcs[0], "the source", loc)
        dst = self.local(op, dsts[0], "the destination")
        self.same_size(op, [src, dst])
        return out + [ir.Copy(dst=dst, src=src, loc=loc)]

    def op_repkt(self, op, loc, chtype, srcs, dsts, copies=0, send=False):
        if send:
            self.need(op, chtype, ("memory",))
        self.count(op, srcs, dsts, 2, 1 + copies, least=True)
        if not send:
            self.count(op, srcs, dsts, None, 1 + copies)
        first = self.local(op, srcs[0], "the first source")
        out: list = []
        parts = []
        for sref in srcs[1:]:
            region, wait = self.read_packets(op, sref, "a packet source", loc)
            out += wait
            parts.append(region)
        dst = self.local(op, dsts[0], "the destination")
        self.same_size(op, [first, *parts, dst])
        out.append(ir.LocalReduce(dst=dst, srcs=(*parts, first), loc=loc))
        if copies:
            mine = self.local_packets(op, dsts[1], "the packet copy")
            self.same_size(op, [dst, mine])
            out += self.packets_to(self.me, mine, dst, loc)
        if send:
            out += self.sends(op, loc, dsts[1 + copies:], dst, packets=True)
        return out

    def op_respkt(self, op, loc, chtype, srcs, dsts):
        return self.op_repkt(op, loc, chtype, srcs, dsts, send=True)

    def op_recpkt(self, op, loc, chtype, srcs, dsts):
        return self.op_repkt(op, loc, chtype, srcs, dsts, copies=1)

    def op_recspkt(self, op, loc, chtype, srcs, dsts):
        return self.op_repkt(op, loc, chtype, srcs, dsts, copies=1, send=True)


def to_schedule(plan: Plan, chunk: int | None = None) -> ir.Schedule:
    """The schedule of an execution plan (see the module docstring); `chunk` elements per chunk (default:
    the least that every thread block group can cut evenly)."""
    return _Builder(plan, chunk).schedule()


class ImportedPlan:
    """An imported plan, in the shape the commands load schedules in (`dsl.trace.ScheduleDef`): its world
    is the plan's, and it has no sizes or parameters to bind. A message size (`predict --sizes`) sets the
    chunk (`trace_chunk`, `perf.predict.imported_chunk`): it is an `imported.Imported`."""

    packet_signal = PKT_FLAG  # a packet op's put_signals carry their flag in the data (LL)

    def __init__(self, path: str, chunk: int | None = None, text: str | None = None):
        self.plan = parse(path, text)
        self.chunk = chunk
        self._unit: int | None = None
        name = self.plan.top.get("name")
        self.name = _name(name if isinstance(name, str) else "mscclpp")
        self.loc = ir.SourceLoc(file=os.path.basename(path), line=self.plan.top.line)
        gpus = self.plan.top.get("gpus")
        self.world = len(gpus) if isinstance(gpus, list) and gpus else 1
        self.ranks = (self.world,)
        self.ranks_per_node = None
        self.sizes: tuple = ()
        self.params: tuple = ()
        self.expect: tuple = ()

    def variants(self) -> list[dict]:
        return [{}]

    def trace(self, world: int, ranks_per_node: int | None = None, sizes=None, params=None) -> ir.Schedule:
        self._refuse(world, sizes, params)
        return self._placed(to_schedule(self.plan, self.chunk), ranks_per_node)

    def _refuse(self, world: int, sizes=None, params=None) -> None:
        if world != self.world:
            raise ScheduleError(f"the plan is written for {self.world} GPUs, not {world}", file=self.loc.file,
                                line=self.loc.line, hint=f"use --ranks {self.world} (or leave it out)")
        if sizes or params:
            raise ScheduleError("an imported plan has no sizes or parameters to bind", file=self.loc.file,
                                line=self.loc.line, hint="leave out --size and --param")

    @staticmethod
    def _placed(sched: ir.Schedule, ranks_per_node: int | None) -> ir.Schedule:
        return sched.model_copy(update={"ranks_per_node": ranks_per_node}) if ranks_per_node else sched

    @property
    def chunk_unit(self) -> int:
        """The fewest elements a chunk holds: what every thread block group of the plan cuts evenly (the
        default chunk of `to_schedule`)."""
        if self._unit is None:
            self._unit = _Builder(self.plan, None).chunk
        return self._unit

    @property
    def protocol(self) -> str:
        """The plan's `protocol` (Simple or LL: LL plans move their data in packets)."""
        return str(self.plan.top.get("protocol", "Simple"))

    @property
    def pricing(self) -> str:
        """How `clockworks predict` prices the plan (the report's "priced as" line)."""
        unit = self.chunk_unit
        piece = "each chunk" if unit == 1 else f"each 1/{unit} of a chunk (the thread block groups' cut)"
        return ("each memory-channel put (put, and the remote writes of res and rres) as an NVSHMEM put over the "
                "links from one thread block (its own stores, at one block's rate), each remote read (get, rre, "
                "rres) as an NVSHMEM get by one thread block; packet writes (LL: ppkt, rppkt, cpkt, respkt, recpkt, "
                f"recspkt) as the packet path, {piece} one stream of 16-byte stores of 8 data bytes and their "
                "flag (twice the bytes, no fence); port-channel puts as NVSHMEM puts by the thread block (the CPU "
                "proxy's own costs are not modelled); signals as a fence and an NVSHMEM signal, waits, barriers "
                "and semaphores as waits on signal words; copies and reduces as HBM traffic; one kernel per GPU, "
                "started once; the whole message in one pass")

    def trace_chunk(self, world: int, chunk: int, ranks_per_node: int | None = None) -> ir.Schedule:
        """The plan with `chunk` elements per chunk (a multiple of `chunk_unit`; `perf.predict` sets it from a
        message size): the plan at `chunk_unit` with every element `chunk // chunk_unit` elements wide, which
        is the plan at `chunk` (every region scales with the chunk there) except that a packet's flag covers
        that many elements, so that a packet op is as many puts at any size."""
        self._refuse(world)
        unit = self.chunk_unit
        if chunk < 1 or chunk % unit:
            raise ScheduleError(f"a chunk of {chunk} elements: the plan's thread block groups cut chunks of "
                                f"multiples of {unit}", file=self.loc.file, line=self.loc.line,
                                hint=f"use a multiple of {unit} elements per chunk")
        return self._placed(_widened(to_schedule(self.plan, unit), chunk // unit), ranks_per_node)


def _widened(node, k: int):
    """`node` (a schedule, or any part of one) with every buffer and region `k` times as many elements
    (signals unchanged)."""
    if k == 1:
        return node
    if isinstance(node, ir.Region):
        return node.model_copy(update={"start": node.start * k, "stop": node.stop * k})
    if isinstance(node, ir.BufferDecl):
        return node.model_copy(update={"count": node.count * k})
    if isinstance(node, tuple):
        return tuple(_widened(x, k) for x in node)
    if isinstance(node, ir.Frozen) and not isinstance(node, (ir.SignalDecl, ir.SignalRef, ir.SourceLoc)):
        update = {}
        for name in type(node).model_fields:
            value = getattr(node, name)
            new = _widened(value, k)
            if new is not value:
                update[name] = new
        return node.model_copy(update=update) if update else node
    return node
