"""A tuned schedule family as a library: `cw_<name>.h` + `cw_<name>.cu`, a size dispatcher over the
NVSHMEM kernels of the winning variant at each tuned size (the way NCCL's tuner picks an algorithm).

What `clockworks tune --emit DIR` writes (`emit`):

- `cw_<name>.h`: a small C API. `cw_<name>_init()` after the caller has initialised NVSHMEM (every
  PE, collective): the symmetric buffers for the largest size, each size's signal words, scratch,
  and each kernel's resident grid. `cw_<name>_buffer(which, &ptr, &bytes)`: a buffer the caller
  fills (inputs) or reads (outputs). `cw_<name>_run(bytes, stream)` (every PE, the same sizes in the
  same order, like any collective): the winner at exactly `bytes`, one kernel per call. A size that
  was not tuned is refused with the list of those that were (a kernel has its sizes compiled in:
  there is no silent fallback to another size's kernels). `cw_<name>_finalize()`. Every call returns
  a status (`CW_<NAME>_OK` or an error code) and `cw_<name>_last_error()` says what failed, where.
- `cw_<name>.cu`: for each size, the K-call schedule of its winner (`lowering.lower`: K calls with
  the separator named below, the packets rewrite when it won with packets), each call a kernel of its
  own per rank (the NVSHMEM block plan, `lowering/nvshmem_plan.py`, with a kernel boundary at every
  call), inside a namespace of its own; the host code that allocates, resets and launches them.
- `cw_<name>_test.cu`: a driver (MPI, the unique-id bootstrap) that runs every size more than K
  times, new inputs before every call, and checks every output element bit for bit against the
  schedule's postconditions.

Soundness: what runs is what the checker verified. Where it can, the checker proves a size's calls
safe however many run (`check.unbounded`: K calls of the periodic model of the library's use explored
state by state, every state of a later call a state of the first period's, shifted back; each call's
outputs checked when its caller reads them). Such a size has calls without end: one kernel for every
call, made from a middle call of the checked ones, which counts its calls on the device (a count per
block, in stream order: a CUDA graph replayed any number of times counts on) and moves its signal values
and packet flags on by the call's epoch; it never resets after a number of calls (it still does where the
host cannot know the state: before its first call, when another size ran in between, around a capture).
For every other size (puts on the copy engine, compute ops, or more states than the proof's bound), the
checker verifies every prefix of 1 .. K calls of the K-call schedule, each with the caller's accesses between the calls
(`lowering.repeat.library_schedules`: the inputs written anew before each call, the outputs read after each).
The library never runs more than K calls, or a call of another size, without restoring the state
those schedules start from: a reset (`cwl_reset_kernel`) completes every delivery and meets every
PE, zeroes the size's signal words, arrival counters and packet areas, and meets every PE again.
So every run of the library is a sequence of verified prefixes, each from the verified start state.
The separator between calls is the one the tune measured when the checker verifies it in this
model, else the cheapest it verifies (none, alternate, sync, barrier).

What the caller may do between two calls: write new inputs into the input buffers and read the
output buffers, by stream-ordered work on the library's stream (or after synchronising with it),
never touch any other buffer. The checker models exactly this (`lowering.repeat.with_caller`: the caller's
writes and reads are ops of the rank between two calls, after every op of the call before and before
every op of the next, with the peers' ops and in-flight deliveries running beside them), and the
library matches it on the hardware: a call's kernel has finished on the stream before the caller's
work runs, and that work has finished before the next call's kernel starts. One assumption is made
beyond the plan's own: what the caller's completed stream work wrote is what a peer reads from this
PE (over NVLink, served by this GPU's memory) once this PE's next kernel signals it; CUDA makes a
finished kernel's or copy's writes visible to the work after it, and the next kernel's signal is
issued after it starts. CUDA graphs: a captured sequence of calls begins with a reset (a graph
may replay any number of times, so its first call cannot rely on the state it was captured in), and
once a capture has happened, every call made outside a capture begins with one too (a replay may
have run since the last such call).

Identifiers in the emitted code come only from validated names (`cuda.ident`, `ir.name_problem`);
every other string of the user's (file names, labels) reaches it only inside comments (`cuda.comment`)
or string literals (`cuda.literal`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ... import ir
from ...errors import ClockworksError
from ...lowering import Build, Lowered, lower
from ...semantics.backends import Unsupported
from .. import cuda
from ..program import SUPPORT, Gen, _signal_words
from ...lowering.nvshmem_plan import MAX_BLOCKS
from ..nvshmem import PRELUDE, TARGET, kernel_names

DEFAULT_RESET_EVERY = 32  # K: calls between two resets (every prefix of K calls is checked)
SEPARATORS = ("none", "alternate", "sync", "barrier")  # cheapest first
CHECK_TIMEOUT_S = 60.0
CHECK_MAX_STATES = 1_000_000
# the proof for calls without end visits every state of a few calls (no reduction): past these it says
# incomplete and the size keeps a reset every K calls
ENDLESS_TIMEOUT_S = 30.0
ENDLESS_MAX_STATES = 200_000


class LibraryError(ClockworksError):
    """The library cannot be emitted (exit 2): which size, which winner, why."""


@dataclass(frozen=True)
class Winner:
    """What tune decided at one size: the variant, its lowering, how it was timed."""

    nbytes: int
    variant: dict
    packets: int = 0
    between: str | None = None  # the separator it was measured with (None: measured as one call)
    time_us: float | None = None
    nccl_us: float | None = None
    measured: bool = True  # False: the predicted winner of a dry run
    label: str = ""
    timing: str = ""  # how the time was taken (calls per timed run, fused or a kernel per call)
    copy_engine: int = 0  # its puts of at least this many bytes on the copy engine (0: none)


@dataclass
class Entry:
    """A winner made into the kernels of K calls."""

    winner: Winner
    between: str
    calls: int
    # the K calls lowered with a kernel per call (`lowering.lower`; with packets or copy-engine puts
    # where the winner won with them)
    program: Lowered
    said: dict[str, str] = field(default_factory=dict)  # separator -> what the checker said
    # calls without end (`check.unbounded` proved every number of calls safe): the period (1, or 2 with
    # two copies by call parity), and `program` is then 3 periods of calls, of which the middle period's
    # kernels become the one kernel of every call, its signal values moved on by the call's epoch
    endless: int = 0
    proof: object | None = None  # the `check.unbounded.Unbounded` that proved it

    @property
    def sched(self) -> ir.Schedule:
        """The K-call schedule that runs (rewritten by the packets lowering when it won with packets)."""
        return self.program.sched

    @property
    def starts(self) -> dict[int, list[int]]:
        """rank -> the first op of each call after the first."""
        return self.program.kernel_starts or {}

    def epoch_steps(self) -> dict[tuple[int, int], int]:
        """(rank, op) -> what the op's signal value moves by per epoch, for the ops of the middle period
        of an endless entry's calls (the value of the same op one period on, less its own)."""
        steps = {}
        p = self.endless
        for program in self.sched.programs:
            bounds = [0, *self.starts.get(program.rank, []), len(program.ops)]
            lo, mid, hi = bounds[p], bounds[2 * p], bounds[3 * p]
            if hi - mid != mid - lo:
                raise LibraryError(f"{_size_text(self.winner.nbytes)}: rank {program.rank}'s calls are not periodic")
            for m in range(lo, mid):
                op, later = program.ops[m], program.ops[m + mid - lo]
                if _SIGNAL_VALUED(op) and later.value != op.value:
                    steps[(program.rank, m)] = later.value - op.value
        return steps


