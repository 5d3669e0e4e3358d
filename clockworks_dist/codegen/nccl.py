"""The NCCL backend: host-driven, every op enqueued on the rank's stream.

- send / recv / group: `ncclSend` / `ncclRecv` inside `ncclGroupStart/End` (a group's members are
  posted together and complete in any order, GroupRule); a recv with `reduce` receives into
  scratch, then a kernel computes dst = dst op received (RecvRule);
- collectives: the NCCL call on the communicator the op names. Split communicators are made with
  `ncclCommSplit` over the world's, with the schedule's color and key, so NCCL rank i is member i
  (`ir.Communicator.members`); peers and roots are translated from world ranks. all_to_all is a group
  of sends and receives (chunk j to member j); barrier is a one-element all-reduce;
- a source that overlaps a destination other than in NCCL's in-place forms is staged in scratch
  (the rules read every source before any destination is written);
- reduce, copy, fill, compute: kernels (`local`).

No sync is added between ops: the stream runs them in program order, which is the order the rules
need on one rank, and NCCL orders the ranks. One-sided ops are NVSHMEM's (`--backend nvshmem`).
"""

from __future__ import annotations

from .. import ir
from ..semantics.backends import Backend, plain_connection, register
from ..semantics.rules import chunks
from . import cuda, local
from .program import Gen, Target, locals_for, op_comment

NCCL_TYPE = {"float16": "ncclHalf", "bfloat16": "ncclBfloat16", "float32": "ncclFloat32", "float64": "ncclFloat64",
             "int32": "ncclInt32", "int64": "ncclInt64", "uint32": "ncclUint32", "uint64": "ncclUint64"}
NCCL_OP = {"sum": "ncclSum", "prod": "ncclProd", "max": "ncclMax", "min": "ncclMin"}
ONE_SIDED = "a one-sided NVSHMEM op: generate this schedule with --backend nvshmem (or run it with --backend mpi-cpu)"


def _type(gen: Gen, region: ir.Region) -> str:
    return NCCL_TYPE[gen.dtype(region)]


def _stage(gen: Gen, src: ir.Region, dsts: list[ir.Region | None], inplace: list[ir.Region], lines: list[str]) -> str:
    """`src`'s pointer, or a scratch copy's if it overlaps a destination other than as one of NCCL's
    in-place forms (`inplace`: the regions src may equal)."""
    if any(dst is not None and gen.overlaps(src, dst) for dst in dsts) and src not in inplace:
        scratch = gen.add_scratch(gen.nbytes(src), f"op {gen.index} of rank {gen.rank}: a source overlapping "
                                                   "its destination, read before the destination is written")
        lines.append(f"  CW_CUDA(cudaMemcpyAsync({scratch}, {gen.ptr(src)}, {gen.nbytes(src)}, "
                     "cudaMemcpyDeviceToDevice, s));  // staged: the source overlaps the destination")
        return f"({gen.ctype(src)}*){scratch}"
    return gen.ptr(src)


def _p2p_members(op) -> list:
    return list(op.ops) if isinstance(op, ir.Group) else [op]


def p2p(gen: Gen, op) -> list[str]:
    """send, recv, group: one NCCL group; recvs that reduce land in scratch and are combined after. A
    collective in a group is its NCCL call inside the group (an all_to_all's own group nests: NCCL's
    groups do)."""
    lines = ["  CW_NCCL(ncclGroupStart());"]
    after, before = [], []
    for member in _p2p_members(op):
        if member.kind in ir.GROUP_COLLECTIVE_KINDS:  # a collective in the group: NCCL's call, posted with the rest
            for line in TABLE[type(member)](gen, member):
                # a staged source is copied on the stream before the group posts anything
                (lines if "CW_NCCL(" in line else before).append(line)
            continue
        comm = gen.comm(member.comm)
        peer = gen.comm_rank(member.comm, member.peer)
        if isinstance(member, ir.Send):
            lines.append(f"  CW_NCCL(ncclSend({gen.ptr(member.src)}, {member.src.count}, {_type(gen, member.src)}, "
                         f"{peer}, {comm}, s));  // to rank {member.peer}")
            continue
        into = gen.ptr(member.dst)
        if member.reduce is not None:
            scratch = gen.add_scratch(gen.nbytes(member.dst), f"op {gen.index} of rank {gen.rank}: what a recv "
                                                              "that reduces receives")
            into = f"({gen.ctype(member.dst)}*){scratch}"
            table = gen.add_table(gen.ctype(member.dst), [gen.ptr(member.dst), into])
            after.append(f"  cw_reduce<{gen.ctype(member.dst)}>(s, {gen.ptr(member.dst)}, {table}, 2, "
                         f"{member.dst.count}, {cuda.REDUCE_CODE[member.reduce]});  // dst = dst "
                         f"{member.reduce} received")
        lines.append(f"  CW_NCCL(ncclRecv({into}, {member.dst.count}, {_type(gen, member.dst)}, {peer}, {comm}, "
                     f"s));  // from rank {member.peer}")
    lines.append("  CW_NCCL(ncclGroupEnd());")
    return before + lines + after


