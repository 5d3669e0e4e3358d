"""The program every backend shares, around the backend's code for each rank's ops.

`generate(sched, backend)` returns the text of one `.cu`: a header (what it is, how to build and
run it), the runtime support (`support.cuh`, inlined, so the file stands alone), the backend's
declarations, each rank's buffers and op table (for the hang report), each rank's ops as one
function `rank<k>(stream)` with the user's file:line as a comment above the code of each op, and
`main()`: MPI, one GPU per local rank, the backend's start, the buffers, the expected values, the
warm-up, the timed runs eager and as a CUDA graph, the check, the JSON line. The contract this
program keeps is `codegen/__init__.py`'s.

A backend (`Target`) supplies the code around its table: `nccl.TARGET` and `nvshmem.TARGET`. Its
table (`semantics.backends.Backend`) maps each op class to a function `emit(gen, op) -> list of C++
lines` (`Gen` gives regions as typed pointers, comm handles, scratch and pointer tables), and says
in `unsupported` why it cannot emit the others: `generate` raises `Unsupported` naming the op's
file:line and the backend that can run it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import ir
from ..semantics import numeric
from ..semantics.backends import Backend, Unsupported
from ..semantics.rules import describe
from ..lowering import Build, Lowered, lower
from . import cuda

SUPPORT = Path(__file__).with_name("support.cuh")
TARGETS = {"nccl": "nccl", "nvshmem": "nvshmem"}
# The size of the default per-op scratch alignment (bytes): scratch regions start on this boundary.
ALIGN = 256


class Target:
    """One backend's code around its op table (see the module docstring); methods return C++ lines."""

    name = "none"
    table: Backend
    includes: tuple[str, ...] = ()
    mark_words = 1  # progress words: [0] the op, then one per thread block where it matters

    def prelude(self, gen: "Gen") -> list[str]:
        """File-scope declarations: handles, kernels."""
        return []

    def init(self, gen: "Gen") -> list[str]:
        """In main(), after the GPU is chosen and before any buffer exists."""
        return []

    def alloc(self, gen: "Gen", bytes_expr: str, symmetric: bool) -> str:
        """An expression: device memory of `bytes_expr` bytes (`symmetric`: on every rank alike)."""
        return f"cw_malloc({bytes_expr})"

    def setup(self, gen: "Gen") -> list[str]:
        """After the buffers exist: whatever the ops need at run time (scratch is `Gen`'s)."""
        return []

    def reset(self, gen: "Gen") -> list[str]:
        """In cw_reset, on stream `s` after the inputs are written (`bufs`: the rank's buffers)."""
        return []

    def align(self, gen: "Gen") -> list[str]:
        """On stream `s`, outside the timed span: every rank leaves it at about the same time, and
        no rank starts the ops before every rank's inputs are written."""
        return []

    def refuses(self, sched: ir.Schedule, op) -> str | None:
        """Why this backend cannot emit `op` of `sched` although its table has the op's class (what
        only the schedule says: which communicator an op is on); None: it can."""
        return None

    def rank_function(self, gen: "Gen", rank: int) -> list[str]:
        """The definition of `static void rank<k>(cudaStream_t s)`: one run of the rank's ops."""
        raise NotImplementedError

    def read_at_end(self, gen: "Gen", on: bool) -> list[str]:
        """On stream `s`: turn on (or off) the copy of each rank's outputs that its last kernel takes
        when the rank's program ends, before the run's closing barrier (`CwBuf.ended`). A backend
        whose ops all complete on the rank's own stream needs none: once the stream has run the last
        op, no other rank writes the rank's memory."""
        return []

    def finalize(self, gen: "Gen") -> list[str]:
        return []


@dataclass
class Scratch:
    """Device memory an op needs besides the schedule's buffers (a recv that reduces, a staged copy)."""

    rank: int
    name: str
    nbytes: int
    why: str


