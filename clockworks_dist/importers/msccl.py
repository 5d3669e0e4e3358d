"""MSCCL XML algorithms as schedules: `clockworks check algo.xml` (and show, run, import).

What each part of the XML becomes (`msccl_xml` reads and checks the file):
- each `<gpu>` is a rank; each `<tb>` a thread block of that rank (`ir.Thread`), kept concurrent:
  the checker explores every order of a GPU's thread blocks, so a race between two of them, or a
  dependency the file forgets, is found whichever order the hardware picks;
- a thread block's connection is its send peer (or receive peer) on its channel: a FIFO of `slots`
  messages (`ir.Send.slots`, one message per step). Every step's data is assumed to fit the
  connection's buffers, so a send completes before its recv while the FIFO has room;
- each `<step>` is the ops of its type, every one at the step's line of the XML file:
  `s` send; `r` recv; `rcs` recv into dst, then send dst; `rrc` recv and reduce with src into dst;
  `rrs` recv, reduce with src, send the sum (kept in the thread block's own scratch); `rrcs` the
  same, stored in dst too; `cpy` copy; `re` dst = dst + src (msccl-tools' reduce); `nop` nothing;
- a step's dependency (`depid`, `deps`) is a wait until thread block `depid`'s word in `DEP_SIGNAL`
  reaches `deps + 1`; a step that others wait for (`hasdep`) then sets its own word to its index + 1,
  as the runtime's per-thread-block flags do (a fence before each set after the first keeps them in
  the block's order, as one thread's stores to one word are);
- buffers: `input` and `output` (out of place), or one `buffer` (in place, `i` and `o` are the same
  memory), and `scratch`, each chunk `chunk` elements; `tmp` holds each thread block's reduced data
  in flight;
- the postcondition comes from `coll`: allreduce, allgather and alltoall, in place or not. Any other
  collective is checked for deadlocks, races and mismatches only.

A thread block is one thread of the checker, each step complete before the next starts. On the GPU it is
many threads, each doing its part of every step, and that is exact because the runtime barriers the whole
block between steps (Azure/msccl-executor-nccl at c6f6b36, the interpreter `mscclRunInterpreter` in
`src/device/msccl_kernel.cu`): every primitive a step calls ends, after its last load and store, with a
barrier of all the block's `nthreads` threads (`bar.sync` on its named barrier, `__syncwarp` for one warp):
Simple `genericOp` after each slice's reduceCopy (`src/device/prims_simple.h` lines 382 and 402) and
`mscclGenericOp` (line 556, `localCopy`, `reduce`); LL's receiving ops in `postRecv` (`prims_ll.h` line 121),
its `mscclGenericOp` (line 507), and `send`, the only one without, through `sendWithBarrier` (lines 729-733,
"This is the only primitive.instruction where there is no barrier at the end, add it"); LL128's `GenericOp`
(`prims_ll128.h` line 423) and `mscclGenericOp` (line 536); a `re` of fewer elements than threads
(`msccl_kernel.cu` line 287). A step's dependency is waited for by the threads below its count, then
`barrier(nthreads)` (lines 226-239); a step others depend on sets the block's flag from thread nthreads-1
after the step's closing barrier (lines 313-318). A `nop` step is no transmission (`msccl_parser.cc` line 538,
type -1): its dependency is waited for before the block's next step, as here. So no check is needed: a step
that reads what the block's previous step wrote, with no dependency between them, is ordered on the GPU as
in the checker (`scheduler_allreduce_hier_4gpu_simple.xml`, gpu 0 thread block 24: `r` into scratch, then
`re` of it).
"""

from __future__ import annotations

import os

from .. import ir
from ..errors import ScheduleError
from .names import schedule_name
from .msccl_xml import XmlAlgorithm, XmlGpu, XmlStep, XmlThreadBlock, parse

DEP_SIGNAL = "msccl_dep"
DEFAULT_SLOTS = 1


def _name(alg: XmlAlgorithm) -> str:
    """The algorithm's name as an identifier (it names the schedule, and generated code)."""
    return schedule_name(alg.name, "msccl")