def all_reduce(gen: Gen, op: ir.AllReduce) -> list[str]:
    lines: list[str] = []
    src = _stage(gen, op.src, [op.dst], [op.dst], lines)
    lines.append(f"  CW_NCCL(ncclAllReduce({src}, {gen.ptr(op.dst)}, {op.dst.count}, {_type(gen, op.dst)}, "
                 f"{NCCL_OP[op.op]}, {gen.comm(op.comm)}, s));")
    return lines


def all_gather(gen: Gen, op: ir.AllGather) -> list[str]:
    lines: list[str] = []
    members = gen.sched.members(op.comm, gen.rank)
    mine = chunks(op.dst, len(members))[members.index(gen.rank)]
    src = _stage(gen, op.src, [op.dst], [mine], lines)
    lines.append(f"  CW_NCCL(ncclAllGather({src}, {gen.ptr(op.dst)}, {op.src.count}, {_type(gen, op.src)}, "
                 f"{gen.comm(op.comm)}, s));")
    return lines


def reduce_scatter(gen: Gen, op: ir.ReduceScatter) -> list[str]:
    lines: list[str] = []
    members = gen.sched.members(op.comm, gen.rank)
    mine = chunks(op.src, len(members))[members.index(gen.rank)]
    src = _stage(gen, op.src, [op.dst], [op.dst] if op.dst == mine else [], lines)
    lines.append(f"  CW_NCCL(ncclReduceScatter({src}, {gen.ptr(op.dst)}, {op.dst.count}, {_type(gen, op.dst)}, "
                 f"{NCCL_OP[op.op]}, {gen.comm(op.comm)}, s));")
    return lines


def broadcast(gen: Gen, op: ir.Broadcast) -> list[str]:
    lines: list[str] = []
    root = gen.comm_rank(op.comm, op.root)
    src = _stage(gen, op.src, [op.dst], [op.dst], lines) if op.root == gen.rank else gen.ptr(op.dst)
    lines.append(f"  CW_NCCL(ncclBroadcast({src}, {gen.ptr(op.dst)}, {op.dst.count}, {_type(gen, op.dst)}, {root}, "
                 f"{gen.comm(op.comm)}, s));  // root: rank {op.root}")
    return lines


def reduce_to(gen: Gen, op: ir.ReduceTo) -> list[str]:
    lines: list[str] = []
    root = gen.comm_rank(op.comm, op.root)
    mine = op.root == gen.rank and op.dst is not None
    src = _stage(gen, op.src, [op.dst] if mine else [], [op.dst] if mine else [], lines)
    into = gen.ptr(op.dst) if mine else src  # NCCL writes recvbuff on the root only
    lines.append(f"  CW_NCCL(ncclReduce({src}, {into}, {op.src.count}, {_type(gen, op.src)}, {NCCL_OP[op.op]}, "
                 f"{root}, {gen.comm(op.comm)}, s));  // root: rank {op.root}")
    return lines


def all_to_all(gen: Gen, op: ir.AllToAll) -> list[str]:
    """Chunk j of src to member j, chunk j of dst from member j: one group of sends and receives."""
    lines: list[str] = []
    members = gen.sched.members(op.comm, gen.rank)
    src = _stage(gen, op.src, [op.dst], [], lines)
    per = op.src.count // len(members)
    comm = gen.comm(op.comm)
    kind = _type(gen, op.src)
    lines.append("  CW_NCCL(ncclGroupStart());")
    for j, member in enumerate(members):
        lines.append(f"  CW_NCCL(ncclSend({src} + {j * per}, {per}, {kind}, {j}, {comm}, s));  // to rank {member}")
        lines.append(f"  CW_NCCL(ncclRecv({gen.ptr(op.dst)} + {j * per}, {per}, {kind}, {j}, {comm}, s));"
                     f"  // from rank {member}")
    lines.append("  CW_NCCL(ncclGroupEnd());")
    return lines


def barrier(gen: Gen, op: ir.Barrier) -> list[str]:
    return [f"  CW_NCCL(ncclAllReduce(cw_barrier_word, cw_barrier_word, 1, ncclInt32, ncclMax, {gen.comm(op.comm)}, "
            "s));  // a barrier: a one-element all-reduce"]