@dataclass
class Gen:
    """What an emitter needs while writing the ops of one rank."""

    sched: ir.Schedule
    target: Target
    rank: int = 0
    index: int = 0  # the op being emitted
    scratch: list[Scratch] = field(default_factory=list)
    tables: list[tuple[int, str, str, list[str]]] = field(default_factory=list)  # (rank, name, C type, pointers)
    uses: set[str] = field(default_factory=set)
    state: dict = field(default_factory=dict)  # a backend's own scratch while it writes one program
    lowered: Lowered | None = None  # the lowering decisions the emitter renders (`lowering.lower`)

    @property
    def program(self) -> ir.Program:
        return self.sched.programs[self.rank]

    def dtype(self, region: ir.Region, rank: int | None = None) -> str:
        """The IR dtype of a region's buffer (on `rank`, default the current one)."""
        return self.sched.programs[self.rank if rank is None else rank].buffer(region.buffer).dtype

    def ctype(self, region: ir.Region) -> str:
        return cuda.C_TYPE[self.dtype(region)]

    def ptr(self, region: ir.Region) -> str:
        """The region's first element as a typed pointer expression."""
        name = cuda.ident("buffer", region.buffer)
        return f"{name} + {region.start}" if region.start else name

    def nbytes(self, region: ir.Region) -> int:
        return region.count * ir.DTYPE_BYTES[self.dtype(region)]

    def comm(self, name: str) -> str:
        """The C++ handle of communicator `name` (the world's is `cw_world_comm`)."""
        self.uses.add(name)
        return "cw_world_comm" if name == "world" else cuda.ident("comm", name)

    def comm_rank(self, comm: str, world_rank: int) -> int:
        """`world_rank`'s rank in the current rank's group of `comm` (communicator order)."""
        members = self.sched.members(comm, self.rank)
        return members.index(world_rank)

    def add_scratch(self, nbytes: int, why: str) -> str:
        """A pointer expression (char*) to `nbytes` of scratch for the current op."""
        name = f"cw_scratch_{self.rank}_{len(self.scratch)}"
        self.scratch.append(Scratch(self.rank, name, nbytes, why))
        return name

    def add_table(self, ctype: str, pointers: list[str]) -> str:
        """A device array of `ctype` pointers, filled at setup (its name)."""
        name = f"cw_table_{self.rank}_{len(self.tables)}"
        self.tables.append((self.rank, name, ctype, pointers))
        return name

    def overlaps(self, a: ir.Region, b: ir.Region) -> bool:
        return a.buffer == b.buffer and a.start < b.stop and b.start < a.stop


def target(backend: str) -> Target:
    """The `Target` of a backend name ("nccl", "nvshmem")."""
    if backend not in TARGETS:
        raise ValueError(f"unknown backend {backend!r}: one of {', '.join(TARGETS)}")
    return importlib.import_module(f".{TARGETS[backend]}", __package__).TARGET


def unsupported(sched: ir.Schedule, backend: str) -> list[str]:
    """Why `backend` cannot generate `sched`, one line per op class it lacks (empty: it can)."""
    tgt = target(backend)
    table = tgt.table
    found: dict[str, str] = {}
    for program in sched.programs:
        if program.threads:
            thread = program.threads[0]
            found.setdefault("threads", f"{thread.loc}: rank {program.rank} runs threads ({thread.kind} "
                                        f"{thread.name} ...): the {backend} code generator emits one program per "
                                        "rank and does not emit threads yet")
        for op in program.ops:
            for member in (op.ops if isinstance(op, ir.Group) else (op,)):
                try:
                    table.lookup(member)
                    why = tgt.refuses(sched, member)
                    if why:
                        raise Unsupported(f"{member.loc}: the {table.name} backend cannot run {member.kind}: {why}")
                except Unsupported as exc:
                    found.setdefault(member.kind, str(exc))
    return list(found.values())