def _SIGNAL_VALUED(op) -> bool:
    """An op whose `value` is a signal word's (set, added, waited for)."""
    return (isinstance(op, (ir.PutSignal, ir.SignalUpdate, ir.WaitUntil, ir.WaitUntilAll, ir.WaitUntilAny))
            or (isinstance(op, ir.Atomic) and isinstance(op.target, ir.SignalRef)))


# ---------------------------------------------------------------------------------- checking
def library_check(sched: ir.Schedule, starts: dict[int, list[int]], calls: int,
                  timeout: float | None = CHECK_TIMEOUT_S) -> str | None:
    """None when the checker verifies every prefix of 1 .. `calls` calls of `sched` with its caller's
    accesses (`lowering.repeat.library_schedules`); else the first failure, in words."""
    from ...check import check
    from ...lowering.repeat import library_schedules

    for j, modelled in enumerate(library_schedules(sched, starts, calls), 1):
        result = check(modelled, timeout=timeout, max_states=CHECK_MAX_STATES)
        if result.verdict == "verified" and result.complete:
            continue
        first = result.errors[0] if result.errors else None
        what = (f"{result.verdict}: {first.kind}: {first.message}" if first else
                f"incomplete: the check did not finish (stopped by {result.stopped_by})")
        return f"{j} call(s) with the caller's accesses between them: {what}"
    return None


def plan_entries(defn, world: int, winners: list[Winner], calls: int = DEFAULT_RESET_EVERY,
                 timeout: float | None = CHECK_TIMEOUT_S, say=lambda _text: None, endless: bool = False) -> list[Entry]:
    """Each winner as the kernels of its calls, with the separator the checker verifies for the library:
    the one it was measured with first, then the cheapest. With `endless`, calls without end (one kernel
    for every call, no reset) where `check.unbounded` proves any number of calls safe with that
    separator; else `calls` calls between resets (`library_check`: every prefix of them verified)."""
    from ...perf.predict import size_binding
    from ...lowering.repeat import RepeatError

    if calls < 1:
        raise LibraryError(f"--reset-every {calls}: at least one call between resets")
    entries = []
    seen = set()
    for winner in sorted(winners, key=lambda w: w.nbytes):
        if winner.nbytes in seen:
            raise LibraryError(f"{winner.nbytes} bytes: two winners for one size")
        seen.add(winner.nbytes)
        base = defn.trace(world, defn.ranks_per_node,
                          sizes=size_binding(defn, world, winner.nbytes, defn.ranks_per_node), params=winner.variant)
        order = [winner.between] if winner.between in SEPARATORS else []
        order += [b for b in SEPARATORS if b not in order]
        said: dict[str, str] = {}
        chosen = None
        tried = endless
        for between in order:
            chosen = _endless_entry(base, winner, between, calls, timeout, said) if tried else None
            if tried and said[f"{between}, calls without end"].startswith("incomplete"):
                tried = False  # too many states for the proof: the other separators' are no fewer
            if chosen is not None:
                break
            try:  # a kernel per call, as the library launches them
                lowered = lower(base, Build("nvshmem", calls, between, packets=winner.packets,
                                            copy_engine=winner.copy_engine))
            except RepeatError as exc:
                said[between] = f"cannot repeat: {exc}"
                continue
            problem = library_check(lowered.sched, lowered.kernel_starts or {}, calls, timeout)
            said[between] = problem or "verified"
            if problem is None:
                chosen = Entry(winner, between, calls, lowered, said)
                break
        if chosen is None:
            raise LibraryError(f"{_size_text(winner.nbytes)}: {winner.label or winner.variant}: no separator makes "
                               f"{calls} calls with the caller's accesses between them safe: "
                               + "; ".join(f"{b}: {w}" for b, w in said.items()))
        say(f"{_size_text(winner.nbytes)}: {winner.label}: {chosen.between} between calls, "
            + (f"any number of calls verified ({chosen.proof.calls} calls explored, {chosen.proof.states} states): "
               "no reset" if chosen.endless else f"every prefix of {calls} calls verified"))
        entries.append(chosen)
    if not entries:
        raise LibraryError("no winner to emit: tune found no verified variant at any size")
    return entries


def _endless_entry(base: ir.Schedule, winner: Winner, between: str, calls: int, timeout: float | None,
                   said: dict[str, str]) -> Entry | None:
    """The entry of calls without end (no reset), when `check.unbounded` proves any number of calls
    with `between` safe; else None, with the reason in `said`. Copy-engine puts (their signal values are
    the host's, which a CUDA graph cannot move on) and compute ops (their outputs' hash seeds name the
    op's place in the calls) keep a reset every `calls` calls."""
    from ...check.unbounded import check_unbounded
    from ...lowering.repeat import RepeatError, periodic_caller

    key = f"{between}, calls without end"
    if winner.copy_engine:
        said[key] = "not tried: puts on the copy engine take their signal values from the host"
        return None
    if any(isinstance(op, ir.Compute) for p in base.programs for op in p.ops):
        said[key] = "not tried: a compute op's output depends on its place in the calls"
        return None
    period = 2 if between == "alternate" else 1

    def make(k: int):
        lowered = lower(base, Build("nvshmem", k, between, packets=winner.packets))
        return periodic_caller(lowered.sched, lowered.kernel_starts or {}, k, base, between)

    try:
        proof = check_unbounded(make, period, timeout=min(timeout or ENDLESS_TIMEOUT_S, ENDLESS_TIMEOUT_S),
                                max_states=ENDLESS_MAX_STATES)
        lowered = lower(base, Build("nvshmem", 3 * period, between, packets=winner.packets))
    except RepeatError as exc:
        said[key] = f"cannot repeat: {exc}"
        return None
    if not proof.verified:
        said[key] = (proof.reason if proof.reason.startswith("incomplete") else
                     f"not proven ({proof.calls} calls explored): {proof.reason}")
        return None
    said[key] = f"verified for any number of calls ({proof.calls} calls, {proof.states} states explored)"
    entry = Entry(winner, between, calls, lowered, said, endless=period, proof=proof)
    entry.epoch_steps()  # periodic, or LibraryError
    return entry


# ------------------------------------------------------------------------------- the C++ text
def _section(text: str, start: str, stop: str | None, what: str) -> str:
    """The lines of `text` from the one that begins with `start` up to the one that begins with
    `stop` (excluded; None: the end)."""
    lines = text.split("\n")
    try:
        i = next(k for k, line in enumerate(lines) if line.startswith(start))
        j = len(lines) if stop is None else next(k for k, line in enumerate(lines) if k > i and line.startswith(stop))
    except StopIteration:
        raise LibraryError(f"{what}: a marker of the device pieces moved ({start!r} .. {stop!r}); update "
                           "codegen/library/text.py") from None
    return "\n".join(lines[i:j]).rstrip()


def numbers() -> str:
    """support.cuh's dtype codes and its arithmetic (semantics/numeric.py's), without its kernels."""
    support = SUPPORT.read_text()
    return "\n".join([
        _section(support, "enum CwDtype", "static const size_t CW_ITEMSIZE", "support.cuh"),
        _section(support, "// ---------------------------------------------------------------------"
                          "---- numbers (numeric.py)", "// --------------------------------------------------"
                          "---------------------------------- kernels", "support.cuh"),
    ])


def device_pieces() -> str:
    """What the kernels call, without any of a program's host code: support.cuh's dtype and reduce
    codes and its arithmetic (`numbers`), and nvshmem.cuh's device helpers."""
    nv = PRELUDE.read_text()
    return "\n".join([
        numbers(),
        _section(nv, "namespace cg = cooperative_groups;", "#define CW_NV(x)", "nvshmem.cuh"),
        _section(nv, "static const int CW_NV_THREADS", "static int cw_nv_grid", "nvshmem.cuh"),
        _section(nv, "// This block's share", "static uint32_t* cw_nv_marks_gpu", "nvshmem.cuh"),
        _section(nv, "// The block's threads are done", "// One run of a rank's ops", "nvshmem.cuh"),
    ])