TABLE = {
    ir.Send: p2p, ir.Recv: p2p, ir.Group: p2p, ir.AllReduce: all_reduce, ir.AllGather: all_gather,
    ir.ReduceScatter: reduce_scatter, ir.Broadcast: broadcast, ir.ReduceTo: reduce_to, ir.AllToAll: all_to_all,
    ir.Barrier: barrier, **local.TABLE,
}
UNSUPPORTED = {cls: ONE_SIDED for cls in (
    ir.Put, ir.PutSignal, ir.SignalUpdate, ir.Atomic, ir.Get, ir.GetNbi, ir.FetchAtomic, ir.SignalStore, ir.WaitUntil,
    ir.WaitUntilAll, ir.WaitUntilAny, ir.Fence, ir.Quiet, ir.BarrierAll, ir.SyncAll)}
THREAD_SYNC = ("events and thread barriers order the threads of a rank, which this backend does not run "
               "(the mpi-cpu executor runs them, `clockworks check` explores them)")
UNSUPPORTED.update({cls: THREAD_SYNC for cls in (ir.RecordEvent, ir.WaitEvent, ir.ThreadBarrier)})
UNSUPPORTED.update({cls: "an NVSHMEM team op: NCCL has communicators (r.comm, ncclCommSplit), not NVSHMEM teams; "
                         "generate this schedule with --backend nvshmem (or run it with `clockworks run`, mpi-cpu)"
                    for cls in (ir.TeamSplit, ir.TeamBarrier)})
NCCL = register(Backend("nccl-codegen", table=TABLE, unsupported=UNSUPPORTED,
                        limits={ir.Send: plain_connection, ir.Recv: plain_connection}))


class NcclTarget(Target):
    name = "nccl"
    table = NCCL
    includes = ("nccl.h",)

    def prelude(self, gen: Gen) -> list[str]:
        lines = [
            "// ------------------------------------------------------------------------------ NCCL backend",
            "#define CW_NCCL(x) do { ncclResult_t r_ = (x); \\",
            "  if (r_ != ncclSuccess) cw_fail(#x, ncclGetErrorString(r_), __FILE__, __LINE__); } while (0)",
            "static ncclComm_t cw_world_comm;",
            "static int* cw_barrier_word = nullptr;  // barriers and the alignment before each run",
        ]
        for comm in gen.sched.comms:
            colors = ", ".join("NCCL_SPLIT_NOCOLOR" if c is None else str(c) for c in comm.color)
            keys = ", ".join(str(k) for k in comm.key)
            lines += [f"static ncclComm_t {cuda.ident('comm', comm.name)};  // communicator {cuda.comment(comm.name)}",
                      f"static const int CW_COLOR_{cuda.ident('comm', comm.name)}[] = {{{colors}}};",
                      f"static const int CW_KEY_{cuda.ident('comm', comm.name)}[] = {{{keys}}};"]
        return lines

    def init(self, gen: Gen) -> list[str]:
        lines = [
            "  // NCCL: rank 0's unique id reaches every rank through MPI_Bcast",
            "  ncclUniqueId id;",
            "  if (cw_rank == 0) CW_NCCL(ncclGetUniqueId(&id));",
            "  CW_MPI(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD));",
            "  CW_NCCL(ncclCommInitRank(&cw_world_comm, cw_world, id, cw_rank));",
        ]
        for comm in gen.sched.comms:
            name = cuda.ident("comm", comm.name)
            lines.append(f"  CW_NCCL(ncclCommSplit(cw_world_comm, CW_COLOR_{name}[cw_rank], CW_KEY_{name}[cw_rank], "
                         f"&{name}, nullptr));  // members ordered by (key, world rank)")
        lines.append("  cw_barrier_word = (int*)cw_malloc(sizeof(int));")
        lines.append("  CW_CUDA(cudaMemset(cw_barrier_word, 0, sizeof(int)));")
        return lines

    def align(self, gen: Gen) -> list[str]:
        return ["  CW_NCCL(ncclAllReduce(cw_barrier_word, cw_barrier_word, 1, ncclInt32, ncclMax, cw_world_comm, s));"]

    def rank_function(self, gen: Gen, rank: int) -> list[str]:
        program = gen.sched.programs[rank]
        lines = [f"// ---------------------------------------------------------------------------------- rank {rank}",
                 f"static void rank{rank}(cudaStream_t s) {{", *locals_for(gen, rank)]
        for index, op in enumerate(program.ops):
            gen.index = index
            lines += ["", op_comment(op), f"  cw_mark(s, {index});", *self.table.lookup(op)(gen, op)]
        lines += ["", f"  cw_mark(s, {len(program.ops)});  // every op enqueued", "}", ""]
        return lines

    def finalize(self, gen: Gen) -> list[str]:
        lines = ["  CW_CUDA(cudaStreamSynchronize(s));"]
        for comm in gen.sched.comms:
            name = cuda.ident("comm", comm.name)
            lines.append(f"  if (CW_COLOR_{name}[cw_rank] != NCCL_SPLIT_NOCOLOR) ncclCommDestroy({name});")
        lines.append("  ncclCommDestroy(cw_world_comm);")
        return lines


TARGET = NcclTarget()