def generate(program: Lowered | ir.Schedule, backend: str | None = None) -> str:
    """The `.cu` of a lowered schedule (`lowering.lower(sched, Build(backend, ...))`: its backend, K
    calls with a kernel per call, packets, copy-engine puts), or of a schedule as written for
    `backend`; `Unsupported` (naming file:line) if an op cannot be emitted. The emitter renders the
    lowering's decisions and takes none itself."""
    if not isinstance(program, Lowered):
        # what the backend cannot emit is said before lowering, which refuses some of it (threads) too
        problems = unsupported(program, backend or "nccl")
        if problems:
            raise Unsupported("; ".join(problems))
    lowered = program if isinstance(program, Lowered) else lower(program, Build(backend or "nccl"))
    sched = lowered.sched
    tgt = target(lowered.build.backend)
    problems = unsupported(sched, tgt.name)
    if problems:
        raise Unsupported("; ".join(problems))
    for prog in sched.programs:  # names are checked when a schedule is loaded; check again here
        for decl in (*prog.buffers, *prog.signals):
            cuda.ident("buffer", decl.name)
    gen = Gen(sched, tgt, lowered=lowered)
    functions = []
    for rank in range(sched.world):
        gen.rank = rank
        functions += tgt.rank_function(gen, rank)
    prelude = tgt.prelude(gen)
    align = ["// Before each run, outside the timed span: every rank's inputs are written and the ranks leave",
             "// together, so no rank starts the ops early and the time is the ops' own.",
             "static void cw_align(cudaStream_t s) {", *tgt.align(gen), "  (void)s;", "}"]
    parts = [_header(sched, tgt), SUPPORT.read_text(), *[f"#include <{inc}>" for inc in tgt.includes], "",
             _globals(sched, tgt, gen), *prelude, "", *_tables(sched, gen), "", *align, "", *functions, "",
             _main(sched, tgt, gen)]
    return "\n".join(parts).rstrip() + "\n"


# ------------------------------------------------------------------------------------ pieces
def _header(sched: ir.Schedule, tgt: Target) -> str:
    source = cuda.comment(f"{sched.loc.file}:{sched.loc.line}")
    build = {"nccl": "nvcc -O2 -std=c++17 -arch=sm_90 -I$NCCL/include -I$MPI/include PROG.cu -L$NCCL/lib "
                     "-l:libnccl.so.2 -lmpi -o PROG",
             "nvshmem": "nvcc -O2 -std=c++17 -arch=sm_90 -rdc=true -I$NVSHMEM/include -I$MPI/include PROG.cu "
                        "-L$NVSHMEM/lib -lnvshmem_host -lnvshmem_device -lmpi -o PROG"}[tgt.name]
    return "\n".join([
        f"// {cuda.comment(sched.name)}: {sched.world} ranks, {tgt.name.upper()} backend. Generated by clockworks-dist",
        f"// from the schedule at {source}; change the schedule, not this file.",
        "//",
        "// Build: clockworks build (or: " + build + ")",
        f"// Run:   mpirun -np {sched.world} ./PROG [--job DIR] [--iters K] [--warmup W] [--timeout S] [--no-graph]",
        "//        with NVLink multicast off in every rank: NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1",
        "//        TORCH_SYMM_MEM_DISABLE_MULTICAST=1 in the environment (Open MPI: -x each of them)",
        "// Every rank writes its inputs (the runtime's formula), runs its ops, checks every element against",
        "// the expected values in DIR/expect<rank>.bin when given, and prints one JSON line.",
        "",
    ])


def _globals(sched: ir.Schedule, tgt: Target, gen: Gen) -> str:
    return "\n".join([
        f"static const int CW_WORLD = {sched.world};",
        f"static const char* cw_schedule_name() {{ return {cuda.literal(sched.name)}; }}",
        f"static const char* cw_backend_name() {{ return {cuda.literal(tgt.name)}; }}",
        "static uint64_t* cw_signals = nullptr;  // this rank's signal words",
    ])


def _symmetric(sched: ir.Schedule) -> list[tuple[str, int]]:
    """The symmetric buffers, in one order on every rank: (name, bytes)."""
    found: dict[str, int] = {}
    for program in sched.programs:
        for decl in program.buffers:
            if decl.symmetric:
                found[decl.name] = max(found.get(decl.name, 0), decl.count * ir.DTYPE_BYTES[decl.dtype])
    return list(found.items())


def _signal_words(program: ir.Program) -> list[tuple[str, int, int]]:
    """(signal, index, word) for every signal word of a rank, in declaration order."""
    words, offset = [], 0
    for decl in program.signals:
        for i in range(decl.count):
            words.append((decl.name, i, offset + i))
        offset += decl.count
    return words