def library_name(sched: ir.Schedule) -> str:
    """`cw_<schedule name>`: the file stem and the prefix of every public identifier."""
    problem = ir.name_problem(sched.name)
    if problem is not None:
        raise LibraryError(f"schedule name {sched.name!r} cannot name a library: {problem}")
    return f"cw_{sched.name}"


@dataclass
class _Buffer:
    name: str
    bytes: int
    dtype: str
    role: str


def _buffers(entries: list[Entry]) -> list[_Buffer]:
    """Every buffer name of every size and rank, sorted, at its largest size: one symmetric allocation
    each, shared by the sizes (never two sizes at once: a reset lies between them)."""
    found: dict[str, _Buffer] = {}
    for entry in entries:
        for program in entry.sched.programs:
            for decl in program.buffers:
                cuda.ident("buffer", decl.name)
                nbytes = decl.count * ir.DTYPE_BYTES[decl.dtype]
                kept = found.get(decl.name)
                if kept is None:
                    found[decl.name] = _Buffer(decl.name, nbytes, decl.dtype, decl.role)
                    continue
                if decl.role in ("input", "output", "inout") or kept.role in ("input", "output", "inout"):
                    if (decl.role, decl.dtype) != (kept.role, kept.dtype):
                        raise LibraryError(f"buffer {decl.name} is {kept.role} {kept.dtype} at one size and "
                                           f"{decl.role} {decl.dtype} at another: the caller's buffers must be "
                                           "the same at every size")
                kept.bytes = max(kept.bytes, nbytes)
    return [found[name] for name in sorted(found)]


def _caller(buffers: list[_Buffer]) -> list[_Buffer]:
    """The buffers the caller fills or reads (inputs, outputs), each with a name of its own in upper case
    (the header's `CW_<NAME>_BUF_<BUFFER>`)."""
    found = [b for b in buffers if b.role in ("input", "output", "inout")]
    seen: dict[str, str] = {}
    for b in found:
        other = seen.setdefault(b.name.upper(), b.name)
        if other != b.name:
            raise LibraryError(f"buffers {other} and {b.name} differ only in case: the header names them "
                               f"both {b.name.upper()} (rename one)")
    return found


def describe(entries: list[Entry], provenance: dict) -> dict:
    """The table the dispatcher was made from (`cw_<name>.json`)."""
    return {"library": library_name(entries[0].sched), "world": entries[0].sched.world,
            "reset_every": entries[0].calls, **{k: v for k, v in provenance.items() if k != "say"},
            "sizes": [{"bytes": e.winner.nbytes, "variant": e.winner.variant, "packets": e.winner.packets,
                       "copy_engine": e.winner.copy_engine,
                       "label": e.winner.label, "between": e.between, "measured_between": e.winner.between,
                       "time_us": e.winner.time_us, "nccl_us": e.winner.nccl_us, "measured": e.winner.measured,
                       "timing": e.winner.timing,
                       "calls_without_end": bool(e.endless),
                       "checker": e.said} for e in entries]}


def _upper(name: str) -> str:
    return name.upper()


def _winner_lines(entries: list[Entry]) -> list[str]:
    lines = []
    for e in entries:
        w = e.winner
        time = (f"{w.time_us:.2f} us per call, {'measured' if w.measured else 'predicted, not measured'}"
                if w.time_us is not None else "no time")
        nccl = f", NCCL {w.nccl_us:.2f} us" if w.nccl_us else ""
        nccl += f" ({w.timing})" if w.timing else ""
        moved = "" if e.between == w.between or w.between is None else f" (measured with {w.between})"
        lines.append(f"//   {_size_text(w.nbytes):>9}  {cuda.comment(w.label or w.variant)}; {e.between} between "
                     f"calls{cuda.comment(moved)}; {cuda.comment(time + nccl)}")
    return lines


def _provenance_lines(entries: list[Entry], provenance: dict) -> list[str]:
    measured = all(e.winner.measured for e in entries)
    kind = ("measured winners (CUDA graph, median, bit-exact)" if measured else
            "PREDICTED winners, not measured (tune --dry): rerun tune without --dry on the GPUs to measure them")
    sched = entries[0].sched
    return [
        f"// {cuda.comment(library_name(sched))}: {cuda.comment(sched.name)} at {sched.world} PEs, a size dispatcher "
        "over NVSHMEM kernels. Generated by",
        "// clockworks-dist (clockworks tune --emit); change the schedule or the tune, not this file.",
        f"// Winners: {kind}",
        f"//   from {cuda.comment(provenance.get('source', '?'))} on {cuda.comment(provenance.get('topology', '?'))}; "
        f"schedule file {cuda.comment(provenance.get('file', '?'))}",
        f"//   sha256 {cuda.comment(provenance.get('hash', '?'))}",
        "// Size (bytes per PE of the main buffer) -> kernel:",
        *_winner_lines(entries),
    ]


def header(entries: list[Entry], provenance: dict) -> str:
    """`cw_<name>.h`: the C API."""
    name = library_name(entries[0].sched)
    up = _upper(name)
    caller = _caller(_buffers(entries))
    calls = entries[0].calls
    lines = [
        *_provenance_lines(entries, provenance),
        "//",
        "// Use (every PE, in the same order: each call is collective over the PEs, like an NCCL collective):",
        "//   nvshmem initialised by the caller (e.g. nvshmemx_init_attr with a unique id over MPI), its",
        f"//   symmetric heap at least {up}_HEAP_BYTES (NVSHMEM_SYMMETRIC_SIZE); NVLink multicast off",
        "//   (NVSHMEM_DISABLE_NVLS=1).",
        f"//   {name}_init();                    allocate, size every kernel's grid",
        f"//   {name}_buffer({up}_BUF_..., &p, &n);  the symmetric buffers the caller fills and reads",
        f"//   {name}_run(bytes, stream);        the winner at `bytes` (one of {up}_SIZES), one kernel",
        f"//   {name}_finalize();                before nvshmem_finalize",
        "// Between two calls the caller may write new inputs into the input buffers and read the output",
        "// buffers, by work ordered on the same stream (or after synchronising with it), and nothing else.",
        f"// Every {calls} calls of one size, and whenever the size changes, the library restores the start",
        "// state its checked schedules begin from (a reset: every PE meets, the signal words are zeroed, every",
        "// PE meets again). A call captured into a CUDA graph: the capture's first call begins with a reset,",
        "// and after any capture every call made outside one begins with a reset (a replay may have run).",
        "// Not thread-safe: one host thread calls it.",
        f"#ifndef {up}_H",
        f"#define {up}_H",
        "#include <stddef.h>",
        "#include <cuda_runtime_api.h>  /* cudaStream_t; plain C as well as C++ */",
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
        "",
        "typedef enum {",
        f"  {up}_OK = 0,",
        f"  {up}_ERR_CUDA = 1,      /* a CUDA call failed (the message names it) */",
        f"  {up}_ERR_NVSHMEM = 2,   /* an NVSHMEM call failed, or NVSHMEM is not initialised */",
        f"  {up}_ERR_SIZE = 3,      /* a size that was not tuned: the message lists those that were */",
        f"  {up}_ERR_STATE = 4,     /* called out of order (run before init, init twice, ...) */",
        f"  {up}_ERR_ARGUMENT = 5,  /* a bad argument */",
        f"  {up}_ERR_WORLD = 6      /* NVSHMEM has another number of PEs than the kernels were made for */",
        f"}} {name}_status_t;",
        "",
        "typedef enum {",
        *[f"  {up}_BUF_{_upper(b.name)} = {i},  /* {b.role}, {b.dtype} */" for i, b in enumerate(caller)],
        f"  {up}_NBUFS = {len(caller)}",
        f"}} {name}_buffer_t;",
        "",
        f"#define {up}_WORLD {entries[0].sched.world}",
        f"#define {up}_RESET_EVERY {calls}",
        f"#define {up}_NSIZES {len(entries)}",
        f"#define {up}_SIZES {{{', '.join(f'{e.winner.nbytes}ULL' for e in entries)}}}",
        f"#define {up}_HEAP_BYTES {heap_bytes(entries)}ULL  /* symmetric heap it needs, with room for NVSHMEM's own */",
        "",
        "/* After nvshmem is initialised, on every PE: allocates every buffer (symmetric, collective) and sizes",
        "   every kernel's grid. The current CUDA device must be the one NVSHMEM uses. */",
        f"int {name}_init(void);",
        "/* The buffer `which` of this PE: *ptr (device memory, symmetric) and *bytes (its capacity, for the",
        "   largest size). */",
        f"int {name}_buffer({name}_buffer_t which, void** ptr, size_t* bytes);",
        "/* How many elements of buffer `which` a call of `bytes` reads or writes on this PE (from element 0). */",
        f"int {name}_count(size_t bytes, {name}_buffer_t which, size_t* elements);",
        "/* One call at `bytes` per PE on `stream`: every PE, the same bytes. Asynchronous (stream-ordered). */",
        f"int {name}_run(size_t bytes, cudaStream_t stream);",
        "/* Frees everything (collective: every PE); the stream's work must be finished. */",
        f"int {name}_finalize(void);",
        "/* What the last failing call failed on: the call, the error, the line of the library. */",
        f"const char* {name}_last_error(void);",
        "",
        "#ifdef __cplusplus",
        "}",
        "#endif",
        f"#endif  /* {up}_H */",
    ]
    return "\n".join(lines) + "\n"


