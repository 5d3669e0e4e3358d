"""The NVSHMEM backend: device-initiated, one cooperative kernel per rank that runs all of the rank's ops.

Each rank's ops run inside one kernel, launched with `nvshmemx_collective_launch` (cooperative, so
every thread block is resident and grid-wide syncs and device barriers are legal). The ops are
NVSHMEM's device API: put / put_nbi (`nvshmemx_putmem[_nbi]_block`), put_signal
(`nvshmemx_putmem_signal[_nbi]_block`, or spread data then `nvshmemx_signal_op`), signal_op, atomics
(`nvshmem_<type>_atomic_<op>`), get / get_nbi (`nvshmemx_getmem[_nbi]_block`),
`nvshmem_uint64_wait_until[_all|_any]`, `nvshmem_fence`, `nvshmem_quiet`, `nvshmem_barrier_all`,
`nvshmem_sync_all`. Local ops (reduce, copy, fill, compute) are device loops in the same kernel,
spread over blocks like the transfers, with `support.cuh`'s arithmetic: ending the kernel around
them (host-launched kernels, as `local.py` does for NCCL) would order every block and every op at
each boundary, and cost a launch; inside, a local op waits only for what it depends on. Buffers live
on the symmetric heap: symmetric ones by `nvshmem_malloc` in one order on every PE, per-rank ones
carved from one symmetric pool of one size on every PE (so any buffer is a valid local side of a
put or get on every transport, also the network ones that need registered memory). main()
bootstraps NVSHMEM over MPI (the unique id through `MPI_Bcast`).

Thread blocks. One block reaches only about 37 GB/s of NVLink (reference/published-anchors.md), so
an op of B bytes is spread over ceil(B / 64 KiB) blocks (at most 132, one per SM of an H200), each
issuing its 16-byte-aligned share with the block-scoped call (16-byte vector copies when aligned).
An op of at most 64 KiB, and every one-word op, runs on one block; independent small ops rotate
over the blocks, so the puts to n - 1 peers of an all-to-all go out in parallel. The kernel has as
many blocks as its largest op wants (capped at run time by the SM count and by what stays
resident), and every block writes its own progress word (`cw_marks_dev[1 + block]`), so a hang
names each block's op.

Program order across blocks, only where the semantics needs it. Each block runs its part of the ops
in program order, so one block's work is ordered by itself; across blocks the plan
(`lowering.nvshmem_plan.plan_rank`) derives, from the rules' accesses (`semantics.rules`) and the
happens-before rules (`semantics.order`), what an op must wait for:
- a hazard: the op touches (when issued, or in a delivery it performs now) memory that an earlier
  op touched when issued, one of them writing (program order; a delivery landing later is not
  ordered, `order.issue_to_delivery` only orders its issue);
- a publication: the op updates a signal word (a signal_op, put_signal's signal, an atomic or
  fetching atomic on a signal word): its target may go on once it sees it, so what earlier ops did
  to memory another rank touches must be visible first (on the system scope: a fence);
- a fence (`order.fence_order`): a delivery to PE p after a fence must land after the deliveries to p
  before it, which other blocks may have issued;
- put_signal: the signal lands after that call's data (one delivery), which every block put a
  share of.
How it is kept: if every earlier op it depends on ran on one block, the op runs on that block
(`__syncthreads`, plus the block's `nvshmem_fence` where a fence or a publication needs one); else a
one-block op is run by the last block to arrive (every block arrives after its own work, fenced
where needed; the others go on without waiting), and a spread op, or a run of signals one after the
other (one per peer, say), follows a grid-wide sync. A quiet and barrier_all complete every delivery
of the PE (every block's `nvshmem_quiet`, then a grid-wide sync); sync_all and barrier_all are one
thread's device barrier between two grid-wide syncs. A wait is polled by thread 0 of every block, so
each block's later ops follow the write that satisfied it without a grid-wide sync; its read counts
as a touch of the word, so the rank's next signal waits for every block to have polled (else a peer
let go by it could change the word under a block still polling), unless the word only grows (adds,
never 2**64 in total) and the wait is ge/gt. The generated code says, above each of these, why it is
there.

NVSHMEM's memory model, as its device code implements it (NVIDIA/nvshmem, nvshmemi_common_device.cuh):
on the NVLink (load/store) path `nvshmem_fence` and `nvshmem_quiet` are `__threadfence_system()` of
the calling thread, which orders that thread's own stores and, cumulatively, what it has observed;
NVSHMEM's own block-scoped put_signal relies on this (the block's threads copy, `__syncthreads`,
thread 0 fences and signals). A fence or quiet by one thread therefore orders other threads' and
blocks' deliveries only after they synchronise with it, which is why every block fences its own
deliveries before the handoff (`__syncthreads`, then thread 0's fence), and the handoff (arrival
counter or grid-wide sync) carries the order to the thread that goes on.

The end of a run: every block quiets, then every rank meets (`nvshmem_barrier_all`), inside the
kernel: a run ends when every delivery has landed on every rank (the final state the checker's
values describe), and no rank's next reset can overwrite what a slower rank still delivers or reads.

Calls (`--calls K`): each call's ops are a kernel of their own, launched one after the other on the
stream, as a library call would launch them (`splits`; `--fuse-calls` keeps them in one kernel). The
plan treats each boundary as a grid-wide sync, fenced where anything before it is unpublished: the
kernel before ends with every block's fence of its own work, and the next starts once every block of
that one has finished, which orders at least what a grid-wide sync orders. A call's kernel of one block that calls
no NVSHMEM collective (every one but the last, unless a sync or barrier separates the calls) is
launched plainly rather than cooperatively: it needs no co-resident blocks, its grid-wide syncs are
its block's barrier (`cw_nv_grid_barrier`), and it starts sooner (`cw_nv_launch`). With
CW_NV_PDL=1 a plain launch also carries programmatic dependent launch (off by default: on one H200
it saved nothing in a graph and cost the host more eagerly): the kernel may be launched while the
one before it still runs, and every kernel's first statement waits for the one before it to
complete with its memory visible (`PDL_WAIT`), so the boundary orders what it ordered without it.

CUDA graphs: `nvshmemx_collective_launch` records an event on the caller's stream, launches on
NVSHMEM's own stream and makes the caller's stream wait for it (NVIDIA/nvshmem's collective launch:
capturable in principle, as a fork and join of streams, but that depends on how NVSHMEM made its
stream). While the stream is being captured the kernel is launched with `cudaLaunchKernelExC` and
the cooperative launch attribute directly on it (same kernel and grid, checked resident with
`nvshmemx_collective_launch_query_gridsize` at setup), so the graph is one cooperative kernel node.

Packets (`--packets`, `lowering/packets.py`): a put_signal lowered to flag-in-data packets is a spread op of
twice its bytes whose blocks store their packets straight into the peer's area (`nvshmem_ptr`), with
no fence of its own and no signal; the ordering it needs before it (a publication) is the planner's,
as for any signal. Its wait is polled by every block over every packet, then the word is set to
the value locally; the copy after it unpacks. Where the lowering dropped that copy (its destination
was scratch read only by one reduce, `packets._consumed`), the reduce reads the packet areas itself
(`cw_nv_pk_reduce`, each packet polled for its flag); and where that reduce is the last op of its
kernel and only its waits come before it, the waits poll nothing (`_polled_by_reduce`): each block's
share of the reduce polls its own packets, and the next kernel starts after every block has
finished. A rank whose every op then fits one block runs them
all on block 0, so each follows what it depends on by a `__syncthreads`.

A reduce and the puts of its sums (`nvshmem_plan.fusable_put`, `Step.fused`): a put or put_signal to
another PE whose source is exactly the destination of the reduce right before it (or before other such
puts of it to other peers), and which waits for nothing but that reduce, runs inside it on its blocks:
each thread stores its sums into the destination and into every peer's copy (`cw_nv_reduce_put`); the
put emits nothing more, a put_signal only its signal after every block's fence (`cw_nv_last`).

Copy-engine puts (`--copy-engine SIZE`, `lowering.nvshmem_plan.copy_engine_ops`): a put or put_signal
of at least SIZE bytes is not run by the kernel's blocks: the host issues it on the rank's stream
between two kernels (`nvshmemx_putmem_on_stream`, `nvshmemx_putmem_signal_on_stream`), in the rank's
launch code. The plan treats it as a kernel boundary before it and after it (`plan_rank`): the kernel
before ends fenced where the put publishes or a fence orders what came before; the copy starts once
that kernel has finished and the next kernel once the copy (and its signal's write) has completed.
Setup stops a run whose peer is not reached over NVLink, where NVSHMEM's on-stream put is a peer copy
on that stream.

Teams (`r.team_split_strided` and the team ops, `lowering.nvshmem_plan.team_step`): each split is made
once, on the host at setup (`nvshmem_team_split_strided`, every rank's splits in its program order, the
order the checker matched; setup stops the run if NVSHMEM made another team), and destroyed after the
last run; at its place in the kernel the parent's members meet (`nvshmem_sync_all` or
`nvshmem_team_sync(parent)`), as the split makes them meet. team_barrier and team_sync are barrier_all
and sync_all on the team (`nvshmem_barrier(team)`, `nvshmem_team_sync(team)`). A team collective is a
fenced grid-wide sync, block 0's threads' `nvshmemx_team_sync_block(team)` and the collective's
block-scoped call (`nvshmemx_<T>_<op>_reduce_block`, `_fcollect_block`, `_alltoall_block`,
`_broadcast_block` with the root's index in the team), then a grid-wide sync: fenced, since NVSHMEM may
read the source and write the destination from the other members by loads and stores; the team sync,
since NVSHMEM asks every member's destination to be ready before any member calls it, while the
schedule's collective writes it only once every member has arrived. The kernel takes its teams' handles
as arguments; a rank outside a team has `NVSHMEM_TEAM_INVALID` and runs none of its ops.

signal_store (`*sig = value`): one thread's volatile 64-bit store to the rank's own word, placed by the
plan as any op that writes a signal word; nothing else orders it.

Send, recv, groups and the NCCL collectives (on the world or an `r.comm` communicator) are NCCL's
(`--backend nccl`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .. import ir
from ..lowering.nvshmem_plan import (
    TEAM_COLLECTIVES, RankPlan, Step, Who, kernel_spans, staged, syncs_grid, team_of, team_op,
)
from ..semantics.backends import Backend, Unsupported, register
from ..semantics.rules import describe, rule
from . import cuda
from .program import Gen, Target, bits, op_comment, signal_word

POOL_ALIGN = 256  # per-rank buffers start on this boundary in the symmetric pool

TWO_SIDED = "an NCCL op (two-sided or collective): generate this schedule with --backend nccl"
NV_TYPE = {"int32": "int32", "int64": "int64", "uint32": "uint32", "uint64": "uint64"}
CMP = {"eq": "NVSHMEM_CMP_EQ", "ne": "NVSHMEM_CMP_NE", "gt": "NVSHMEM_CMP_GT", "ge": "NVSHMEM_CMP_GE",
       "lt": "NVSHMEM_CMP_LT", "le": "NVSHMEM_CMP_LE"}
SIGNAL_OP = {"set": "NVSHMEM_SIGNAL_SET", "add": "NVSHMEM_SIGNAL_ADD"}
FETCH_CALL = {"fetch_add": "atomic_fetch_add", "fetch_inc": "atomic_fetch_inc", "fetch": "atomic_fetch",
              "swap": "atomic_swap", "compare_swap": "atomic_compare_swap", "fetch_and": "atomic_fetch_and",
              "fetch_or": "atomic_fetch_or", "fetch_xor": "atomic_fetch_xor"}


# ------------------------------------------------------------------------------------ C++ text
PRELUDE = Path(__file__).with_name("nvshmem.cuh")  # the device pieces every kernel calls

# ------------------------------------------------------------------------------------ emitters
@dataclass
class _Kernel:
    """What the emitters of one rank's kernel share (kept on the `Gen` while it is written)."""

    plan: RankPlan
    step: Step
    statics: list[str] = field(default_factory=list)  # file-scope arrays the kernel reads