def signal_word(program: ir.Program, ref: ir.SignalRef) -> int:
    """The index of a signal word in the rank's signal array (declaration order)."""
    offset = 0
    for decl in program.signals:
        if decl.name == ref.signal:
            return offset + ref.index
        offset += decl.count
    raise KeyError(ref.signal)


def input_base(rank: int, buffer: str) -> int:
    """The key of `numeric.input_values`: mix((rank << 32) + crc32(buffer))."""
    import zlib

    key = np.array([(rank << 32) + zlib.crc32(buffer.encode())], dtype=np.uint64)
    return int(numeric._mix(key)[0])


def bits(value, dtype: str) -> str:
    """`cw_bits<T>(...)`: the exact element `numeric.constant(value, 1, dtype)` stores on the device."""
    stored = numeric.constant(value, 1, dtype)
    if dtype == "bfloat16":
        word = int(stored.view(np.uint32)[0]) >> 16
    else:
        word = int(stored.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[stored.itemsize])[0])
    return f"cw_bits<{cuda.C_TYPE[dtype]}>({cuda.u64(word)})"


def _tables(sched: ir.Schedule, gen: Gen) -> list[str]:
    lines = ["// ------------------------------------------------------------------ buffers and ops of each rank"]
    symmetric = _symmetric(sched)
    slots = {name: i for i, (name, _bytes) in enumerate(symmetric)}
    lines.append(f"static const int CW_NSYM = {len(symmetric)};")
    entries = ", ".join(f"{{{cuda.literal(name)}, {nbytes}}}" for name, nbytes in symmetric) or "{nullptr, 0}"
    lines.append(f"static const CwSym CW_SYM[] = {{{entries}}};  // symmetric buffers, one order on every rank")
    for program in sched.programs:
        k = program.rank
        lines.append(f"static CwBuf CW_BUFS_{k}[] = {{")
        for decl in program.buffers:
            slot = slots.get(decl.name, -1) if decl.symmetric else -1
            lines.append(f"  {{{cuda.literal(decl.name)}, {cuda.DTYPE_CODE[decl.dtype]}, {decl.count}, "
                         f"{cuda.u64(input_base(k, decl.name))}, {slot}, nullptr}},  "
                         f"// {cuda.comment(decl.role)}, {cuda.comment(decl.loc)}")
        if not program.buffers:
            lines.append('  {"", CW_F32, 0, 0ULL, -1, nullptr},')
        lines.append("};")
        lines.append(f"static const int CW_NBUFS_{k} = {len(program.buffers)};")
        lines.append(f"static const int CW_WORDS_{k} = {len(_signal_words(program))};  // signal words")
        lines.append(f"static const CwOpInfo CW_OPS_{k}[] = {{")
        for op in program.ops:
            lines.append(f"  {{{cuda.literal(describe(op))}, {cuda.literal(op.loc.file)}, {op.loc.line}}},")
        if not program.ops:
            lines.append('  {"", "", 0},')
        lines.append("};")
        lines.append(f"static const int CW_NOPS_{k} = {len(program.ops)};")
    for item in gen.scratch:
        lines.append(f"static char* {item.name} = nullptr;  // {item.nbytes} bytes: {cuda.comment(item.why)}")
    for _rank, name, ctype, _pointers in gen.tables:
        lines.append(f"static {ctype}** {name} = nullptr;  // device array of pointers, filled at setup")
    ranks = sched.world
    lines += [
        "static CwBuf* cw_bufs(int r, int* n, int* words) {",
        "  switch (r) {",
        *[f"    case {k}: *n = CW_NBUFS_{k}; *words = CW_WORDS_{k}; return CW_BUFS_{k};" for k in range(ranks)],
        "  }",
        "  *n = 0; *words = 0; return nullptr;",
        "}",
        "static const CwOpInfo* cw_op_info(int r, int* count) {",
        "  switch (r) {",
        *[f"    case {k}: *count = CW_NOPS_{k}; return CW_OPS_{k};" for k in range(ranks)],
        "  }",
        "  *count = 0; return nullptr;",
        "}",
        "static void* cw_malloc(size_t bytes) {",
        "  void* p = nullptr;",
        "  CW_CUDA(cudaMalloc(&p, std::max<size_t>(bytes, 1)));",
        "  return p;",
        "}",
    ]
    return lines