def heap_bytes(entries: list[Entry]) -> int:
    """The symmetric heap the library needs: its buffers, each size's signal words, and 64 MiB of room
    for NVSHMEM's own allocations, in 2 MiB pages."""
    total = sum(-(-b.bytes // 4096) * 4096 + 4096 for b in _buffers(entries))
    total += sum(4096 + 8 * _words(e) for e in entries) + (64 << 20)
    return -(-total // (2 << 20)) * (2 << 20)


def _words(entry: Entry) -> int:
    return max(1, max(len(_signal_words(p)) for p in entry.sched.programs))


def _generate_entry(entry: Entry, k: int) -> tuple[list[str], dict]:
    """The kernels of one size (every rank's), and what its host code needs: per rank the plan and the
    kernel struct's fields, and the scratch."""
    sched = entry.sched
    problems = []
    for program in sched.programs:
        for op in program.ops:
            try:
                TARGET.table.lookup(op)
            except Unsupported as exc:
                problems.append(str(exc))
    if problems:
        raise LibraryError(f"{_size_text(entry.winner.nbytes)}: the nvshmem backend cannot generate it: {problems[0]}")
    gen = Gen(sched, TARGET, lowered=entry.program)
    state = gen.state.setdefault("nvshmem", {})
    state["library"] = True
    if entry.endless:
        state["endless"] = (entry.endless, entry.endless)  # (period, the first call of the middle period)
        state["epoch_steps"] = entry.epoch_steps()
    text = [f"namespace cw_size{k} {{  // {_size_text(entry.winner.nbytes)}: {cuda.comment(entry.winner.label)}, "
            f"{entry.between} between calls"]
    for rank in range(sched.world):
        gen.rank = rank
        text += TARGET.rank_function(gen, rank)
    text.append(f"}}  // namespace cw_size{k}")
    return text, {"plans": state["plans"], "fields": state["fields"], "scratch": list(gen.scratch),
                  "sequence": state.get("sequence", {}), "cooperative": state["cooperative"]}


def source(entries: list[Entry], provenance: dict) -> str:
    """`cw_<name>.cu`: the kernels of every size and the host code of the API."""
    name = library_name(entries[0].sched)
    up = _upper(name)
    world = entries[0].sched.world
    buffers = _buffers(entries)
    slot = {b.name: i for i, b in enumerate(buffers)}
    caller = _caller(buffers)
    kernels, hosts, tables = [], [], []
    for k, entry in enumerate(entries):
        text, info = _generate_entry(entry, k)
        kernels += text + [""]
        hosts += _entry_host(entry, k, info, slot)
        tables.append(_entry_row(entry, k, info))
    counts = []
    for entry in entries:
        row = []
        for rank in range(world):
            program = entry.sched.programs[rank]
            row.append("{" + ", ".join(str(_count(program, b.name)) for b in caller) + "}" if caller else "{0}")
        counts.append("{" + ", ".join(row) + "}")
    lines = [
        *_provenance_lines(entries, provenance),
        "//",
        "// Soundness (clockworks_dist/codegen/library/text.py): for each size, the checker proved any number of",
        "// calls safe (calls without end: one kernel for every call, no reset), or verified every prefix of",
        f"// 1 .. {entries[0].calls} calls of the schedule below, each with the caller's accesses between the calls",
        "// (new inputs written before each, outputs read after each), and the library never runs a call beyond",
        "// those without a reset to the state they start from (cwl_reset_kernel). The table says which.",
        f'#include "{name}.h"',
        "#include <cstdint>",
        "#include <cstdio>",
        "#include <cstring>",
        "#include <algorithm>",
        "#include <cuda_runtime.h>",
        "#include <cuda_fp16.h>",
        "#include <cuda_bf16.h>",
        "#include <nvshmem.h>",
        "#include <nvshmemx.h>",
        "#include <cooperative_groups.h>",
        "",
        f"namespace {name}_impl {{  // the library's own: only the API below is for the caller",
        "",
        device_pieces(),
        "",
        *_host_support(up),
        "",
        *kernels,
        *_reset_kernel(),
        "",
        "// ------------------------------------------------------------------------------ buffers and sizes",
        "struct CwlBuffer { const char* name; size_t bytes; void* ptr; };",
        f"CwlBuffer cwl_buffers[] = {{  // every buffer of every size, sorted: allocated in this order on every PE",
        *[f"  {{{cuda.literal(b.name)}, {b.bytes}ULL, nullptr}},  // {b.role}, {b.dtype}" for b in buffers],
        "};",
        f"const int CWL_NBUFFERS = {len(buffers)};",
        f"const int CWL_CALLER[] = {{{', '.join(str(slot[b.name]) for b in caller) or '0'}}};  "
        f"// {up}_BUF_* -> cwl_buffers",
        f"const size_t CWL_COUNTS[{len(entries)}][{world}][{max(1, len(caller))}] = {{{', '.join(counts)}}};  "
        "// elements per size, PE, caller buffer",
        "",
        *_entry_struct(),
        f"CwlSize cwl_sizes[] = {{  // sorted by bytes",
        *tables,
        "};",
        f"const int CWL_NSIZES = {len(entries)};",
        f"const size_t CWL_SIZE_BYTES[] = {{{', '.join(f'{e.winner.nbytes}ULL' for e in entries)}}};",
        "",
        DISPATCH_LOGIC.rstrip(),
        "",
        *hosts,
        *_api(name, up, world, len(caller), len(entries)),
    ]
    return "\n".join(lines).rstrip() + "\n"


def _count(program: ir.Program, buffer: str) -> int:
    try:
        return program.buffer(buffer).count
    except KeyError:
        return 0


def _host_support(up: str) -> list[str]:
    return [
        "// -------------------------------------------------------------------------------------- errors",
        "char cwl_message[512] = \"\";",
        "int cwl_fail(int code, const char* call, const char* why, int line) {",
        "  snprintf(cwl_message, sizeof cwl_message, \"%s failed: %s (library line %d)\", "
        "call, why ? why : \"?\", line);",
        "  return code;",
        "}",
        f"#define CWL_CUDA(x) do {{ cudaError_t e_ = (x); if (e_ != cudaSuccess) \\",
        f"  return cwl_fail({up}_ERR_CUDA, #x, cudaGetErrorString(e_), __LINE__); }} while (0)",
        f"#define CWL_NV(x) do {{ int r_ = (int)(x); if (r_ != 0) {{ char b_[48]; \\",
        "  snprintf(b_, sizeof b_, \"NVSHMEM status %d\", r_); "
        f"return cwl_fail({up}_ERR_NVSHMEM, #x, b_, __LINE__); }} }} while (0)",
        "#define CWL_TRY(x) do { int s_ = (x); if (s_ != 0) return s_; } while (0)",
        "",
        "uint32_t* cwl_marks = nullptr;  // progress words the kernels write (one per block, and word 0)",
        "",
        "// One call's kernel. A kernel none of whose blocks waits for another (no grid-wide sync, no NVSHMEM",
        "// collective: lowering.nvshmem_plan.syncs_grid) is launched plainly (`cooperative` false), whatever",
        "// its grid: it needs no co-resident blocks and no collective launch, and a plain launch starts",
        "// sooner (0.31 us less in a graph on one H200); stream order still runs it after the kernel before",
        "// it has ended, as the checked schedule's call boundary assumes. Any other kernel is cooperative",
        "// (every block resident, for its grid-wide syncs), through NVSHMEM's collective launch; while `s` is",
        "// captured into a CUDA graph, the same kernel and grid directly on `s` with the cooperative",
        "// attribute (as the generated programs do: nvshmem.cuh).",
        "// No launch here carries programmatic dependent launch, so each kernel's first statement",
        "// (cw_nv_after_previous_kernel) returns at once and the kernel starts in plain stream order.",
        "int cwl_launch(const void* kernel, void* args, int grid, cudaStream_t s, bool cooperative) {",
        "  void* params[] = {args};",
        "  if (!cooperative) {",
        "    CWL_CUDA(cudaLaunchKernel(kernel, dim3(grid), dim3(CW_NV_THREADS), params, 0, s));",
        "    return 0;",
        "  }",
        "  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;",
        "  CWL_CUDA(cudaStreamIsCapturing(s, &capture));",
        "  if (capture == cudaStreamCaptureStatusActive) {",
        "    cudaLaunchAttribute cooperative;",
        "    cooperative.id = cudaLaunchAttributeCooperative;",
        "    cooperative.val.cooperative = 1;",
        "    cudaLaunchConfig_t config = {};",
        "    config.gridDim = dim3(grid);",
        "    config.blockDim = dim3(CW_NV_THREADS);",
        "    config.dynamicSmemBytes = 0;",
        "    config.stream = s;",
        "    config.attrs = &cooperative;",
        "    config.numAttrs = 1;",
        "    CWL_CUDA(cudaLaunchKernelExC(&config, kernel, params));",
        "  } else {",
        "    CWL_NV(nvshmemx_collective_launch(kernel, dim3(grid), dim3(CW_NV_THREADS), params, 0, s));",
        "  }",
        "  return 0;",
        "}",
        "",
        "// The largest grid of at most `want` blocks that every kernel of `kernels` keeps resident.",
        "int cwl_grid(const void* const* kernels, int n, int want, int* grid) {",
        "  int device = 0, sms = 0, resident = 1 << 30;",
        "  void* none[] = {nullptr};",
        "  CWL_CUDA(cudaGetDevice(&device));",
        "  CWL_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));",
        "  for (int k = 0; k < n; ++k) {",
        "    int fits = 0;",
        "    CWL_NV(nvshmemx_collective_launch_query_gridsize(kernels[k], dim3(CW_NV_THREADS), none, 0, &fits));",
        "    resident = std::min(resident, fits);",
        "  }",
        f"  if (resident < 1) return cwl_fail({up}_ERR_CUDA, \"nvshmemx_collective_launch_query_gridsize\", "
        "\"not one block of a kernel fits on the GPU\", __LINE__);",
        "  *grid = std::max(1, std::min(want, std::min(sms, resident)));",
        "  return 0;",
        "}",
    ]


def _reset_kernel() -> list[str]:
    return [
        "// ------------------------------------------------------------------------------------- reset",
        "struct CwlArea { void* ptr; size_t bytes; };",
        "struct CwlReset {",
        "  uint64_t* sig; int words; unsigned* arrive; int counters; CwlArea* areas; int nareas;",
        "  int meet_first;  // 0 only right after a size's K-th call (cwl_step's CWL_RESET_AFTER_BLOCK)",
        "  unsigned long long* calls;  // calls without end: the call count and arrivals (else null)",
        "};",
        "// The state every checked schedule starts from, restored before a size's first call, after K of its",
        "// calls, and where a graph may have replayed (cwl_prepare says when). One block.",
        "__global__ void __launch_bounds__(CW_NV_THREADS) cwl_reset_kernel(CwlReset r) {",
        "  // 1. Every PE is past its last call, and every delivery of those calls has landed on every PE",
        "  //    (barrier_all: quiet, then every PE meets): nothing in flight can still write a word zeroed below,",
        "  //    and no PE still polls one. Right after a size's K-th call this holds already: that call's kernel",
        "  //    ended with every block's quiet and every PE meeting (the end of a run, nvshmem.py), so the",
        "  //    meeting is not repeated (meet_first 0).",
        "  if (r.meet_first && threadIdx.x == 0) nvshmem_barrier_all();",
        "  __syncthreads();  // no thread zeroes before thread 0's barrier has returned",
        "  // 2. The start state: every signal word 0 (epochs count calls from it), the arrival counters 0",
        "  //    (left at 0 by every handoff already; zeroed too, so nothing relies on that), every packet area 0",
        "  //    (flag 0, which no put_signal sends). Buffers are not touched: the checked schedules start from",
        "  //    any values in them.",
        "  for (int i = threadIdx.x; i < r.words; i += blockDim.x) r.sig[i] = 0;",
        "  for (int i = threadIdx.x; i < r.counters; i += blockDim.x) r.arrive[i] = 0;",
        "  if (r.calls && threadIdx.x < 2) r.calls[threadIdx.x] = 0;  // calls without end count from 0 again",
        "  for (int a = 0; a < r.nareas; ++a) {",
        "    uint4* p = (uint4*)r.areas[a].ptr;",
        "    for (size_t i = threadIdx.x; i < r.areas[a].bytes / 16; i += blockDim.x) p[i] = make_uint4(0, 0, 0, 0);",
        "  }",
        "  __syncthreads();  // every thread's zeros are stored before thread 0 fences them and meets the others",
        "  // 3. This PE's zeros are visible to every PE (system-scope fence by the thread that then meets the",
        "  //    others; cumulative over the block's stores after the __syncthreads), and every PE meets again:",
        "  //    no PE's first call can signal or send packets to a word before its owner zeroed it.",
        "  if (threadIdx.x == 0) {",
        "    __threadfence_system();",
        "    nvshmem_barrier_all();",
        "  }",
        "}",
    ]


def _entry_struct() -> list[str]:
    return [
        "struct CwlSize {",
        "  size_t bytes;",
        "  const char* label;",
        "  int words;                 // signal words (the most of any PE)",
        "  uint64_t* sig;             // symmetric: this size's own signal words",
        "  unsigned* arrive;          // this PE's arrival counters",
        "  unsigned long long* hash;  // this PE's compute hash slots",
        "  int counters, hashes, want, grid;  // this PE's, set at init",
        "  CwlArea* areas;            // device: the packet areas a reset zeroes",
        "  int nareas;",
        "  char* scratch[8];          // this PE's scratch (staged sources)",
        "  unsigned long long* calls; // calls without end: this PE's calls so far, then the blocks' arrivals",
        "  int every;                 // the calls between two resets (0: calls without end, no reset)",
        "};",
    ]


def _entry_row(entry: Entry, k: int, info: dict) -> str:
    label = f"{entry.winner.label or entry.winner.variant}, {entry.between} between calls"
    return (f"  {{{entry.winner.nbytes}ULL, {cuda.literal(label)}, {_words(entry)}, nullptr, nullptr, nullptr, "
            f"0, 0, 0, 1, nullptr, 0, {{}}, nullptr, {0 if entry.endless else entry.calls}}},")


def _entry_host(entry: Entry, k: int, info: dict, slot: dict[str, int]) -> list[str]:
    """Per size: `cwl_setup_<k>` (this PE's counters, scratch, packet areas, grid) and `cwl_call_<k>`
    (one call's kernel: its struct filled from the library's buffers)."""
    sched = entry.sched
    world = sched.world
    plans, fields = info["plans"], info["fields"]
    setup = [f"int cwl_setup_{k}(int pe) {{  // {_size_text(entry.winner.nbytes)}",
             f"  CwlSize& z = cwl_sizes[{k}];", "  switch (pe) {"]
    call = [f"int cwl_call_{k}(int pe, int call, cudaStream_t s) {{", f"  CwlSize& z = cwl_sizes[{k}];",
            "  switch (pe) {"]
    for rank in range(world):
        plan = plans[rank]
        names, scratch = fields[rank]
        items = [item for item in info["scratch"] if item.rank == rank]
        if len(items) > 8:
            raise LibraryError(f"{_size_text(entry.winner.nbytes)}: rank {rank} needs {len(items)} scratch copies; "
                               "the library keeps at most 8")
        kernels = kernel_names(rank, plan.kernels) if not entry.endless else [f"cw_nv_rank{rank}_every_call"]
        colls = info["cooperative"][rank]
        if entry.endless:  # the one kernel runs the middle period's calls: cooperative if any of them is
            colls = [any(colls[entry.endless:2 * entry.endless])]
        sequence = info.get("sequence", {}).get(rank, [])
        engine = any(kind == "host" for kind, _what, _op in sequence)
        if plan.kernels != (3 * entry.endless or entry.calls) and not engine:
            raise LibraryError(f"{_size_text(entry.winner.nbytes)}: rank {rank} has {plan.kernels} kernels for "
                               f"{entry.calls} calls")
        areas = [d for d in sched.programs[rank].buffers if d.role == "packets"]
        setup += [f"    case {rank}: {{",
                  f"      static const void* const kernels[] = {{"
                  f"{', '.join(f'(const void*)cw_size{k}::{n}' for n in kernels)}}};",
                  f"      z.counters = {plan.counters}; z.hashes = {plan.hash_slots}; "
                  f"z.want = {min(plan.blocks, MAX_BLOCKS)};",
                  f"      CWL_TRY(cwl_grid(kernels, {len(kernels)}, z.want, &z.grid));"]
        for i, item in enumerate(items):
            setup.append(f"      CWL_CUDA(cudaMalloc((void**)&z.scratch[{i}], {max(item.nbytes, 1)}));  "
                         f"// {cuda.comment(item.why)}")
        if areas:
            area_rows = ', '.join(f'{{cwl_buffers[{slot[d.name]}].ptr, {d.count * ir.DTYPE_BYTES[d.dtype]}ULL}}'
                                  for d in areas)
            setup += [f"      CwlArea host[] = {{{area_rows}}};",
                      "      CWL_CUDA(cudaMalloc((void**)&z.areas, sizeof host));",
                      "      CWL_CUDA(cudaMemcpy(z.areas, host, sizeof host, cudaMemcpyHostToDevice));",
                      f"      z.nareas = {len(areas)};"]
            for d in areas:  # packets reach the peer by stores (nvshmem_ptr): over NVLink only
                setup += [f"      for (int peer = 0; peer < {world}; ++peer)",
                          f"        if (peer != pe && !nvshmem_ptr(cwl_buffers[{slot[d.name]}].ptr, peer))",
                          f"          return cwl_fail({_upper(library_name(sched))}_ERR_NVSHMEM, \"nvshmem_ptr\", "
                          "\"a peer's packet area cannot be reached by stores (not over NVLink): emit without "
                          "packets\", __LINE__);"]
        for kind, _lines, m in sequence:  # a copy engine's peer is reached over NVLink (nvshmem.py's setup)
            if kind == "host":
                op = sched.programs[rank].ops[m]
                setup += [f"      if (!nvshmem_ptr(cwl_buffers[{slot[op.dst.buffer]}].ptr, {op.pe}))",
                          f"        return cwl_fail({_upper(library_name(sched))}_ERR_NVSHMEM, \"nvshmem_ptr\", "
                          f"\"op {m} puts to PE {op.pe} on the copy engine, which is not reached over NVLink: emit "
                          "without the copy engine\", __LINE__);"]
        setup += ["      break;", "    }"]
        fill = []
        for name in names:
            decl = sched.programs[rank].buffer(name)
            ctype = cuda.C_TYPE[decl.dtype]
            fill.append(f"a.{cuda.ident('buffer', name)} = ({ctype}*)cwl_buffers[{slot[name]}].ptr;")
        for i, sname in enumerate(scratch):
            fill.append(f"a.{sname} = z.scratch[{i}];")
        call += [f"    case {rank}: {{",
                 f"      static const void* const kernels[] = {{"
                 f"{', '.join(f'(const void*)cw_size{k}::{n}' for n in kernels)}}};",
                 f"      static const bool cooperative[] = {{{', '.join('true' if c else 'false' for c in colls)}}};"
                 "  // the kernels that sync their grid or call an NVSHMEM collective",
                 f"      cw_size{k}::CwNvArgs{rank} a;",
                 *[f"      {line}" for line in fill],
                 "      a.sig = z.sig; a.marks = cwl_marks; a.arrive = z.arrive; a.hash = z.hash;",
                 *(["      a.calls = z.calls; a.calls_arrive = (unsigned*)(z.calls + 1);",
                    "      (void)call;  // the kernel counts its calls itself (device memory, in stream order)",
                    "      return cwl_launch(kernels[0], &a, z.grid, s, cooperative[0]);"] if entry.endless else []),
                 *([] if entry.endless else _call_sequence(sequence, entry.starts.get(rank, []), entry.calls)
                   if engine else ["      return cwl_launch(kernels[call], &a, z.grid, s, cooperative[call]);"]),
                 "    }"]
    setup += ["  }", "  return 0;", "}", ""]
    call += ["  }", "  return 0;", "}", ""]
    return setup + call


def _call_sequence(sequence: list, starts: list[int], calls: int) -> list[str]:
    """A call's kernels and the copy engine's puts between them, in stream order (`nvshmem.py`'s
    `sequence`): each item belongs to the call whose ops it begins with (`starts`: the first op of
    each call after the first); a kernel with no op (the run's end) to the last call."""
    per_call: list[list[str]] = [[] for _ in range(calls)]
    for kind, what, m in sequence:
        call = calls - 1 if m is None else sum(1 for start in starts if start <= m)
        if kind == "kernel":
            per_call[call].append(f"          CWL_TRY(cwl_launch(kernels[{what}], &a, z.grid, s, "
                                  f"cooperative[{what}]));")
        else:
            per_call[call] += ["        " + line for line in what if line.strip()]
            per_call[call].append("          CWL_CUDA(cudaGetLastError());  // the put's copy and signal were issued")
    lines = ["      switch (call) {"]
    for call, body in enumerate(per_call):
        lines += [f"        case {call}:", *body, "          return 0;"]
    return lines + ["      }", "      return 0;"]


# The dispatcher's decisions, plain C++ without CUDA: the library includes it, and tests compile and
# run it alone (tests/test_dispatch.py).
DISPATCH_LOGIC = (
    r"""// ------------------------------------------------- the dispatcher's decisions (plain C++, no CUDA)
// The size whose kernels a call of `bytes` per PE runs: exactly a tuned one (-1: none; the kernels have
// their sizes compiled in, so no other size's kernels may stand in).
inline int cwl_find_in(const size_t* sizes, int n, size_t bytes) {
  for (int k = 0; k < n; ++k)
    if (sizes[k] == bytes) return k;
  return -1;
}
// Why `bytes` is refused: the size, and every tuned one.
inline void cwl_size_message(char* out, size_t cap, const size_t* sizes, int n, size_t bytes) {
  int used = snprintf(out, cap, "%zu bytes per PE was not tuned (the kernels have their sizes compiled in); the %d "
                      "tuned sizes: ", bytes, n);
  for (int k = 0; k < n && used > 0 && (size_t)used + 24 < cap; ++k)
    used += snprintf(out + used, cap - used, "%s%zu", k ? ", " : "", sizes[k]);
  if (used > 0 && (size_t)used + 40 < cap) snprintf(out + used, cap - used, " (tune and emit this size)");
}
struct CwlState {
  int current = -1;                // the size whose calls run since the last reset (-1: a reset is due)
  int calls = 0;                   // its calls since that reset
  bool captured = false;           // a call was ever captured into a CUDA graph
  unsigned long long capture = 0;  // the capture the last call was in (0: none)
};
// Before a call of size k: whether the start state must be restored first, and *call, the call's place
// in the checked prefix it belongs to (0 .. every - 1). Advances the state past the call. The checker
// verified every prefix of `every` calls of one size from the start state, so a reset is due before a
// size's first call, after `every` of its calls, at a capture's first call (a graph may replay after
// anything), and outside a capture once any call was captured (a replay may have run since the last
// call, and the host cannot see it); with `every` 0 (calls without end, proven for any number), never
// for the number of calls. Returns CWL_KEEP (no reset), CWL_RESET (a reset from a state not
// known here: the PEs meet first) or CWL_RESET_AFTER_BLOCK (right after the `every`-th call of this
// size, whose kernel ended with every block's quiet and every PE meeting: that meeting is not repeated).
enum { CWL_KEEP = 0, CWL_RESET = 1, CWL_RESET_AFTER_BLOCK = 2 };
inline int cwl_step(CwlState& st, int k, bool capturing, unsigned long long id, int every, int* call) {
  bool unknown = st.current != k || (capturing && id != st.capture) || (!capturing && st.captured);
  bool full = !unknown && every > 0 && st.calls >= every;  // every 0: calls without end, never full
  st.capture = capturing ? id : 0;
  if (capturing) st.captured = true;
  if (unknown || full) {
    st.current = k;
    st.calls = 0;
  }
  *call = every > 0 ? st.calls++ : 0;
  return unknown ? CWL_RESET : (full ? CWL_RESET_AFTER_BLOCK : CWL_KEEP);
}
""")


def _api(name: str, up: str, world: int, ncaller: int, nsizes: int) -> list[str]:
    return [
        "// ------------------------------------------------------------------------------------ the API",
        "typedef int (*CwlFn)(int, int, cudaStream_t);",
        f"const CwlFn cwl_calls_of[] = {{{', '.join(f'cwl_call_{k}' for k in range(nsizes))}}};",
        "int cwl_setup_all(int pe) {",
        *[f"  CWL_TRY(cwl_setup_{k}(pe));" for k in range(nsizes)],
        "  return 0;",
        "}",
        "bool cwl_ready = false;",
        "int cwl_pe = -1;",
        "CwlState cwl_state;",
        "cudaStream_t cwl_stream = nullptr;",
        "bool cwl_have_stream = false;",
        "cudaEvent_t cwl_done = nullptr;",
        "",
        "int cwl_find(size_t bytes) { return cwl_find_in(CWL_SIZE_BYTES, CWL_NSIZES, bytes); }",
        "",
        "int cwl_size_error(size_t bytes) {",
        "  cwl_size_message(cwl_message, sizeof cwl_message, CWL_SIZE_BYTES, CWL_NSIZES, bytes);",
        f"  return {up}_ERR_SIZE;",
        "}",
        "",
        f"}}  // namespace {name}_impl",
        f"using namespace {name}_impl;",
        "",
        f'extern "C" const char* {name}_last_error(void) {{ return cwl_message; }}',
        "",
        f'extern "C" int {name}_init(void) {{',
        f"  if (cwl_ready) return cwl_fail({up}_ERR_STATE, "
        f"\"{name}_init\", \"called twice (finalize first)\", __LINE__);",
        f"  if (nvshmemx_init_status() < NVSHMEM_STATUS_IS_INITIALIZED) return cwl_fail({up}_ERR_NVSHMEM, "
        f"\"{name}_init\", \"NVSHMEM is not initialised: initialise it first (nvshmemx_init_attr)\", __LINE__);",
        f"  if (nvshmem_n_pes() != {world}) {{",
        "    char b[160];",
        f"    snprintf(b, sizeof b, \"NVSHMEM has %d PEs; these kernels were made for {world}\", nvshmem_n_pes());",
        f"    return cwl_fail({up}_ERR_WORLD, \"{name}_init\", b, __LINE__);",
        "  }",
        "  cwl_pe = nvshmem_my_pe();",
        "  // symmetric: every PE allocates the same sizes in the same order (the tables are the same on every PE)",
        "  for (int i = 0; i < CWL_NBUFFERS; ++i) {",
        "    cwl_buffers[i].ptr = nvshmem_malloc(std::max<size_t>(cwl_buffers[i].bytes, 16));",
        "    if (!cwl_buffers[i].ptr) {",
        "      char b[200];",
        "      snprintf(b, sizeof b, \"nvshmem_malloc of %zu bytes for buffer %s: "
        "the symmetric heap is too small (set \"",
        "               \"NVSHMEM_SYMMETRIC_SIZE to at least %llu)\", "
        f"cwl_buffers[i].bytes, cwl_buffers[i].name, {up}_HEAP_BYTES);",
        f"      return cwl_fail({up}_ERR_NVSHMEM, \"nvshmem_malloc\", b, __LINE__);",
        "    }",
        "  }",
        "  for (int k = 0; k < CWL_NSIZES; ++k) {",
        "    cwl_sizes[k].sig = (uint64_t*)nvshmem_calloc(cwl_sizes[k].words, sizeof(uint64_t));",
        f"    if (!cwl_sizes[k].sig) return cwl_fail({up}_ERR_NVSHMEM, \"nvshmem_calloc\", \"no room for the signal \"",
        "                                                 "
        "\"words in the symmetric heap (NVSHMEM_SYMMETRIC_SIZE)\", __LINE__);",
        "  }",
        "  CWL_TRY(cwl_setup_all(cwl_pe));",
        "  int most = 1;",
        "  for (int k = 0; k < CWL_NSIZES; ++k) {",
        "    CwlSize& z = cwl_sizes[k];",
        "    CWL_CUDA(cudaMalloc((void**)&z.arrive, std::max(z.counters, 1) * sizeof(unsigned)));",
        "    CWL_CUDA(cudaMemset(z.arrive, 0, std::max(z.counters, 1) * sizeof(unsigned)));",
        "    CWL_CUDA(cudaMalloc((void**)&z.hash, std::max(z.hashes * z.grid, 1) * sizeof(unsigned long long)));",
        "    if (z.every == 0) {  // calls without end: the call count (word 0) and the blocks' arrivals (word 1)",
        "      CWL_CUDA(cudaMalloc((void**)&z.calls, 2 * sizeof(unsigned long long)));",
        "      CWL_CUDA(cudaMemset(z.calls, 0, 2 * sizeof(unsigned long long)));",
        "    }",
        "    most = std::max(most, z.grid);",
        "  }",
        "  CWL_CUDA(cudaMalloc((void**)&cwl_marks, (1 + most) * sizeof(uint32_t)));",
        "  CWL_CUDA(cudaMemset(cwl_marks, 0, (1 + most) * sizeof(uint32_t)));",
        "  CWL_CUDA(cudaEventCreateWithFlags(&cwl_done, cudaEventDisableTiming));",
        "  CWL_CUDA(cudaDeviceSynchronize());  // the zeroed counters and words are in memory before the PEs meet",
        "  nvshmem_barrier_all();  // every PE's allocations and zeroed words are in place before any call",
        "  cwl_state = CwlState();",
        "  cwl_ready = true;",
        "  return 0;",
        "}",
        "",
        f'extern "C" int {name}_buffer({name}_buffer_t which, void** ptr, size_t* bytes) {{',
        f"  if (!cwl_ready) return cwl_fail({up}_ERR_STATE, \"{name}_buffer\", \"call {name}_init first\", __LINE__);",
        f"  if ((int)which < 0 || (int)which >= {max(ncaller, 0)} || !ptr) return cwl_fail({up}_ERR_ARGUMENT, "
        f"\"{name}_buffer\", \"no such buffer (use {up}_BUF_*), or ptr is null\", __LINE__);",
        "  *ptr = cwl_buffers[CWL_CALLER[which]].ptr;",
        "  if (bytes) *bytes = cwl_buffers[CWL_CALLER[which]].bytes;",
        "  return 0;",
        "}",
        "",
        f'extern "C" int {name}_count(size_t bytes, {name}_buffer_t which, size_t* elements) {{',
        f"  if (!cwl_ready) return cwl_fail({up}_ERR_STATE, \"{name}_count\", \"call {name}_init first\", __LINE__);",
        f"  if ((int)which < 0 || (int)which >= {max(ncaller, 0)} || !elements) return cwl_fail({up}_ERR_ARGUMENT, "
        f"\"{name}_count\", \"no such buffer (use {up}_BUF_*), or elements is null\", __LINE__);",
        "  int k = cwl_find(bytes);",
        "  if (k < 0) return cwl_size_error(bytes);",
        "  *elements = CWL_COUNTS[k][cwl_pe][which];",
        "  return 0;",
        "}",
        "",
        f"namespace {name}_impl {{",
        "// Before a call of size k on stream s: whether the state is one a checked prefix goes on from, else",
        "// a reset first (see the file's head). Returns 0 or an error.",
        "int cwl_prepare(int k, cudaStream_t s, int* call) {",
        "  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;",
        "  unsigned long long id = 0;",
        "  CWL_CUDA(cudaStreamGetCaptureInfo(s, &status, &id));",
        "  bool capturing = status == cudaStreamCaptureStatusActive;",
        "  if (status == cudaStreamCaptureStatusInvalidated) "
        f"return cwl_fail({up}_ERR_CUDA, \"cudaStreamGetCaptureInfo\", "
        "\"the stream's capture was invalidated\", __LINE__);",
        "  if (cwl_have_stream && s != cwl_stream) {",
        f"    if (capturing) return cwl_fail({up}_ERR_STATE, \"{name}_run\", \"a capture on another stream than the \"",
        "                                    \"calls before it: capture on the same stream\", __LINE__);",
        "    // the calls before ran on another stream: this one waits for them (stream order is what orders",
        "    // one call's kernel after the one before)",
        "    CWL_CUDA(cudaEventRecord(cwl_done, cwl_stream));",
        "    CWL_CUDA(cudaStreamWaitEvent(s, cwl_done, 0));",
        "  }",
        "  cwl_stream = s;",
        "  cwl_have_stream = true;",
        "  int how = cwl_step(cwl_state, k, capturing, id, cwl_sizes[k].every, call);",
        "  if (how == CWL_KEEP) return 0;",
        "  CwlSize& z = cwl_sizes[k];",
        "  CwlReset r = {z.sig, z.words, z.arrive, std::max(z.counters, 1), z.areas, z.nareas, how == CWL_RESET, "
        "z.calls};",
        "  return cwl_launch((const void*)cwl_reset_kernel, &r, 1, s, true);  // it calls nvshmem_barrier_all",
        "}",
        f"}}  // namespace {name}_impl",
        "",
        f'extern "C" int {name}_run(size_t bytes, cudaStream_t stream) {{',
        f"  if (!cwl_ready) return cwl_fail({up}_ERR_STATE, \"{name}_run\", \"call {name}_init first\", __LINE__);",
        "  int k = cwl_find(bytes);",
        "  if (k < 0) return cwl_size_error(bytes);",
        "  int call = 0;",
        "  int status = cwl_prepare(k, stream, &call);",
        "  if (status == 0) status = cwl_calls_of[k](cwl_pe, call, stream);",
        "  if (status == 0) {",
        "    cudaError_t e = cudaGetLastError();",
        "    if (e != cudaSuccess) "
        f"status = cwl_fail({up}_ERR_CUDA, \"a kernel launch\", cudaGetErrorString(e), __LINE__);",
        "  }",
        "  if (status != 0) cwl_state.current = -1;  // the state is unknown after a failure: the next call resets",
        "  return status;",
        "}",
        "",
        f'extern "C" int {name}_finalize(void) {{',
        f"  if (!cwl_ready) return cwl_fail({up}_ERR_STATE, \"{name}_finalize\", \"not initialised\", __LINE__);",
        "  CWL_CUDA(cudaDeviceSynchronize());  // this PE's calls have finished before anything is freed",
        "  nvshmem_barrier_all();  // no PE frees what a peer's last call may still touch",
        "  for (int k = 0; k < CWL_NSIZES; ++k) {",
        "    CwlSize& z = cwl_sizes[k];",
        "    nvshmem_free(z.sig);",
        "    CWL_CUDA(cudaFree(z.arrive));",
        "    CWL_CUDA(cudaFree(z.hash));",
        "    if (z.areas) CWL_CUDA(cudaFree(z.areas));",
        "    for (char* p : z.scratch) if (p) CWL_CUDA(cudaFree(p));",
        "    if (z.calls) CWL_CUDA(cudaFree(z.calls));",
        "    z = CwlSize{z.bytes, z.label, z.words, nullptr, nullptr, nullptr, 0, 0, 0, 1, nullptr, 0, {}, nullptr, "
        "z.every};",
        "  }",
        "  for (int i = CWL_NBUFFERS - 1; i >= 0; --i) "
        "{ nvshmem_free(cwl_buffers[i].ptr); cwl_buffers[i].ptr = nullptr; }",
        "  CWL_CUDA(cudaFree(cwl_marks));",
        "  CWL_CUDA(cudaEventDestroy(cwl_done));",
        "  cwl_marks = nullptr;",
        "  cwl_ready = false;",
        "  cwl_have_stream = false;",
        "  cwl_state = CwlState();",
        "  return 0;",
        "}",
    ]


def _size_text(nbytes: int) -> str:
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"