def _state(gen: Gen) -> dict:
    """This backend's state for one generation (the plans, the kernel being written), kept on the `Gen`."""
    return gen.state.setdefault("nvshmem", {})


def _value(gen: Gen, op, index: int | None = None) -> str:
    """The signal value an op sets, adds or waits for, as C. In a library's kernel for every call
    (`codegen.library`, calls without end) a value that moves on with the calls is this call's: the
    value of the call the kernel was made from plus `cw_epoch` (this call's epoch less that call's, modulo
    2**64) times what it moves by per epoch (`lowering.repeat.epochs`). `index`: the op's index, where
    it is not the one being written."""
    step = _state(gen).get("epoch_steps", {}).get((gen.rank, gen.index if index is None else index), 0)
    if not step:
        return cuda.u64(op.value)
    return f"({cuda.u64(op.value)} + cw_epoch * {cuda.u64(step)})"


def _flag(gen: Gen, op, index: int | None = None) -> str:
    """A packet flag (32 bits, `lowering.packets`): the set value, or this call's (`_value`) modulo 2**32.
    Modulo 2**32 a flag never matches one left in the area by an earlier call: each call's wait sees its
    own flag before the sender's next call overwrites it (else the checker's wait, which compares whole
    numbers, would miss it: a deadlock), so the area holds a flag of this call's epoch or the one
    before, less than 2**32 apart. `index`: the op's index, where it is not the one being written."""
    value = _value(gen, op, index)
    return f"{op.value}u" if value == cuda.u64(op.value) else f"(uint32_t){value}"


def _kernel(gen: Gen) -> _Kernel:
    return _state(gen)["kernel"]


def _share(step: Step) -> str:
    """The (want, base) arguments of a spread helper: all of it on the running block, or its share."""
    if step.who.kind == "all":
        return f"{step.who.want}, {step.who.base}"
    return "1, blockIdx.x"


def _guarded(gen: Gen, body: list[str]) -> list[str]:
    """`body` run by the step's blocks: all (each its share), one block, or the last to arrive."""
    step = _kernel(gen).step
    fence = "true" if step.fence else "false"
    if step.who.kind == "all":
        return body
    if step.who.kind == "one":
        head = f"  if (cw_nv_mine({step.who.base})) {{  // block {step.who.base} (mod the grid) runs it"
        pre = [f"    cw_nv_block({fence});"] if step.pre == "block" else []
    else:
        head = f"  if (cw_nv_last(&cw_arrive[{step.counter}], {fence})) {{  // the last block to arrive runs it"
        pre = []
    return [head, *pre, *["  " + line for line in body], "  }"]


def _remote(gen: Gen, region: ir.Region, pe: int, op) -> str:
    """The symmetric address of `region` (the same on every PE), through this rank's declaration."""
    try:
        mine = gen.program.buffer(region.buffer)
        theirs = gen.sched.programs[pe].buffer(region.buffer)
    except KeyError:
        raise Unsupported(f"{op.loc}: the nvshmem-codegen backend cannot run {op.kind}: symmetric buffer "
                          f"{region.buffer} is not declared on rank {gen.rank} and rank {pe} alike (declare it on "
                          "every rank)") from None
    if not (mine.symmetric and theirs.symmetric) or mine.dtype != theirs.dtype:
        raise Unsupported(f"{op.loc}: the nvshmem-codegen backend cannot run {op.kind}: {region.buffer} must be a "
                          "symmetric buffer of one dtype on every rank")
    return gen.ptr(region)


def _signal(gen: Gen, ref: ir.SignalRef, owner: int) -> str:
    """The signal word's symmetric address: its index in `owner`'s layout (declaration order)."""
    return f"cw_sig + {signal_word(gen.sched.programs[owner], ref)}"


def _source(gen: Gen, op, src: ir.Region, lines: list[str]) -> str:
    """`src`'s pointer, or a scratch copy's (made by the running block) when it overlaps the destination
    at another offset (`nvshmem_plan.staged`)."""
    if staged(op, gen.rank) != src:
        return gen.ptr(src)
    scratch = gen.add_scratch(gen.nbytes(src), f"op {gen.index} of rank {gen.rank}: a source overlapping its "
                                                "destination at another offset, read before it is written")
    lines += [f"  cw_nv_copy({scratch}, {gen.ptr(src)}, {gen.nbytes(src)}, 1, blockIdx.x);  // staged: the source "
              "overlaps the destination at another offset",
              "  __syncthreads();"]
    return f"({gen.ctype(src)}*){scratch}"


def put(gen: Gen, op: ir.Put) -> list[str]:
    """Each block puts its share (`nvshmemx_putmem[_nbi]_block`): blocking reads src before it returns."""
    if _kernel(gen).step.fused:
        return [f"  // put to PE {op.pe}: done by the reduce above, each block storing its own sums (fused)"]
    body: list[str] = []
    src = _source(gen, op, op.src, body)
    dst = _remote(gen, op.dst, op.pe, op)
    body.append(f"  cw_nv_put({dst}, {src}, {gen.nbytes(op.src)}, {op.pe}, {'true' if op.nbi else 'false'}, "
                f"{_share(_kernel(gen).step)});  // to PE {op.pe}")
    return _guarded(gen, body)


def _packets(gen: Gen):
    """The `packets.Lowered` of this program's lowering, where it sends any packets (else None)."""
    packets = gen.lowered.packets
    return packets if packets is not None and packets.channels else None


def put_signal(gen: Gen, op: ir.PutSignal) -> list[str]:
    """One block: `nvshmemx_putmem_signal[_nbi]_block` (its data, its fence, then the signal). Spread:
    each block puts its share and fences it; the last block to arrive sends the signal. As packets
    (`lowering/packets.py`): each block stores its share of packets straight into the peer's area."""
    step = _kernel(gen).step
    lowered = _packets(gen)
    if lowered is not None and (gen.rank, gen.index) in lowered.sends:
        channel = lowered.sends[(gen.rank, gen.index)]
        area = gen.ptr(ir.Region(buffer=channel.area, start=0, stop=1))
        return _guarded(gen, [
            f"  // packets: the data and the flag {op.value} in every 16-byte store, straight into PE {op.pe}'s packet "
            "area (no fence, no separate signal)",
            f"  cw_nv_pk_send(nvshmem_ptr({area}, {op.pe}), {gen.ptr(op.src)}, {gen.nbytes(op.src)}, {_flag(gen, op)}, "
            f"{_share(step)});  // to PE {op.pe}"])
    dst = _remote(gen, op.dst, op.pe, op)
    sig = _signal(gen, op.signal, op.pe)
    how = f"{_value(gen, op)}, {SIGNAL_OP[op.sig_op]}"
    if step.fused:  # the data went with the reduce above (nvshmem_plan.fusable_put): the signal after it
        if step.who.kind == "all":
            return [f"  // put_signal to PE {op.pe}: its data went with the reduce above, each block storing its sums; "
                    "each block",
                    "  // fences them (and what it did before), then the last block to arrive signals",
                    f"  if (cw_nv_last(&cw_arrive[{step.signal_counter}], true)) {{",
                    f"    if (threadIdx.x == 0) nvshmemx_signal_op({sig}, {how}, {op.pe});",
                    "  }"]
        return _guarded(gen, [
            f"  // put_signal to PE {op.pe}: its data went with the reduce above (this block's stores); the block's",
            "  // fence then orders them (and what it did before) before the signal, as",
            "  // nvshmemx_putmem_signal_block does",
            "  __syncthreads();",
            f"  if (threadIdx.x == 0) {{ nvshmem_fence(); nvshmemx_signal_op({sig}, {how}, {op.pe}); }}"])
    if step.who.kind != "all":
        body: list[str] = []
        src = _source(gen, op, op.src, body)
        call = "nvshmemx_putmem_signal_nbi_block" if op.nbi else "nvshmemx_putmem_signal_block"
        body.append(f"  {call}({dst}, {src}, {gen.nbytes(op.src)}, {sig}, {how}, {op.pe});  // to PE {op.pe}")
        return _guarded(gen, body)
    return [f"  cw_nv_put({dst}, {gen.ptr(op.src)}, {gen.nbytes(op.src)}, {op.pe}, {'true' if op.nbi else 'false'}, "
            f"{_share(step)});  // to PE {op.pe}",
            "  // put_signal: the signal lands after the data, which every block put a share of: each block",
            "  // fences its share (and makes what it did before visible, for the signal lets PE "
            f"{op.pe} go on),",
            "  // then the last block to arrive signals; the others go on without waiting.",
            f"  if (cw_nv_last(&cw_arrive[{step.signal_counter}], true)) {{",
            f"    if (threadIdx.x == 0) nvshmemx_signal_op({sig}, {how}, {op.pe});",
            "  }"]