class _Rank:
    """The ops of one gpu, thread block by thread block."""

    def __init__(self, alg: XmlAlgorithm, gpu: XmlGpu, chunk: int, slots: int, tmp_per_tb: int):
        self.alg, self.gpu, self.chunk, self.slots, self.tmp_per_tb = alg, gpu, chunk, slots, tmp_per_tb
        self.file = os.path.basename(alg.file)
        self.flagged: dict[int, bool] = {}  # thread block -> it has set its flag before

    def buffer(self, letter: str) -> str:
        if self.alg.inplace and letter in "io":
            return "buffer"
        return {"i": "input", "o": "output", "s": "scratch"}[letter]

    def region(self, letter: str, offset: int, count: int) -> ir.Region:
        return ir.Region(buffer=self.buffer(letter), start=offset * self.chunk, stop=(offset + count) * self.chunk)

    def tmp(self, tb: XmlThreadBlock, count: int) -> ir.Region:
        base = self.gpu.tbs.index(tb) * self.tmp_per_tb
        return ir.Region(buffer="tmp", start=base, stop=base + count * self.chunk)

    def thread(self, tb: XmlThreadBlock) -> ir.Thread:
        ops: list = []
        for step in tb.steps:
            ops += self.step(tb, step)
        return ir.Thread(name=f"tb{tb.id}", kind="block", ops=tuple(ops),
                         loc=ir.SourceLoc(file=self.file, line=tb.line))

    def step(self, tb: XmlThreadBlock, step: XmlStep) -> list:
        loc = ir.SourceLoc(file=self.file, line=step.line)
        me = self.gpu.id
        conn = dict(channel=tb.chan, slots=self.slots)
        out: list = []
        if step.depid >= 0:
            out.append(ir.WaitUntil(signal=ir.SignalRef(signal=DEP_SIGNAL, index=step.depid), cmp="ge",
                                    value=step.deps + 1, loc=loc))
        kind = step.type
        src = self.region(step.srcbuf, step.srcoff, step.cnt) if kind in ("s", "rrc", "rrs", "rrcs", "cpy", "re") \
            else None
        dst = self.region(step.dstbuf, step.dstoff, step.cnt) if kind in ("r", "rcs", "rrc", "rrcs", "cpy", "re") \
            else None

        def send(region: ir.Region) -> ir.Send:
            return ir.Send(peer=tb.send, src=region, loc=loc, **conn)

        def recv(region: ir.Region, reduce: str | None = None) -> ir.Recv:
            return ir.Recv(peer=tb.recv, dst=region, reduce=reduce, loc=loc, **conn)

        if kind == "s":
            out.append(send(src))
        elif kind == "r":
            out.append(recv(dst))
        elif kind == "rcs":
            out += [recv(dst), send(dst)]
        elif kind in ("rrc", "rrcs"):
            if src == dst:  # dst = dst + received
                out.append(recv(dst, reduce="sum"))
            else:
                tmp = self.tmp(tb, step.cnt)
                out += [recv(tmp), ir.LocalReduce(dst=dst, srcs=(src, tmp), loc=loc)]
            if kind == "rrcs":
                out.append(send(dst))
        elif kind == "rrs":
            tmp = self.tmp(tb, step.cnt)
            out += [recv(tmp), ir.LocalReduce(dst=tmp, srcs=(src, tmp), loc=loc), send(tmp)]
        elif kind == "cpy":
            out.append(ir.Copy(dst=dst, src=src, loc=loc))
        elif kind == "re":
            out.append(ir.LocalReduce(dst=dst, srcs=(dst, src), loc=loc))
        if step.hasdep:
            if self.flagged.get(tb.id):  # the runtime's flag is one thread's stores, in program order: a
                out.append(ir.Fence(loc=loc))  # fence keeps this set behind the block's earlier ones
            self.flagged[tb.id] = True
            out.append(ir.SignalUpdate(pe=me, signal=ir.SignalRef(signal=DEP_SIGNAL, index=tb.id), value=step.s + 1,
                                       sig_op="set", loc=loc))
        return out


def to_schedule(alg: XmlAlgorithm, chunk: int = 1, slots: int = DEFAULT_SLOTS,
                ranks_per_node: int | None = None) -> ir.Schedule:
    """The schedule of an MSCCL algorithm (see the module docstring): `chunk` elements per chunk,
    `slots` messages per connection."""
    n = alg.ngpus
    loc = ir.SourceLoc(file=os.path.basename(alg.file), line=alg.line)
    tmp_per_tb = max((s.cnt for g in alg.gpus for tb in g.tbs for s in tb.steps if s.type in ("rrc", "rrs", "rrcs")),
                     default=0) * chunk
    most_tbs = max((len(g.tbs) for g in alg.gpus), default=0)
    programs = []
    for gpu in sorted(alg.gpus, key=lambda g: g.id):
        rank = _Rank(alg, gpu, chunk, slots, tmp_per_tb)
        buffers = []

        def declare(name: str, count: int, role: str) -> None:
            buffers.append(ir.BufferDecl(name=name, count=count * chunk, role=role, loc=loc))

        if alg.inplace:
            declare("buffer", max(gpu.i_chunks, gpu.o_chunks), "inout")
        else:
            declare("input", gpu.i_chunks, "input")
            declare("output", gpu.o_chunks, "output")
        declare("scratch", gpu.s_chunks, "scratch")
        buffers.append(ir.BufferDecl(name="tmp", count=tmp_per_tb * len(gpu.tbs), role="scratch", loc=loc))
        signals = (ir.SignalDecl(name=DEP_SIGNAL, count=max(most_tbs, 1), loc=loc),)
        threads = tuple(rank.thread(tb) for tb in gpu.tbs)
        programs.append(ir.Program(rank=gpu.id, buffers=tuple(buffers), signals=signals, threads=threads))
    sched = ir.Schedule(name=_name(alg), world=n, ranks_per_node=ranks_per_node or n, loc=loc,
                        programs=tuple(programs))
    return sched.model_copy(update={"expect": _expect(alg, sched, chunk)})