def locals_for(gen: Gen, rank: int) -> list[str]:
    """`T* b_name = (T*)CW_BUFS_k[i].ptr;` for each buffer of the rank (the ops' names)."""
    program = gen.sched.programs[rank]
    lines = []
    for i, decl in enumerate(program.buffers):
        ctype = cuda.C_TYPE[decl.dtype]
        lines.append(f"  [[maybe_unused]] {ctype}* {cuda.ident('buffer', decl.name)} "
                     f"= ({ctype}*)CW_BUFS_{rank}[{i}].ptr;"
                     f"  // {decl.count} x {decl.dtype}")
    return lines


def op_comment(op) -> str:
    """The comment above an op's code: the user's file:line and the op as written."""
    return f"  // {cuda.comment(op.loc)}: {cuda.comment(describe(op))}"


def _main(sched: ir.Schedule, tgt: Target, gen: Gen) -> str:
    ranks = sched.world
    fill_tables = []
    for rank in sorted({rank for rank, *_rest in gen.tables}):
        fill_tables += [f"  if (cw_rank == {rank}) {{  // the pointer tables of rank {rank}'s reduce kernels",
                        *["  " + line for line in locals_for(gen, rank)]]
        for _rank, name, ctype, pointers in (t for t in gen.tables if t[0] == rank):
            fill_tables += ["    {",
                            f"      {ctype}* host[] = {{{', '.join(f'({ctype}*)({p})' for p in pointers)}}};",
                            f"      CW_CUDA(cudaMalloc(&{name}, sizeof host));",
                            f"      CW_CUDA(cudaMemcpy({name}, host, sizeof host, cudaMemcpyHostToDevice));",
                            "    }"]
        fill_tables.append("  }")
    scratch = [f"  if (cw_rank == {item.rank}) {item.name} = (char*)cw_malloc({item.nbytes});"
               f"  // {cuda.comment(item.why)}" for item in gen.scratch]
    body = "\n".join([
        "// -------------------------------------------------------------------------------------- main",
        "typedef void (*CwRankFn)(cudaStream_t);",
        f"static const CwRankFn CW_RANKS[] = {{{', '.join(f'rank{k}' for k in range(ranks))}}};",
        "",
        "static void cw_reset(cudaStream_t s, CwBuf* bufs, int nbufs, uint64_t* signals, int words) {",
        "  for (int b = 0; b < nbufs; ++b) cw_inputs_any(s, bufs[b]);",
        *tgt.reset(gen),
        "  if (words) CW_CUDA(cudaMemsetAsync(signals, 0, words * sizeof(uint64_t), s));",
        "  cw_align(s);",
        "}",
        "",
        "int main(int argc, char** argv) {",
        "  CW_MPI(MPI_Init(&argc, &argv));",
        "  MPI_Comm_rank(MPI_COMM_WORLD, &cw_rank);",
        "  MPI_Comm_size(MPI_COMM_WORLD, &cw_world);",
        "  cw_args(argc, argv);",
        "  if (cw_world != CW_WORLD) {",
        "    char b[160];",
        "    snprintf(b, sizeof b, \"this program was generated for %d ranks; run it with mpirun -np %d\", CW_WORLD, "
        "CW_WORLD);",
        "    cw_usage_error(b);",
        "  }",
        "  cw_open_progress();",
        "  signal(SIGUSR1, cw_on_signal);  // mpiexec's notice that another rank died (MPICH; Open MPI: SIGTERM)",
        "  signal(SIGTERM, cw_on_signal);",
        "  MPI_Comm local;  // one GPU per rank of this node",
        "  CW_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, cw_rank, MPI_INFO_NULL, &local));",
        "  int local_rank = 0, devices = 0;",
        "  MPI_Comm_rank(local, &local_rank);",
        "  CW_CUDA(cudaGetDeviceCount(&devices));",
        "  int local_size = 1;",
        "  MPI_Comm_size(local, &local_size);",
        *(("  // CW_SHARE_GPUS=1 (clockworks validate --share-gpus): several PEs share a GPU, NVSHMEM's multiple",
           "  // processes per GPU, to check the results where there are fewer GPUs than ranks",
           "  const char* share = getenv(\"CW_SHARE_GPUS\");",
           "  if (local_size > devices && !(share && strcmp(share, \"1\") == 0)) {")
          if tgt.name == "nvshmem" else ("  if (local_size > devices) {",)),
        "    char b[200];",
        "    snprintf(b, sizeof b, \"%d ranks run on this node but %d GPU(s) are visible: one GPU per rank (run fewer "
        "ranks per node, or check CUDA_VISIBLE_DEVICES)\", local_size, devices);",
        "    cw_abandon(\"error\", b, 2);",
        "  }",
        "  CW_CUDA(cudaSetDevice(local_rank % devices));",
        f"  cw_mark_words = {tgt.mark_words};",
        "  // progress words in host-mapped memory: the GPU writes them, the host reads them on a hang",
        "  CW_CUDA(cudaHostAlloc((void**)&cw_marks, cw_mark_words * sizeof(uint32_t), cudaHostAllocMapped));",
        "  memset((void*)cw_marks, 0, cw_mark_words * sizeof(uint32_t));",
        "  CW_CUDA(cudaHostGetDevicePointer((void**)&cw_marks_dev, (void*)cw_marks, 0));",
        "  cw_find_stream_writes();",
        *tgt.init(gen),
        "  // buffers: the symmetric ones first, in one order on every rank",
        "  int nbufs = 0, words = 0;",
        "  CwBuf* bufs = cw_bufs(cw_rank, &nbufs, &words);",
        "  std::vector<void*> sym(CW_NSYM + 1, nullptr);",
        f"  for (int i = 0; i < CW_NSYM; ++i) sym[i] = {tgt.alloc(gen, 'CW_SYM[i].bytes', True)};",
        "  for (int b = 0; b < nbufs; ++b) {",
        "    size_t bytes = bufs[b].count * CW_ITEMSIZE[bufs[b].dtype];",
        f"    bufs[b].ptr = bufs[b].symmetric >= 0 ? sym[bufs[b].symmetric] : {tgt.alloc(gen, 'bytes', False)};",
        "  }",
        "  int max_words = 0;",
        f"  for (int r = 0; r < CW_WORLD; ++r) {{ int n_, w_; cw_bufs(r, &n_, &w_); "
        f"max_words = std::max(max_words, w_); }}",
        f"  cw_signals = (uint64_t*){tgt.alloc(gen, 'std::max(max_words, 1) * sizeof(uint64_t)', True)};"
        "  // symmetric",
        *scratch,
        *fill_tables,
        *tgt.setup(gen),
        "  cw_load_expect(bufs, nbufs, words);",
        "  cudaStream_t s;",
        "  CW_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));",
        "  cudaEvent_t start, stop;",
        "  CW_CUDA(cudaEventCreate(&start));",
        "  CW_CUDA(cudaEventCreate(&stop));",
        "  CwRankFn run = CW_RANKS[cw_rank];",
        "  CwTally tally;",
        "  std::vector<double> eager, graphed;",
        "  std::string graph_error;",
        "  // warm-up, then the timed runs: inputs written again before each (outside the timed span)",
        "  for (int mode = 0; mode < 2; ++mode) {",
        "    int runs = mode == 0 ? cw_warmup + cw_iters : cw_iters;",
        "    cudaGraphExec_t exec = nullptr;",
        "    if (mode == 1) {",
        "      if (!cw_graph) break;",
        "      cudaGraph_t graph = nullptr;",
        "      cw_phase(CW_SETUP);",
        "      CW_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));",
        "      run(s);",
        "      cudaError_t e = cudaStreamEndCapture(s, &graph);",
        "      if (e == cudaSuccess) e = cudaGraphInstantiate(&exec, graph, 0);",
        "      if (graph) cudaGraphDestroy(graph);",
        "      if (e != cudaSuccess) {",
        "        graph_error = std::string(\"the ops could not be captured as a CUDA graph: \") "
        "+ cudaGetErrorString(e);",
        "        cudaGetLastError();",
        "        break;",
        "      }",
        "    }",
        "    for (int i = 0; i < runs; ++i) {",
        "      int timed = mode == 1 || i >= cw_warmup, k = mode == 0 ? i - cw_warmup : i;",
        *([
            "      // the first warm-up run reads each output as the caller does, when the rank's program ends (before",
            "      // the barrier that closes a run): a delivery into it still in flight "
            "then shows as a mismatch. Only",
            "      // an untimed run copies them (none with --warmup 0)",
            "      cw_reading_at_end = mode == 0 && i == 0 && !timed;",
            *["      if (cw_reading_at_end) " + line.strip() for line in tgt.read_at_end(gen, True)],
        ] if tgt.read_at_end(gen, True) else []),
        "      cw_row[CW_F_ITERATION] = i;",
        "      cw_reset(s, bufs, nbufs, cw_signals, words);",
        "      cw_mark(s, -1);",
        "      CW_CUDA(cudaEventRecord(start, s));",
        "      if (mode == 0) run(s); else CW_CUDA(cudaGraphLaunch(exec, s));",
        "      CW_CUDA(cudaEventRecord(stop, s));",
        "      cw_phase(CW_RUNNING);",
        "      cw_wait(stop, cw_now() + cw_timeout);",
        "      cw_phase(CW_SETTLING);",
        "      float ms = 0;",
        "      CW_CUDA(cudaEventElapsedTime(&ms, start, stop));",
        "      if (timed) (mode == 0 ? eager : graphed).push_back(ms * 1e-3);",
        "      if ((mode == 0 && i == 0) || (timed && (k == 0 || k == cw_iters - 1)))",
        "        cw_compare(s, bufs, nbufs, cw_signals, words, mode == 0 ? i : cw_warmup + cw_iters + i, tally);",
        *([
            "      if (cw_reading_at_end) {",
            *["        " + line.strip() for line in tgt.read_at_end(gen, False)],
            "        cw_reading_at_end = 0;",
            "      }",
        ] if tgt.read_at_end(gen, True) else []),
        "    }",
        "    if (exec) cudaGraphExecDestroy(exec);",
        "  }",
        "  cw_phase(CW_DONE);",
        "  const char* status = !cw_have_expect ? \"ran\" : (tally.mismatches || tally.post_failures) ? \"mismatch\" "
        ": \"match\";",
        "  std::string line = cw_line_head(status);",
        "  line += \",\\\"seconds\\\":\" + cw_times_json(eager) "
        "+ \",\\\"graph_seconds\\\":\" + cw_times_json(graphed);",
        "  if (!graph_error.empty()) { line += \",\\\"graph_error\\\":\"; cw_json_str(line, graph_error.c_str()); }",
        "  if (cw_have_expect) {",
        "    line += \",\\\"compare\\\":{\\\"checked\\\":\" + std::to_string(tally.checked) "
        "+ \",\\\"mismatches\\\":\" +",
        "            std::to_string(tally.mismatches) + \",\\\"other_execution\\\":0,\\\"post_checked\\\":\" +",
        "            std::to_string(tally.post_checked) "
        "+ \",\\\"post_failures\\\":\" + std::to_string(tally.post_failures) +",
        "            \",\\\"first\\\":[\" + tally.first + \"],\\\"dumped\\\":\" "
        "+ (tally.dumps.empty() ? \"false\" : \"true\") +",
        "            \",\\\"dumps\\\":[\" + tally.dumps + \"]}\";",
        "  }",
        "  line += \"}\";",
        "  cw_emit(line);",
        *tgt.finalize(gen),
        "  cw_phase(CW_FINISHED);",
        "  MPI_Barrier(MPI_COMM_WORLD);",
        "  MPI_Finalize();",
        "  return strcmp(status, \"mismatch\") == 0 ? 1 : 0;",
        "}",
    ])
    return body