def _host_ptr(region: ir.Region) -> str:
    """The region's first element in the host's launch code, through the kernels' argument struct `a`."""
    name = cuda.ident("buffer", region.buffer)
    return f"a.{name} + {region.start}" if region.start else f"a.{name}"


def copy_engine_put(gen: Gen, op) -> list[str]:
    """A put or put_signal on the copy engine (`nvshmem_plan.copy_engine_ops`): the host issues it on
    the rank's stream between two kernels, in the rank's launch code (`rank<k>(s)`), not in a kernel."""
    _remote(gen, op.dst, op.pe, op)  # a symmetric buffer of one dtype on both ranks, or Unsupported
    dst, src, nbytes = _host_ptr(op.dst), _host_ptr(op.src), gen.nbytes(op.src)
    lines = ["", op_comment(op).replace("  //", "  // on the copy engine:", 1),
             "  // issued on the stream once the kernel before has finished (so after every op before it, fenced",
             "  // where it must be: that kernel's end); to a peer over NVLink NVSHMEM copies with a peer",
             "  // cudaMemcpyAsync on this stream"]
    if isinstance(op, ir.PutSignal):
        sig = f"a.sig + {signal_word(gen.sched.programs[op.pe], op.signal)}"
        lines += ["  // and then writes the signal, after the copy has completed: the signal lands after the data.",
                  "  // The next kernel starts after both have completed (stream order: more order than the op needs)",
                  f"  nvshmemx_putmem_signal_on_stream({dst}, {src}, {nbytes}, {sig}, {cuda.u64(op.value)}, "
                  f"{SIGNAL_OP[op.sig_op]}, {op.pe}, s);  // to PE {op.pe}"]
    else:
        nbi = " (a put_nbi's delivery may land any time before the next quiet; here it has landed)" if op.nbi else ""
        lines += ["  // The next kernel starts after the copy has completed (stream order: more order than the op",
                  f"  // needs{nbi})",
                  f"  nvshmemx_putmem_on_stream({dst}, {src}, {nbytes}, {op.pe}, s);  // to PE {op.pe}"]
    return lines


def signal_op(gen: Gen, op: ir.SignalUpdate) -> list[str]:
    sig = _signal(gen, op.signal, op.pe)
    return _guarded(gen, [f"  if (threadIdx.x == 0) nvshmemx_signal_op({sig}, {_value(gen, op)}, "
                          f"{SIGNAL_OP[op.sig_op]}, {op.pe});"])


# NVSHMEM has no int64 add, fetch_add, inc or fetch_inc (CUDA has no signed 64-bit atomicAdd): those
# go through the uint64 call, which leaves the same bits (two's complement arithmetic modulo 2**64).
_UNSIGNED_ONLY = frozenset({"add", "inc", "fetch_add", "fetch_inc"})


def _word(gen: Gen, target, pe: int, op) -> tuple[str, str, str]:
    """(address, C type, NVSHMEM type name) of an atomic's word on `pe`."""
    if isinstance(target, ir.SignalRef):
        return _signal(gen, target, pe), "uint64_t", "uint64"
    dtype = gen.sched.programs[pe].buffer(target.buffer).dtype
    addr = _remote(gen, target, pe, op)
    if dtype == "int64" and op.op in _UNSIGNED_ONLY:
        return f"(uint64_t*)({addr})", "uint64_t", "uint64"
    return addr, cuda.C_TYPE[dtype], NV_TYPE[dtype]


def atomic(gen: Gen, op: ir.Atomic) -> list[str]:
    """`nvshmem_<type>_atomic_<op>` by one thread (inc takes no operand)."""
    addr, ctype, name = _word(gen, op.target, op.pe, op)
    operand = "" if op.op == "inc" else f"({ctype}){_value(gen, op)}, "
    return _guarded(gen, [f"  if (threadIdx.x == 0) nvshmem_{name}_atomic_{op.op}({addr}, {operand}{op.pe});"])


def fetch_atomic(gen: Gen, op: ir.FetchAtomic) -> list[str]:
    """`nvshmem_<type>_atomic_fetch_<op>` by one thread; the old value, cast to into's type (as a
    store into that buffer casts it), lands in local `into`."""
    addr, ctype, name = _word(gen, op.target, op.pe, op)
    value = f"({ctype}){cuda.u64(op.value)}"
    args = {"fetch": "", "fetch_inc": "", "compare_swap": f"({ctype}){cuda.u64(op.cond)}, {value}, "}.get(
        op.op, f"{value}, ")
    call = f"nvshmem_{name}_{FETCH_CALL[op.op]}({addr}, {args}{op.pe})"
    return _guarded(gen, [f"  if (threadIdx.x == 0) *({gen.ptr(op.into)}) = ({gen.ctype(op.into)}){call};"])


def get(gen: Gen, op) -> list[str]:
    """Each block gets its share (`nvshmemx_getmem[_nbi]_block`)."""
    body: list[str] = []
    src = _remote(gen, op.src, op.pe, op)
    if staged(op, gen.rank) is not None:
        src = _source(gen, op, op.src, body)
    nbi = "true" if isinstance(op, ir.GetNbi) else "false"
    body.append(f"  cw_nv_get({gen.ptr(op.dst)}, {src}, {gen.nbytes(op.dst)}, {op.pe}, {nbi}, "
                f"{_share(_kernel(gen).step)});  // from PE {op.pe}")
    return _guarded(gen, body)


def _span(gen: Gen, refs) -> tuple[int, int, list[int]]:
    """The rank's signal words `refs` as a range [lo, lo + n) and its status array (0: waited on)."""
    words = [signal_word(gen.program, ref) for ref in refs]
    lo, hi = min(words), max(words)
    return lo, hi - lo + 1, [0 if w in words else 1 for w in range(lo, hi + 1)]


def wait(gen: Gen, op) -> list[str]:
    """Thread 0 of every block polls (`nvshmem_uint64_wait_until[_all|_any]`, which ends with a fence),
    then `__syncthreads`: each block's later work follows the write that satisfied it."""
    why = "  // every block waits (its thread 0 polls): its later work follows the write that satisfied it"
    lowered = _packets(gen)
    if lowered is not None and (gen.rank, gen.index) in lowered.waits:
        channel = lowered.waits[(gen.rank, gen.index)]
        area = gen.ptr(ir.Region(buffer=channel.area, start=0, stop=1))
        word = signal_word(gen.program, op.signal)
        reduce_at = _polled_by_reduce(gen).get(gen.index)
        if reduce_at is not None:
            loc = gen.program.ops[reduce_at].loc
            return [f"  // packets: polled by the reduce at {loc.file}:{loc.line}, packet by packet: it reads each "
                    "packet once it shows the flag",
                    f"  // {op.value}, and it is the last op of its kernel, so nothing else of this kernel follows "
                    "the wait (the next",
                    "  // kernel starts after every block of this one, the reduce's polls included, has finished)",
                    "  // the word then holds what the signal would have set (nobody else reads it: packets.py)",
                    f"  if (blockIdx.x == 0 && threadIdx.x == 0) cw_sig[{word}] = {_value(gen, op)};"]
        return ["  // packets: every block polls every packet of the area until each shows the flag "
                f"{op.value} (rank {channel.sender}'s",
                "  // put_signal landed whole): its later work follows the last packet, as it would the signal",
                f"  cw_nv_pk_wait({area}, {channel.nbytes}, {_flag(gen, op)});",
                "  // the word then holds what the signal would have set (nobody else reads it: packets.py)",
                f"  if (blockIdx.x == 0 && threadIdx.x == 0) cw_sig[{word}] = {_value(gen, op)};"]
    if isinstance(op, ir.WaitUntil):
        return [why, f"  cw_nv_wait({_signal(gen, op.signal, gen.rank)}, {CMP[op.cmp]}, {_value(gen, op)});"]
    lo, n, status = _span(gen, op.signals)
    name = f"CW_NV_STATUS_{gen.rank}_{gen.index}"
    _kernel(gen).statics.append(f"static __device__ const int {name}[] = {{{', '.join(map(str, status))}}};  "
                                f"// op {gen.index} of rank {gen.rank}: 1 = not waited on")
    call = "wait_until_all" if isinstance(op, ir.WaitUntilAll) else "wait_until_any"
    if isinstance(op, ir.WaitUntilAny):
        why += ("\n  // (any: a block may see another of the words first; each block's later work follows the write it"
                " saw)")
    return [*why.split("\n"),
            f"  if (threadIdx.x == 0) nvshmem_uint64_{call}(cw_sig + {lo}, {n}, {name}, {CMP[op.cmp]}, "
            f"{_value(gen, op)});",
            "  __syncthreads();"]


def copy(gen: Gen, op: ir.Copy) -> list[str]:
    if op.src == op.dst:
        return ["  // the same elements: nothing to copy"]
    lowered = _packets(gen)
    if lowered is not None and (gen.rank, gen.index) in lowered.unpacks:
        return _guarded(gen, ["  // packets: the payload out of the packets the wait saw",
                              f"  cw_nv_pk_unpack({gen.ptr(op.dst)}, {gen.ptr(op.src)}, {gen.nbytes(op.dst)}, "
                              f"{_share(_kernel(gen).step)});"])
    body: list[str] = []
    src = _source(gen, op, op.src, body)
    body.append(f"  cw_nv_copy({gen.ptr(op.dst)}, {src}, {gen.nbytes(op.dst)}, {_share(_kernel(gen).step)});")
    return _guarded(gen, body)