def _expect(alg: XmlAlgorithm, sched: ir.Schedule, chunk: int) -> tuple[ir.Expectation, ...]:
    """The postcondition of the algorithm's collective (none for a collective not known here)."""
    n, coll = alg.ngpus, alg.coll.lower().replace("-", "_")
    gpus = {g.id: g for g in alg.gpus}
    into = "buffer" if alg.inplace else "output"
    source = "buffer" if alg.inplace else "input"

    def region(name: str, first: int, count: int) -> ir.Region:
        return ir.Region(buffer=name, start=first * chunk, stop=(first + count) * chunk)

    out = []
    if coll == "allreduce":
        k = gpus[0].i_chunks if gpus[0].i_chunks else gpus[0].o_chunks
        result = into if (alg.inplace or gpus[0].o_chunks) else source
        for q in range(n):
            out.append(ir.Expectation(rank=q, region=region(result, 0, k), op="sum", label="allreduce (msccl)",
                                      contributions=tuple(ir.Contribution(rank=r, region=region(source, 0, k))
                                                          for r in range(n))))
    elif coll == "allgather":
        k = gpus[0].o_chunks // n
        for q in range(n):
            for r in range(n):
                mine = region(source, r * k, k) if alg.inplace else region(source, 0, k)
                out.append(ir.Expectation(rank=q, region=region(into, r * k, k), label="allgather (msccl)",
                                          contributions=(ir.Contribution(rank=r, region=mine),)))
    elif coll == "alltoall":
        k = gpus[0].i_chunks // n
        for q in range(n):
            for r in range(n):
                out.append(ir.Expectation(rank=q, region=region(into, r * k, k), label="alltoall (msccl)",
                                          contributions=(ir.Contribution(rank=r, region=region(source, q * k, k)),)))
    return tuple(out)


class ImportedDef:
    """An imported algorithm, in the shape the commands load schedules in (`dsl.trace.ScheduleDef`):
    its world is the file's, and it has no sizes or parameters to bind. A message size (`predict
    --sizes`) sets the chunk (`trace_chunk`, `perf.predict.imported_chunk`): it is an `imported.Imported`."""

    chunk_unit = 1  # a chunk may hold any number of elements
    packet_signal = None  # its steps are NCCL sends and recvs, priced with the protocol

    def __init__(self, path: str, chunk: int = 1, slots: int = DEFAULT_SLOTS):
        self.alg = parse(path)
        self.chunk, self.slots = chunk, slots
        self.name = _name(self.alg)
        self.loc = ir.SourceLoc(file=os.path.basename(path), line=self.alg.line)
        self.ranks = (self.alg.ngpus,)
        self.ranks_per_node = None
        self.sizes: tuple = ()
        self.params: tuple = ()
        self.expect: tuple = ()

    def variants(self) -> list[dict]:
        return [{}]

    def trace(self, world: int, ranks_per_node: int | None = None, sizes=None, params=None) -> ir.Schedule:
        if world != self.alg.ngpus:
            raise ScheduleError(f"the algorithm is written for {self.alg.ngpus} GPUs, not {world}", file=self.loc.file,
                                line=self.loc.line, hint=f"use --ranks {self.alg.ngpus} (or leave it out)")
        if sizes or params:
            raise ScheduleError("an imported algorithm has no sizes or parameters to bind", file=self.loc.file,
                                line=self.loc.line, hint="leave out --size and --param")
        return to_schedule(self.alg, self.chunk, self.slots, ranks_per_node)

    @property
    def protocol(self) -> str:
        """The protocol the file's thread blocks move every step with (`proto`: Simple, LL, LL128)."""
        return self.alg.proto

    @property
    def pricing(self) -> str:
        """How `clockworks predict` prices the algorithm (the report's "priced as" line)."""
        proto = self.protocol
        text = (f"each step's send and recv as an NCCL send/recv with the file's protocol, {proto}, on one channel "
                "(its thread block), starting no kernel of its own (one kernel per GPU, started once); reduces and "
                "copies as kernels over HBM; each dependency flag as an NVSHMEM signal to the GPU itself; the whole "
                "message in one pass (MSCCL's loops over a large message are not modelled)")
        if proto == "LL128":
            text += ("; LL128's point-to-point constants were never measured (NCCL's own sends use LL or Simple): "
                     "the library's values")
        return text

    def trace_chunk(self, world: int, chunk: int, ranks_per_node: int | None = None) -> ir.Schedule:
        """The algorithm with `chunk` elements per chunk (`perf.predict` sets it from a message size)."""
        self.trace(world, ranks_per_node)  # the same refusals as trace
        return to_schedule(self.alg, chunk, self.slots, ranks_per_node)