def _polled_by_reduce(gen: Gen) -> dict[int, int]:
    """This rank's packet waits whose polling the reduce after them does (wait index -> reduce index):
    the reduce reads every area those waits poll (`packets.Lowered.reads`), nothing but those waits
    comes between the first of them and the reduce, none of them waits for anything across blocks
    (its step has no `pre`), and the reduce is the last op of its kernel. Then each block's reduce
    share polls its own packets and the other blocks, having nothing after the wait in this kernel,
    need not poll at all: the next kernel starts once every block of this one has finished."""
    cache = _state(gen).setdefault("polled_by_reduce", {})
    if gen.rank in cache:
        return cache[gen.rank]
    found: dict[int, int] = {}
    lowered = _packets(gen)
    steps = _kernel(gen).plan.steps
    n_ops = len(gen.program.ops)
    for (rank, r), reads in (lowered.reads.items() if lowered is not None else ()):
        if rank != gen.rank:
            continue
        waits = {w for _position, w in reads}
        last = r + 1 == n_ops or steps[r + 1].kernel_start or steps[r + 1].who.kind == "host"
        if last and all(i in waits for i in range(min(waits), r)) and not any(steps[w].pre for w in waits):
            found.update({w: r for w in waits})
    cache[gen.rank] = found
    return found


def _packet_reduce(gen: Gen, op: ir.LocalReduce, reads) -> list[str]:
    """A reduce that reads packet areas in place of the unpacking copies' destinations (`cw_nv_pk_reduce`)."""
    ctype = gen.ctype(op.dst)
    polled = dict(reads)
    mask = sum(1 << position for position in polled)
    flags = [_flag(gen, gen.program.ops[polled[j]], polled[j]) if j in polled else "0u" for j in range(len(op.srcs))]
    areas = ", ".join(sorted({op.srcs[j].buffer for j in polled}))
    return _guarded(gen, [
        f"  // packets: {areas} read in place of the unpacked copies (packets.py), each packet polled for its flag",
        f"  {{ const void* cw_srcs[] = {{{', '.join(gen.ptr(src) for src in op.srcs)}}};",
        f"    const uint32_t cw_flags[] = {{{', '.join(flags)}}};",
        f"    cw_nv_pk_reduce<{ctype}, {len(op.srcs)}>({gen.ptr(op.dst)}, cw_srcs, {mask:#x}u, cw_flags, "
        f"{op.dst.count}, {cuda.REDUCE_CODE[op.op]}, {_share(_kernel(gen).step)}); }}"])


def _fused_puts(gen: Gen) -> list:
    """The puts and put_signals right after this reduce that run inside it (`nvshmem_plan.fusable_put`,
    `Step.fused`): one per peer, in program order."""
    steps = _kernel(gen).plan.steps
    found, nxt = [], gen.index + 1
    while nxt < len(steps) and steps[nxt].fused:
        found.append(gen.program.ops[nxt])
        nxt += 1
    return found


def reduce(gen: Gen, op: ir.LocalReduce) -> list[str]:
    lowered = _packets(gen)
    reads = lowered.reads.get((gen.rank, gen.index)) if lowered is not None else None
    if reads:
        return _packet_reduce(gen, op, reads)
    ctype = gen.ctype(op.dst)
    body: list[str] = []
    sources = [_source(gen, op, src, body) for src in op.srcs]
    puts = _fused_puts(gen)
    if puts:
        where = ", ".join(f"{p.loc.file}:{p.loc.line} (to PE {p.pe})" for p in puts)
        body += [f"  // with the put(s) at {where} (nvshmem_plan.fusable_put): each thread stores its sums here and",
                 f"  // into each peer's copy, the values those puts would read back from {op.dst.buffer}",
                 f"  {{ const {ctype}* cw_srcs[] = {{{', '.join(sources)}}};",
                 f"    {ctype}* cw_peer_dst[] = {{{', '.join(_remote(gen, p.dst, p.pe, p) for p in puts)}}};",
                 f"    const int cw_pes[] = {{{', '.join(str(p.pe) for p in puts)}}};",
                 f"    cw_nv_reduce_put<{ctype}, {len(puts)}>({gen.ptr(op.dst)}, cw_srcs, {len(sources)}, "
                 f"{op.dst.count}, {cuda.REDUCE_CODE[op.op]}, cw_peer_dst, cw_pes, "
                 f"{'true' if all(p.nbi for p in puts) else 'false'}, {_share(_kernel(gen).step)}); }}"]
        return _guarded(gen, body)
    body += [f"  {{ const {ctype}* cw_srcs[] = {{{', '.join(sources)}}};",
             f"    cw_nv_reduce<{ctype}>({gen.ptr(op.dst)}, cw_srcs, {len(sources)}, {op.dst.count}, "
             f"{cuda.REDUCE_CODE[op.op]}, {_share(_kernel(gen).step)}); }}"]
    return _guarded(gen, body)


def fill(gen: Gen, op: ir.Fill) -> list[str]:
    value = bits(op.value, gen.dtype(op.dst)).replace("cw_bits<", "cw_nv_bits<", 1)
    return _guarded(gen, [f"  cw_nv_fill<{gen.ctype(op.dst)}>({gen.ptr(op.dst)}, {op.dst.count}, {value}, "
                          f"{_share(_kernel(gen).step)});"])


def compute(gen: Gen, op: ir.Compute) -> list[str]:
    """numeric.opaque_output: every block hashes its share of every read; the sum (a grid-wide sync
    when spread) then gives every output."""
    from ..semantics import numeric

    step = _kernel(gen).step
    seed = cuda.u64(numeric.opaque_seed(op.name, gen.rank, gen.index))
    move = rule(op).flows(op, gen.rank)[0]
    body = ["  {", "    unsigned long long cw_mine = 0;"]
    position = 0
    for _r, src in move.srcs:
        body.append(f"    cw_mine += cw_nv_hash_part<{gen.ctype(src)}>({gen.ptr(src)}, {src.count}, {seed}, "
                    f"{position}, {_share(step)});")
        position += src.count
    if step.who.kind == "all":
        body.append(f"    uint64_t cw_h = {seed} + cw_nv_grid_sum(grid, cw_hash + {step.hash_slot} * gridDim.x, "
                    "cw_mine);  // a grid-wide sync: every read is hashed before any output is written")
    else:
        body.append(f"    uint64_t cw_h = {seed} + cw_nv_block_sum(cw_mine);  // every read is hashed first")
    offset = 0
    for _r, dst in move.dsts:
        body.append(f"    cw_nv_opaque<{gen.ctype(dst)}>({gen.ptr(dst)}, {dst.count}, cw_h, {offset}, {_share(step)});")
        offset += dst.count
    body.append("  }")
    return _guarded(gen, body)


def signal_store(gen: Gen, op: ir.SignalStore) -> list[str]:
    """`*sig = value` into the rank's own word by one thread: a plain store, as the schedule says."""
    word = signal_word(gen.program, op.signal)
    return _guarded(gen, [
        "  // signal_store: a plain store into this rank's own word (*sig = value), not an atomic. volatile, so",
        "  // it is one 64-bit store made here, not merged with another or moved. Nothing orders it but what",
        "  // the schedule orders (the handoff above, where the plan needs one); the checker reports a race",
        "  // where another access of the word can happen in either order with it",
        f"  if (threadIdx.x == 0) *(volatile uint64_t*)(cw_sig + {word}) = {_value(gen, op)};"])


def _none(gen: Gen, op) -> list[str]:
    return []  # fence, quiet, barrier_all, sync_all and the team ops: written by `NvshmemTarget._ordering`


# The team collectives' NVSHMEM type names (NVSHMEMI_REPT_FOR_STANDARD_RMA_TYPES and the reduce types)
NV_COLL_TYPE = {"float16": "half", "bfloat16": "bfloat16", "float32": "float", "float64": "double",
                "int32": "int32", "int64": "int64", "uint32": "uint32", "uint64": "uint64"}
NV_COLL_CALL = {ir.AllReduce: "reduce", ir.AllGather: "fcollect", ir.AllToAll: "alltoall",
                ir.Broadcast: "broadcast"}


def _overlap(op) -> str | None:
    src, dst = op.src, op.dst
    if src.buffer != dst.buffer or src.stop <= dst.start or dst.stop <= src.start:
        return None
    if src == dst and isinstance(op, (ir.AllReduce, ir.Broadcast)):
        return None
    return (f"its source {src} overlaps its destination {dst}: NVSHMEM's {NV_COLL_CALL[type(op)]} takes a "
            "destination apart from its source" + (" or the same elements" if isinstance(op, (ir.AllReduce,
                                                                                             ir.Broadcast)) else "")
            + " (use buffers of their own)")


TABLE = {
    ir.Put: put, ir.PutSignal: put_signal, ir.SignalUpdate: signal_op, ir.Atomic: atomic,
    ir.FetchAtomic: fetch_atomic, ir.Get: get, ir.GetNbi: get, ir.WaitUntil: wait, ir.WaitUntilAll: wait,
    ir.WaitUntilAny: wait, ir.Fence: _none, ir.Quiet: _none, ir.BarrierAll: _none, ir.SyncAll: _none,
    ir.LocalReduce: reduce, ir.Copy: copy, ir.Fill: fill, ir.Compute: compute,
    ir.SignalStore: signal_store, ir.TeamSplit: _none, ir.TeamBarrier: _none,
    # on an NVSHMEM team only (`NvshmemTarget.refuses`): the team collectives and team_sync
    ir.AllReduce: _none, ir.AllGather: _none, ir.AllToAll: _none, ir.Broadcast: _none, ir.Barrier: _none,
}
UNSUPPORTED = {cls: TWO_SIDED for cls in (ir.Send, ir.Recv, ir.Group, ir.ReduceScatter, ir.ReduceTo)}
THREAD_SYNC = ("events and thread barriers order the threads of a rank, which this backend does not run "
               "(the mpi-cpu executor runs them, `clockworks check` explores them)")
UNSUPPORTED.update({cls: THREAD_SYNC for cls in (ir.RecordEvent, ir.WaitEvent, ir.ThreadBarrier)})
NVSHMEM = register(Backend("nvshmem-codegen", table=TABLE, unsupported=UNSUPPORTED))


# ---------------------------------------------------------------------------------- the target
def _lines(text: str) -> list[str]:
    return text.split("\n")


def _why(step: Step) -> list[str]:
    """The comment above a handoff: how the order is kept, and which earlier ops it keeps it after."""
    fence = " and its nvshmem_fence" if step.fence else ""
    how = {"grid": f"a grid-wide sync, every block after its own work{fence}",
           "block": f"{step.who} runs it after its own earlier work (__syncthreads{fence})",
           "last": f"the last block to arrive runs it, every block arriving after its own work{fence}"}[step.pre]
    lines = [f"  // {cuda.comment(how)}:"]
    shown = 3
    for need in step.needs[:shown]:
        words = cuda.comment(need.why).split(" ")
        line = "  //   -"
        for word in words:
            if len(line) + 1 + len(word) > 116:
                lines.append(line)
                line = "  //    "
            line += " " + word
        lines.append(line)
    if len(step.needs) > shown:
        rest = ", ".join(str(n.item.index) for n in step.needs[shown:])
        lines.append(f"  //   - and the same for op(s) {rest}")
    return lines


class NvshmemTarget(Target):
    """Device-initiated NVSHMEM: one cooperative kernel per rank (the module docstring)."""

    name = "nvshmem"
    table = NVSHMEM
    includes = ("nvshmem.h", "nvshmemx.h", "cooperative_groups.h")
    mark_words = 1  # setup() makes it 1 + the blocks of the rank's kernel

    def prelude(self, gen: Gen) -> list[str]:
        lines = _lines(PRELUDE.read_text().rstrip())
        teams = _teams(gen.sched)
        if teams:
            lines += ["", "// NVSHMEM teams, made at setup (nvshmem_team_split_strided, in each rank's program order)",
                      "// and destroyed at the end; NVSHMEM_TEAM_INVALID on a rank outside the team"]
            lines += [f"static nvshmem_team_t {_team_handle(comm.name)} = NVSHMEM_TEAM_INVALID;  // team "
                      f"{cuda.comment(comm.name)}" for comm in teams]
        return lines

    def refuses(self, sched: ir.Schedule, op) -> str | None:
        """A collective or barrier runs here on an NVSHMEM team only (r.team_reduce and the others, r.team_sync);
        on the world or an NCCL communicator it is NCCL's. NVSHMEM's collectives take a source that is the
        destination (reduce, broadcast) or apart from it."""
        if isinstance(op, ir.TeamSplit):
            if any(sum(isinstance(o, ir.TeamSplit) and o.team == op.team for o in prog.ops) > 1
                   for prog in sched.programs):
                return (f"team {op.team} is split more than once on a rank (the calls of --calls repeat the split), "
                        "and the generated program makes each team once, at setup: generate it without --calls")
            return None
        if not isinstance(op, (*TEAM_COLLECTIVES, ir.Barrier)):
            return None
        if team_of(sched, op.comm) is None:
            return TWO_SIDED
        return _overlap(op) if isinstance(op, TEAM_COLLECTIVES) else None

    def init(self, gen: Gen) -> list[str]:
        sched = gen.sched
        pool = _pool_bytes(sched)
        lines = ["  {  // NVSHMEM over MPI: rank 0's unique id reaches every rank through MPI_Bcast"]
        heap = _heap_bytes(sched, pool)
        if heap > 1 << 30:
            lines.append(f'    if (!getenv("NVSHMEM_SYMMETRIC_SIZE")) setenv("NVSHMEM_SYMMETRIC_SIZE", "{heap}", 0);'
                         "  // every symmetric buffer, the pool and the signal words")
        lines += [
            "    nvshmemx_uniqueid_t id = NVSHMEMX_UNIQUEID_INITIALIZER;",
            "    if (cw_rank == 0) CW_NV(nvshmemx_get_uniqueid(&id));",
            "    CW_MPI(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD));",
            "    nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;",
            "    CW_NV(nvshmemx_set_attr_uniqueid_args(cw_rank, cw_world, &id, &attr));",
            "    CW_NV(nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID, &attr));",
            "    if (nvshmem_my_pe() != cw_rank || nvshmem_n_pes() != cw_world)",
            '      cw_abandon("error", "NVSHMEM numbered the PEs unlike MPI", 2);',
            f"    cw_nv_pool_bytes = {pool};  // the per-rank buffers of the rank that has the most",
            "    cw_nv_pool = (char*)cw_nv_malloc(cw_nv_pool_bytes);",
            "  }",
        ]
        return lines

    def alloc(self, gen: Gen, bytes_expr: str, symmetric: bool) -> str:
        return f"cw_nv_malloc({bytes_expr})" if symmetric else f"cw_nv_local({bytes_expr})"

    def setup(self, gen: Gen) -> list[str]:
        plans = _state(gen)["plans"]
        ranks = range(gen.sched.world)
        if all(plans[k].kernels == 1 for k in ranks):
            table = [f"    static const void* kernels[] = {{"
                     f"{', '.join(f'(const void*)cw_nv_rank{k}' for k in ranks)}}};"]
            query = ["    CW_NV(nvshmemx_collective_launch_query_gridsize(kernels[cw_rank], dim3(CW_NV_THREADS), "
                     "none, 0, &resident));"]
        else:  # a kernel per call: the grid is one that every kernel of the rank keeps resident
            names = [name for k in ranks for name in kernel_names(k, plans[k].kernels)]
            firsts = [sum(plans[j].kernels for j in range(k)) for k in ranks]
            table = [f"    static const void* kernels[] = {{{', '.join(f'(const void*){n}' for n in names)}}};",
                     f"    static const int first[] = {{{', '.join(map(str, firsts))}}};",
                     f"    static const int count[] = {{{', '.join(str(plans[k].kernels) for k in ranks)}}};"]
            query = ["    resident = 1 << 30;",
                     "    for (int k = first[cw_rank]; k < first[cw_rank] + count[cw_rank]; ++k) {",
                     "      int fits = 0;",
                     "      CW_NV(nvshmemx_collective_launch_query_gridsize(kernels[k], dim3(CW_NV_THREADS), none, 0, "
                     "&fits));",
                     "      resident = std::min(resident, fits);",
                     "    }"]
        return [
            *_team_split_lines(gen.sched),
            "  {  // NVSHMEM: this rank's kernel, its blocks, its counters and its progress words",
            *table,
            f"    static const int wants[] = {{{', '.join(str(plans[k].blocks) for k in ranks)}}};",
            f"    static const int counters[] = {{{', '.join(str(plans[k].counters) for k in ranks)}}};",
            f"    static const int hashes[] = {{{', '.join(str(plans[k].hash_slots) for k in ranks)}}};",
            "    int device = 0, sms = 0, resident = 0;",
            "    void* none[] = {nullptr};",
            "    CW_CUDA(cudaGetDevice(&device));",
            "    CW_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));",
            *query,
            "    if (resident < 1) cw_abandon(\"error\", \"not one block of this rank's kernel fits on the GPU\", 2);",
            "    cw_nv_grid = std::max(1, std::min(wants[cw_rank], std::min(sms, resident)));",
            "    cw_nv_arrive = (unsigned*)cw_malloc(std::max(counters[cw_rank], 1) * sizeof(unsigned));",
            "    CW_CUDA(cudaMemset(cw_nv_arrive, 0, std::max(counters[cw_rank], 1) * sizeof(unsigned)));",
            "    cw_nv_hash = (unsigned long long*)cw_malloc(std::max(hashes[cw_rank] * cw_nv_grid, 1) * "
            "sizeof(unsigned long long));",
            "    // a progress word per block besides word 0: a hang names each block's op",
            "    CW_CUDA(cudaFreeHost((void*)cw_marks));",
            "    cw_mark_words = 1 + cw_nv_grid;",
            "    CW_CUDA(cudaHostAlloc((void**)&cw_marks, cw_mark_words * sizeof(uint32_t), cudaHostAllocMapped));",
            "    memset((void*)cw_marks, 0, cw_mark_words * sizeof(uint32_t));",
            "    CW_CUDA(cudaHostGetDevicePointer((void**)&cw_marks_dev, (void*)cw_marks, 0));",
            "    if (!cw_host_progress) {  // the words in GPU memory, copied out while the host waits (nvshmem.cuh)",
            "      CW_CUDA(cudaMalloc((void**)&cw_nv_marks_gpu, cw_mark_words * sizeof(uint32_t)));",
            "      CW_CUDA(cudaMemset(cw_nv_marks_gpu, 0, cw_mark_words * sizeof(uint32_t)));",
            "      CW_CUDA(cudaStreamCreateWithFlags(&cw_nv_copier, cudaStreamNonBlocking));",
            "      CW_CUDA(cudaEventCreateWithFlags(&cw_nv_copied, cudaEventDisableTiming));",
            "      cw_marks_dev = cw_nv_marks_gpu;  // the host's stream writes of word 0 go there too",
            "      cw_refresh_marks = cw_nv_refresh_marks;",
            "    }",
            "  }",
            *self._packet_peers(gen),
            *self._copy_engine_peers(gen),
            *self._ended(gen),
        ]

    def reset(self, gen: Gen) -> list[str]:
        lowered = _packets(gen)
        if lowered is None:
            return []
        lines = []
        for program in gen.sched.programs:
            for i, decl in enumerate(program.buffers):
                if any(c.area == decl.name for c in lowered.channels):
                    lines.append(f"  if (cw_rank == {program.rank}) CW_CUDA(cudaMemsetAsync(bufs[{i}].ptr, 0, "
                                 f"{decl.count * ir.DTYPE_BYTES[decl.dtype]}, s));  // packet area {decl.name}: "
                                 "flag 0, which no put_signal sends")
        return lines

    def _packet_peers(self, gen: Gen) -> list[str]:
        """Setup: every packet sender reaches its receiver's area by stores (nvshmem_ptr), or stops here."""
        lowered = _packets(gen)
        if lowered is None:
            return []
        lines = []
        for channel in lowered.channels:
            program = gen.sched.programs[channel.sender]
            i = next(k for k, d in enumerate(program.buffers) if d.name == channel.area)
            lines += [f"  if (cw_rank == {channel.sender} && !nvshmem_ptr(bufs[{i}].ptr, {channel.receiver}))",
                      f"    cw_abandon(\"error\", \"rank {channel.sender} sends packets to rank {channel.receiver}, "
                      "which it cannot reach by loads and stores (nvshmem_ptr is null: not over NVLink); generate "
                      "without --packets\", 2);"]
        return lines

    def _copy_engine_peers(self, gen: Gen) -> list[str]:
        """Setup: every PE a put on the copy engine goes to is reached over NVLink (`nvshmem_ptr` of its
        destination is not null), where NVSHMEM's on-stream put is a copy on this stream and the kernel
        before it, once finished, has performed every store it ordered; or the run stops here."""
        lines = []
        for rank, plan in sorted(_state(gen).get("plans", {}).items()):
            program = gen.sched.programs[rank]
            seen = set()
            for step in plan.steps:
                if step.who.kind != "host":
                    continue
                op = program.ops[step.index]
                i = next(k for k, d in enumerate(program.buffers) if d.name == op.dst.buffer)
                if (i, op.pe) in seen:
                    continue
                seen.add((i, op.pe))
                lines += [f"  if (cw_rank == {rank} && !nvshmem_ptr(bufs[{i}].ptr, {op.pe}))",
                          f"    cw_abandon(\"error\", \"rank {rank} puts to PE {op.pe} "
                          "on the copy engine, which it cannot reach over NVLink (nvshmem_ptr is null); "
                          "generate without --copy-engine\", 2);"]
        return lines

    def read_at_end(self, gen: Gen, on: bool) -> list[str]:
        return [f"  {{ int on = {int(on)}; CW_CUDA(cudaMemcpyToSymbolAsync(cw_nv_read_at_end, &on, sizeof on, 0, "
                "cudaMemcpyHostToDevice, s)); }"]

    def _ended(self, gen: Gen) -> list[str]:
        """Setup: the copy of each rank's outputs that its last kernel takes when the run reads them as
        the caller does (`ended_layout`), and each output buffer's place in it (`CwBuf.ended`)."""
        layouts = [ended_layout(p) for p in gen.sched.programs]
        if not any(layouts):
            return []
        sizes = [layout[-1][2] + layout[-1][3] if layout else 0 for layout in layouts]
        lines = ["  {  // the outputs as each rank's program left them, copied on the run that reads them so",
                 f"    static const size_t ended_bytes[] = {{{', '.join(map(str, sizes))}}};",
                 "    char* ended = (char*)cw_malloc(ended_bytes[cw_rank]);",
                 "    CW_CUDA(cudaMemcpyToSymbol(cw_nv_ended, &ended, sizeof ended));"]
        for rank, layout in enumerate(layouts):
            if layout:
                places = " ".join(f"bufs[{i}].ended = ended + {offset};" for i, _decl, offset, _n in layout)
                lines.append(f"    if (cw_rank == {rank}) {{ {places} }}")
        return lines + ["  }"]

    def align(self, gen: Gen) -> list[str]:
        return ["  nvshmemx_barrier_all_on_stream(s);  // every rank's inputs and zeroed signal words are in place"]

    def finalize(self, gen: Gen) -> list[str]:
        teams = _teams(gen.sched)
        destroy = []
        if teams:  # after every PE has met, in one order on every rank (the schedule's, reversed)
            destroy = ["  nvshmem_barrier_all();  // every PE is done with every team before any is destroyed",
                       *[f"  if ({_team_handle(comm.name)} != NVSHMEM_TEAM_INVALID) "
                         f"nvshmem_team_destroy({_team_handle(comm.name)});" for comm in reversed(teams)]]
        return ["  CW_CUDA(cudaStreamSynchronize(s));",
                *destroy,
                "  nvshmem_finalize();  // collective over the PEs; MPI_Finalize comes after"]

    # -- one rank ---------------------------------------------------------------------------------
    def rank_function(self, gen: Gen, rank: int) -> list[str]:
        sched = gen.sched
        program = sched.programs[rank]
        state = _state(gen)
        if state.get("library") and any(team_op(sched, op) for op in program.ops):
            op = next(op for op in program.ops if team_op(sched, op))
            raise Unsupported(f"{op.loc}: the nvshmem-codegen backend cannot run {op.kind} in a library's kernels: "
                              "a library's host code does not make teams or pass their handles yet (generate the "
                              "schedule as a program: clockworks codegen / build / validate)")
        plan = gen.lowered.plan(rank)  # the lowering's block plan (`lowering.nvshmem_plan`)
        state.setdefault("plans", {})[rank] = plan
        kernel = state["kernel"] = _Kernel(plan, plan.steps[0] if plan.steps else Step(0, Who("all")))
        scratch_before = len(gen.scratch)
        spans = kernel_spans(plan.steps)
        bodies: list[list[str]] = []  # one per kernel: the calls of --calls, each its own launch
        # per kernel: whether it is launched cooperatively (`nvshmem_plan.syncs_grid`: it syncs its grid or
        # calls an NVSHMEM collective); the others are launched plainly, whatever their grid
        cooperative: list[bool] = []
        # the rank's run in stream order: ("kernel", k, its first op or None) and ("host", the copy
        # engine's put's lines, its op); the launch code here and a library's are written from it
        sequence: list[tuple[str, object, int | None]] = []
        for k, (kind, steps) in enumerate(spans):
            if kind == "host":
                step = steps[0]
                gen.index, kernel.step = step.index, step
                sequence.append(("host", copy_engine_put(gen, program.ops[step.index]), step.index))
                continue
            sequence.append(("kernel", len(bodies), steps[0].index if steps else None))
            body: list[str] = []
            for step in steps:
                op = program.ops[step.index]
                gen.index = step.index
                kernel.step = step
                body += ["", op_comment(op), f"  cw_nv_mark(a.marks, {step.index});"]
                ordering = self._ordering(gen, op, step)
                if ordering is not None:
                    body += ordering
                    continue
                if step.pre == "grid":
                    body += [*_why(step), f"  cw_nv_grid_sync(grid, {'true' if step.fence else 'false'});"]
                elif step.pre:
                    body += _why(step)
                body += self.table.lookup(op)(gen, op)
            if k + 1 < len(spans):  # the next kernel, or the copy engine's put, starts after this one ends
                body += _call_end(spans[k + 1][1][0], spans[k + 1][0] == "host")
            bodies.append(body)
            cooperative.append(syncs_grid(sched, rank, steps))
        scratch = [item.name for item in gen.scratch[scratch_before:]]
        # the last kernel ends the run (`_end`): every block's quiet, a grid-wide sync and every PE meeting
        # (nvshmem_barrier_all), in a library's K-th call too (its reset relies on it): cooperative
        cooperative[-1] = True
        state.setdefault("cooperative", {})[rank] = cooperative
        state.setdefault("sequence", {})[rank] = sequence
        return self._kernel_text(gen, rank, plan, kernel, bodies, scratch)

    def _ordering(self, gen: Gen, op, step: Step) -> list[str] | None:
        """fence, quiet, barrier_all, sync_all (None for the other ops)."""
        program = gen.program
        if isinstance(op, ir.Fence):
            pes = ", ".join(map(str, step.fence_pes))
            if step.idle:
                return ["  // fence: no delivery since the last fence or quiet, so nothing to order here"]
            if not step.used_by:
                return [f"  // fence: orders the deliveries to PE {pes} above before later ones to it; none follows",
                        "  // before the next quiet or the end, so there is nothing to do here"]
            uses = ", ".join(f"op {m} ({cuda.comment(program.ops[m].loc)})" for m in step.used_by[:4])
            return [f"  // fence: the deliveries to PE {pes} above land before later ones to it. Each block's",
                    "  // part is ordered where the next of those is issued (its blocks fence, then hand over):",
                    f"  // {uses}"]
        if isinstance(op, ir.Quiet):
            if step.idle:
                return ["  // quiet: no delivery in flight (none since the last quiet or barrier_all): nothing to do"]
            return ["  // quiet: every block completes its own deliveries (nvshmem_quiet by its thread 0), then a",
                    "  // grid-wide sync: everything after it, on any block, follows every delivery above",
                    "  cw_nv_quiet_all(grid);"]
        if isinstance(op, ir.BarrierAll):
            return ["  // barrier_all: every block completes its deliveries (quiet), a grid-wide sync, one thread's",
                    "  // nvshmem_barrier_all (every PE meets), then a grid-wide sync: no block goes on before",
                    "  // every PE has arrived",
                    "  cw_nv_quiet_all(grid);",
                    "  if (blockIdx.x == 0 && threadIdx.x == 0) nvshmem_barrier_all();",
                    "  grid.sync();"]
        if isinstance(op, ir.SyncAll):
            first = (["  // each block fences first, so what it did is visible to the PEs that go on after the sync;"]
                     if step.fence else [])
            return ["  // sync_all: every PE meets, and deliveries stay in flight. A grid-wide sync (every block's",
                    "  // work before it is done), one thread's nvshmem_sync_all, then a grid-wide sync: no block",
                    "  // goes on before every PE has arrived",
                    *first,
                    f"  cw_nv_grid_sync(grid, {'true' if step.fence else 'false'});",
                    "  if (blockIdx.x == 0 && threadIdx.x == 0) nvshmem_sync_all();",
                    "  grid.sync();"]
        if team_op(gen.sched, op):
            return self._team(gen, op, step)
        return None

    def _team(self, gen: Gen, op, step: Step) -> list[str]:
        """A team op (`nvshmem_plan.team_step`): a grid-wide sync, block 0 calls NVSHMEM, a grid-wide sync."""
        fence = "true" if step.fence else "false"
        first = (["  // each block fences first, so what it did is visible to the PEs that go on after it;"]
                 if step.fence else [])
        if isinstance(op, ir.TeamBarrier):
            team = cuda.ident("comm", op.comm)
            return ["  // team_barrier: every block completes its deliveries (quiet), a grid-wide sync, one thread's",
                    f"  // nvshmem_barrier({team}) (the team's members meet), then a grid-wide sync: no block goes on",
                    "  // before every member has arrived",
                    "  cw_nv_quiet_all(grid);",
                    f"  if (blockIdx.x == 0 && threadIdx.x == 0) nvshmem_barrier({team});",
                    "  grid.sync();"]
        if isinstance(op, (ir.TeamSplit, ir.Barrier)):
            if isinstance(op, ir.TeamSplit):
                parent = "NVSHMEM_TEAM_WORLD" if op.comm == "world" else cuda.ident("comm", op.comm)
                call = "nvshmem_sync_all()" if op.comm == "world" else f"nvshmem_team_sync({parent})"
                head = [f"  // team_split_strided: team {cuda.comment(op.team)} was made on the host at setup,",
                        f"  // nvshmem_team_split_strided({parent}, {op.start}, {op.stride}, {op.size}, ...);",
                        "  // here the parent's members meet as the split makes them (a collective over the parent,",
                        "  // completing no delivery), so what the schedule orders by it stays ordered. A grid-wide",
                        f"  // sync, one thread's {call}, then a grid-wide sync"]
            else:
                call = f"nvshmem_team_sync({cuda.ident('comm', op.comm)})"
                head = ["  // team_sync: the team's members meet, and deliveries stay in flight. A grid-wide sync",
                        f"  // (every block's work before it is done), one thread's {call}, then a grid-wide",
                        "  // sync: no block goes on before every member has arrived"]
            return [*head, *first, f"  cw_nv_grid_sync(grid, {fence});",
                    f"  if (blockIdx.x == 0 && threadIdx.x == 0) {call};", "  grid.sync();"]
        team = cuda.ident("comm", op.comm)
        kind = NV_COLL_TYPE[gen.dtype(op.dst)]
        members = gen.sched.members(op.comm, gen.rank)
        if isinstance(op, ir.AllReduce):
            call = f"nvshmemx_{kind}_{op.op}_reduce_block({team}, {gen.ptr(op.dst)}, {gen.ptr(op.src)}, {op.dst.count})"
        elif isinstance(op, ir.AllGather):
            call = f"nvshmemx_{kind}_fcollect_block({team}, {gen.ptr(op.dst)}, {gen.ptr(op.src)}, {op.src.count})"
        elif isinstance(op, ir.AllToAll):
            call = (f"nvshmemx_{kind}_alltoall_block({team}, {gen.ptr(op.dst)}, {gen.ptr(op.src)}, "
                    f"{op.src.count // len(members)})")
        else:
            root = members.index(op.root)
            call = (f"nvshmemx_{kind}_broadcast_block({team}, {gen.ptr(op.dst)}, {gen.ptr(op.src)}, {op.dst.count}, "
                    f"{root})  /* root: member {root} of the team, rank {op.root} */")
        return [f"  // a team collective on team {cuda.comment(op.comm)}: every block fences its work (NVSHMEM's "
                "collective may read this",
                "  // rank's source and write its destination from the other members, by NVLink loads and stores),",
                "  // a grid-wide sync, then block 0's threads call it, then a grid-wide sync: every block's later",
                "  // work follows it. First the members meet (nvshmemx_team_sync_block): NVSHMEM asks that every",
                "  // member's destination be ready before any member calls the collective (a member may write a",
                "  // peer's destination before that peer has arrived), while the schedule's collective writes it",
                "  // only once every member has arrived; the sync keeps the schedule's order",
                "  cw_nv_grid_sync(grid, true);",
                "  if (blockIdx.x == 0) {",
                f"    nvshmemx_team_sync_block({team});",
                f"    {call};",
                "  }",
                "  grid.sync();"]

    def _kernel_text(self, gen: Gen, rank: int, plan: RankPlan, kernel: _Kernel, bodies: list[list[str]],
                     scratch: list[str]) -> list[str]:
        program = gen.sched.programs[rank]
        fields, locals_, fill = [], [], []
        for i, decl in enumerate(program.buffers):
            ctype = cuda.C_TYPE[decl.dtype]
            name = cuda.ident("buffer", decl.name)
            where = ", symmetric" if decl.symmetric else ""
            fields.append(f"  {ctype}* {name};  // {decl.count} x {decl.dtype}{where}")
            locals_.append(f"  [[maybe_unused]] {ctype}* {name} = a.{name};")
            fill.append(f"  a.{name} = ({ctype}*)CW_BUFS_{rank}[{i}].ptr;")
        for team in _kernel_teams(gen.sched, program):  # the team handles its team ops take
            name = cuda.ident("comm", team)
            fields.append(f"  nvshmem_team_t {name};  // team {cuda.comment(team)}")
            locals_.append(f"  [[maybe_unused]] nvshmem_team_t {name} = a.{name};")
            fill.append(f"  a.{name} = {_team_handle(team)};")
        for name in scratch:
            fields.append(f"  char* {name};")
            locals_.append(f"  [[maybe_unused]] char* {name} = a.{name};")
            fill.append(f"  a.{name} = {name};")
        n = len(program.ops)
        names = kernel_names(rank, len(bodies))
        # A library (`codegen.library`) launches one call's kernel at a time from its own host code:
        # it takes the struct's fields (buffers in declaration order, then the scratch) from here.
        _state(gen).setdefault("fields", {})[rank] = ([decl.name for decl in program.buffers], list(scratch))
        hosts = puts_before(_state(gen)["sequence"][rank])
        kernels = []
        endless = _state(gen).get("endless")
        if endless is not None:  # a library's one kernel for every call (codegen/library): calls without end
            period, first = endless
            names = [f"cw_nv_rank{rank}_every_call"]
            cases = []
            for j in range(period):
                said = f"  // calls {j}, {j + period}, ... (the copies of call parity {j})" if period > 1 else ""
                cases += [f"  {'if' if j == 0 else '} else if'} (cw_call % {period} == {j}) {{{said}",
                          *["  " + line if line else line for line in bodies[first + j]]]
            kernels = [
                f"// every call: the kernel of call {first} (to {first + period - 1}) of the checked calls, its",
                "// signal values moved on by the epochs between that call and this one (lowering/repeat.py's",
                "// epochs; check/unbounded.py proves the calls safe however many run)",
                f"__global__ void __launch_bounds__(CW_NV_THREADS) {names[0]}(CwNvArgs{rank} a) {{",
                *PDL_WAIT,
                *locals_,
                "  [[maybe_unused]] uint64_t* cw_sig = a.sig;",
                "  [[maybe_unused]] unsigned* cw_arrive = a.arrive;",
                "  [[maybe_unused]] unsigned long long* cw_hash = a.hash;",
                "  [[maybe_unused]] cg::grid_group grid = cg::this_grid();",
                "  const unsigned long long cw_call = cw_nv_call_number(a.calls, a.calls_arrive);",
                f"  // this call's epoch less the epoch of call {first}'s copy (modulo 2**64: the first calls' is -1)",
                f"  [[maybe_unused]] const unsigned long long cw_epoch = cw_call / {period} - {first // period}ULL;",
                *cases,
                "  }",
                "}",
                "",
            ]
        for k, (name, body) in enumerate(zip(names, bodies) if endless is None else []):
            last = k == len(bodies) - 1
            if hosts:
                head = [f"// kernel {k + 1} of {len(bodies)}, launched after what comes before it on the stream"
                        + (" (a put on the copy engine)" if k in hosts else "")] if len(bodies) > 1 else []
            else:
                head = ([f"// call {k + 1} of {len(bodies)}: a kernel of its own, launched after the one before on the "
                         "stream"] if len(bodies) > 1 else [])
            kernels += [
                *head,
                f"__global__ void __launch_bounds__(CW_NV_THREADS) {name}(CwNvArgs{rank} a) {{",
                *PDL_WAIT,
                *locals_,
                "  [[maybe_unused]] uint64_t* cw_sig = a.sig;",
                "  [[maybe_unused]] unsigned* cw_arrive = a.arrive;",
                "  [[maybe_unused]] unsigned long long* cw_hash = a.hash;",
                "  [[maybe_unused]] cg::grid_group grid = cg::this_grid();",
                *body,
                *(["", *_read_at_end(program), *_end(gen.sched, n)] if last and not _state(gen).get("library")
                  else ["", *_end(gen.sched, n)] if last else []),
                "}",
                "",
            ]
        return [
            f"// ---------------------------------------------------------------------------------- rank {rank}",
            f"// {plan.blocks} block(s) wanted; {plan.counters} arrival counter(s); {plan.hash_slots} spread "
            "compute op(s)" + (f"; {len(bodies)} kernels, one per call" if len(bodies) > 1 and not hosts else "")
            + (f"; {len(bodies)} kernel(s) and {sum(step.who.kind == 'host' for step in plan.steps)} put(s) on the "
               "copy engine, in stream order" if hosts else ""),
            *kernel.statics,
            f"struct CwNvArgs{rank} {{",
            *fields,
            "  uint64_t* sig;  // the signal words (symmetric)",
            "  uint32_t* marks;  // progress words (host-mapped)",
            "  unsigned* arrive;",
            "  unsigned long long* hash;",
            *(["  unsigned long long* calls;  // this PE's calls so far (device memory)",
               "  unsigned* calls_arrive;  // the blocks that have read it"] if endless is not None else []),
            "};",
            "",
            *kernels,
            *([] if _state(gen).get("library") else
              self._host_launch(rank, fill, names, _state(gen).get("cooperative", {}).get(rank) or [True] * len(names),
                                hosts)),
        ]

    @staticmethod
    def _host_launch(rank: int, fill: list[str], names: list[str], cooperative: list[bool],
                     hosts: dict[int, list[str]] | None = None) -> list[str]:
        """`rank<k>(s)`: one run of the rank's ops, every kernel launched in order (the program's);
        `cooperative[k]`: kernel k syncs its grid or calls an NVSHMEM collective
        (`nvshmem_plan.syncs_grid`), so it needs a cooperative launch (`cw_nv_launch`); the others are
        launched plainly; `hosts[k]`: the copy engine's puts issued before kernel k."""
        hosts = hosts or {}
        launches = []
        for k, (name, coop) in enumerate(zip(names, cooperative)):
            launches += hosts.get(k, [])
            launches.append(f"  cw_nv_launch((const void*){name}, &a, s, {'true' if coop else 'false'});"
                            + ("  // cooperative: it syncs its grid or calls an NVSHMEM collective" if coop else
                               "  // plainly: no block of it waits for another"))
        return [
            f"static void rank{rank}(cudaStream_t s) {{",
            f"  CwNvArgs{rank} a;",
            *fill,
            "  a.sig = cw_signals;",
            "  a.marks = cw_marks_dev;",
            "  a.arrive = cw_nv_arrive;",
            "  a.hash = cw_nv_hash;",
            *launches,
            "}",
            "",
        ]


# The first statement of every kernel, before any memory access. With CW_NV_PDL=1 a plain launch
# (`cw_nv_launch`) carries programmatic stream serialization, so the kernel may start before the one
# before it has finished;
# this wait is what keeps their accesses in stream order. Whether a launch is plain is decided at run
# time (the grid, CW_NV_ALWAYS_COOPERATIVE), so every kernel has it, also the single kernel of a run and
# the last of --calls (always cooperative, where it returns at once).
PDL_WAIT = [
    "  // Wait for the kernel before this one on the stream: this returns once every block of that kernel has",
    "  // completed and its memory operations are visible, so every access below is ordered after all of its",
    "  // accesses exactly as under plain stream order; launched plainly, with programmatic dependent launch,",
    "  // only the launch overlaps it, and launched without it this returns at once. It then lets the next",
    "  // kernel be scheduled, which does not weaken that order (cw_nv_after_previous_kernel says why).",
    "  cw_nv_after_previous_kernel();",
]


def puts_before(sequence: list) -> dict[int, list[str]]:
    """Kernel k -> the lines of the copy engine's puts issued on the stream right before it (a rank's
    `sequence`, `NvshmemTarget.rank_function`)."""
    found: dict[int, list[str]] = {}
    pending: list[str] = []
    for kind, what, _op in sequence:
        if kind == "host":
            pending += what
        else:
            if pending:
                found[what] = pending
            pending = []
    return found


def kernel_names(rank: int, kernels: int) -> list[str]:
    """The kernels of a rank: one, or one per call of `--calls` (in launch order)."""
    return [f"cw_nv_rank{rank}"] if kernels == 1 else [f"cw_nv_rank{rank}_call{k}" for k in range(kernels)]


def _call_end(step: Step, host: bool = False) -> list[str]:
    """The end of a kernel when what follows on the stream begins after it (`nvshmem_plan.plan_rank`'s
    boundary): the next call's kernel, or (`host`) a put on the copy engine, `step`."""
    if host:
        what = f"the copy engine's put (op {step.index}) starts"
        if not step.end_fence:
            return ["", f"  // the end of this kernel: {what} after every block of this one has finished",
                    "  // (what a grid-wide sync would order); nothing here awaits a fence"]
        return ["", "  // the end of this kernel: every block fences its own work (nvshmem_fence after __syncthreads),",
                f"  // and {what} after every block of this one has finished: a fenced",
                "  // grid-wide sync, so what this kernel wrote or read is ordered before that put and its signal",
                "  __syncthreads();",
                "  if (threadIdx.x == 0) nvshmem_fence();"]
    if not step.end_fence:
        return ["", "  // the end of this call's kernel: the next call's kernel starts after every block of this one",
                "  // has finished (what a grid-wide sync would order); nothing here awaits a fence"]
    return ["", "  // the end of this call's kernel: every block fences its own work (nvshmem_fence after",
            "  // __syncthreads), and the next call's kernel starts after every block of this one has finished:",
            "  // a fenced grid-wide sync, so what this call wrote or read is ordered before the next call's signals",
            "  __syncthreads();",
            "  if (threadIdx.x == 0) nvshmem_fence();"]


def ended_layout(program: ir.Program) -> list[tuple[int, ir.BufferDecl, int, int]]:
    """The outputs the caller reads when the rank's program ends (its output and inout buffers), as
    (index among the rank's buffers, declaration, offset, bytes) in the copy the last kernel takes of
    them on the run that reads them so (`cw_nv_ended`)."""
    found, offset = [], 0
    for i, decl in enumerate(program.buffers):
        if decl.role in ("output", "inout") and decl.count > 0:
            nbytes = decl.count * ir.DTYPE_BYTES[decl.dtype]
            found.append((i, decl, offset, nbytes))
            offset += -(-nbytes // 256) * 256
    return found


def _read_at_end(program: ir.Program) -> list[str]:
    """The copy of the rank's outputs at its end, on the run that reads them as the caller does."""
    layout = ended_layout(program)
    if not layout:
        return []
    return ["  // the caller reads this rank's outputs now, when its program ends: on the run that reads them so",
            "  // (one untimed run), every block gets past its last op, "
            "then the outputs are copied as they are, before",
            "  // the closing barrier below lets every delivery land. A delivery not ordered before this rank's end",
            "  // (the checker's unfinished_output) can then be missing from the copy",
            "  if (cw_nv_read_at_end) {",
            "    cw_nv_grid_barrier(grid);",
            *[f"    cw_nv_copy_out({offset}, {cuda.ident('buffer', decl.name)}, {nbytes});"
              f"  // {cuda.comment(decl.name)}"
              for _i, decl, offset, nbytes in layout],
            "  }",
            ""]


def _end(sched: ir.Schedule, n: int) -> list[str]:
    """The end of a run: every block completes its deliveries, then every rank meets, unless every
    rank's last op is a barrier_all already (the decision is the same on every rank: it is a collective)."""
    if all(p.ops and isinstance(p.ops[-1], ir.BarrierAll) for p in sched.programs):
        return ["  // the end of a run: every rank's last op was a barrier_all, so every delivery of every rank has",
                "  // landed and every rank is past its ops",
                f"  cw_nv_mark(a.marks, {n});"]
    return ["  // the end of a run: every block completes its deliveries, then every rank meets. A run ends when every",
            "  // delivery of every rank has landed (the final state the checker's values describe), and no rank's",
            "  // next reset overwrites what a slower rank still delivers or reads.",
            f"  cw_nv_mark(a.marks, {n});",
            "  cw_nv_quiet_all(grid);",
            "  if (blockIdx.x == 0 && threadIdx.x == 0) nvshmem_barrier_all();"]


def _teams(sched: ir.Schedule) -> list[ir.Communicator]:
    """The schedule's NVSHMEM teams, in one order on every rank (the schedule's)."""
    return [comm for comm in sched.comms if comm.team is not None]


def _team_handle(name: str) -> str:
    """The host's handle of team `name` (a validated name, `cuda.ident`)."""
    return "cw_team_" + cuda.ident("comm", name)


def _kernel_teams(sched: ir.Schedule, program: ir.Program) -> list[str]:
    """The teams whose handle a rank's kernel takes: those its team ops run on (a split's parent team,
    where it is not NVSHMEM_TEAM_WORLD), in the schedule's order."""
    used = set()
    for op in program.ops:
        if isinstance(op, ir.TeamSplit):
            if op.comm != "world":
                used.add(op.comm)
        elif team_op(sched, op):
            used.add(op.comm)
    return [comm.name for comm in _teams(sched) if comm.name in used]


def _team_split_lines(sched: ir.Schedule) -> list[str]:
    """Setup: each rank's nvshmem_team_split_strided calls, in its program order (a split is collective
    over the parent team, which the checker has matched in that order), then a check that NVSHMEM made
    the team the schedule says: this rank's index in it, or NVSHMEM_TEAM_INVALID outside it."""
    lines = []
    for program in sched.programs:
        splits = [op for op in program.ops if isinstance(op, ir.TeamSplit)]
        if not splits:
            continue
        lines.append(f"  if (cw_rank == {program.rank}) {{  // rank {program.rank}'s team splits, in its program order")
        for op in splits:
            handle = _team_handle(op.team)
            parent = "NVSHMEM_TEAM_WORLD" if op.comm == "world" else _team_handle(op.comm)
            members = sched.comm(op.team).members(program.rank)

            def stop(why: str) -> str:
                return f"      cw_abandon(\"error\", {cuda.literal(why)}, 2);"
            lines += [f"    // {cuda.comment(op.loc)}: {cuda.comment(describe(op))}",
                      f"    if (nvshmem_team_split_strided({parent}, {op.start}, {op.stride}, {op.size}, nullptr, 0, "
                      f"&{handle}) != 0)",
                      stop(f"nvshmem_team_split_strided failed for team {op.team}")]
            if members:
                index = members.index(program.rank)
                lines += [f"    if ({handle} == NVSHMEM_TEAM_INVALID || nvshmem_team_my_pe({handle}) != {index})",
                          stop(f"NVSHMEM made team {op.team} without rank {program.rank} as its member {index}")]
            else:
                lines += [f"    if ({handle} != NVSHMEM_TEAM_INVALID)",
                          stop(f"NVSHMEM made rank {program.rank} a member of team {op.team}, which it is not")]
        lines.append("  }")
    return lines


def _pool_bytes(sched: ir.Schedule) -> int:
    """The pool of per-rank buffers: the most any rank needs (every PE allocates the same size)."""
    most = 0
    for program in sched.programs:
        total = 0
        for decl in program.buffers:
            if not decl.symmetric:
                nbytes = max(decl.count * ir.DTYPE_BYTES[decl.dtype], 1)
                total += -(-nbytes // POOL_ALIGN) * POOL_ALIGN
        most = max(most, total)
    return max(most, 16)


def _heap_bytes(sched: ir.Schedule, pool: int) -> int:
    """A symmetric heap that holds every symmetric buffer, the pool and the signal words, with room
    for NVSHMEM's own allocations; in MiB."""
    from .program import _symmetric

    total = pool + sum(-(-nbytes // 4096) * 4096 + 4096 for _name, nbytes in _symmetric(sched))
    total += 8 * max((sum(d.count for d in p.signals) for p in sched.programs), default=1) + (64 << 20)
    return -(-total // (2 << 20)) * (2 << 20)


TARGET = NvshmemTarget()
