"""`clockworks tune`: search a schedule family (`cw.param`, `cw.choice`) for the fastest variant per size.

The pipeline, top to bottom (`tune`):
1. enumerate the variants (`ScheduleDef.variants()`);
2. check each with the model checker at the world size: a variant that is not verified is rejected
   with its verdict and first error, and is never predicted or run;
3. predict each verified variant at each size on the topology (as `clockworks predict` does) and
   rank them per size, naming the simulator's bottleneck of each;
4. without `dry`: build and measure the top K per size with `runtime.validate` (bit-exact check on)
   and accept a variant only if it beats the best so far by more than the noise (`accept`).

Lowerings (`packets`): each variant is also tried with its put_signals of at most N bytes sent as
flag-in-data packets (`lowering.packets`), for each N given. Such a candidate is the rewritten
schedule: that is what is checked, predicted and measured. It takes part only at the sizes where
the rewrite lowers at least one put_signal (above N it is the variant itself). The predictor does not
model what packets save (the separate signal's round trip) or cost (twice the bytes on the wire): it
simulates the rewritten schedule's ops as they are. So each lowering is ranked on its own and its top
K measured; the measurements decide.

Copy-engine puts (`copy_engine`): each variant is also tried with its puts and put_signals of at least N
bytes issued by the host on the copy engine (`lowering.nvshmem_plan.copy_engine_ops`), for each N given.
The schedule is the variant itself (checked as it is: the lowering only adds order), so only the
generated code differs; it takes part at the sizes where at least one put is that large. It too is
ranked on its own and its top K measured.

What is predicted is what `validate` measures: the timed run of the generated NVSHMEM program
(`perf.program`: the schedule's ops and the program's own costs, its copy-engine puts priced as such,
a run of calls with a kernel per call or one kernel for all as built), per call; a packets candidate's
is its rewritten schedule's run, its put_signals sent as packets (`Lowered.packets`, read from
`RunConditions.program`: one crossing of twice the bytes, no fence, no separate signal; in no fit, 17%
median error on the measured packets cells, scripts/results/bench_predict_generated.md). Each try
records it (`predicted_as`); a try remembered with the schedule's own ops predicted (before this) is
predicted again.

The library (`--emit DIR`, `emit`): the winner at each size, measured (or predicted in a dry run,
labelled so), as `cw_<name>.h` + `cw_<name>.cu` with a size dispatcher (`codegen.library`), from the
tune just made or from results folders made before (`--from`); each winner is checked again for the
library (every prefix of K calls, with the caller's accesses between calls).

Every try is recorded in `tune_memory.json` in the output folder, keyed by the schedule file's hash,
the schedule, the variant, its lowering, the world and the topology, so a rerun skips what was
already decided. The results go to `tune.json` and `tune.md`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

from . import hygiene
from .dsl import ScheduleDef, load_file, params
from .errors import ClockworksError, ScheduleError
from .lowering import Build, lower

MEMORY_FILE = "tune_memory.json"
MEMORY_VERSION = 1
DEFAULT_NOISE = 0.02  # the threshold: a measured gain under 2% is noise
DEFAULT_TOP = 3
CHECK_TIMEOUT_S = 60.0
CHECK_MAX_STATES = 1_000_000
# The most candidates (variants times lowerings) one tune tries without --max-variants.
MAX_VARIANTS = 256
NO_GPU = "no GPU visible: use --dry (check, predict and rank only)"


class TuneError(ClockworksError):
    """Bad input to `clockworks tune` (exit 2)."""


@dataclass(frozen=True)
class Measurement:
    """A measured time: the median over repeated runs, and their relative spread ((max - min) / median)."""

    time_us: float
    spread: float = 0.0


def accept(best: Measurement | None, candidate: Measurement, noise: float = DEFAULT_NOISE) -> tuple[bool, str]:
    """Whether `candidate` replaces `best`: only if it is faster by at least the noise threshold,
    max(`noise`, the spread of either measurement); the reason, in words."""
    if best is None:
        return True, "the first measured variant"
    threshold = max(noise, best.spread, candidate.spread)
    gain = (best.time_us - candidate.time_us) / best.time_us if best.time_us > 0 else 0.0
    if gain <= 0:
        return False, f"{-gain:.1%} slower than the best so far ({best.time_us:.2f} us)"
    if gain >= threshold:
        return True, f"{gain:.1%} faster than the best so far ({best.time_us:.2f} us), above the noise {threshold:.1%}"
    return False, (f"{gain:+.1%} against the best so far ({best.time_us:.2f} us) does not clear the noise "
                   f"{threshold:.1%}")


def gpus_visible() -> int:
    """GPUs that `nvidia-smi -L` lists (0 without nvidia-smi or a driver)."""
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        from .calibrate.runner import bounded_run

        done = bounded_run(["nvidia-smi", "-L"], 30)
        if done is None:
            return 0
        listing = subprocess.CompletedProcess(["nvidia-smi", "-L"], done[0], done[1], done[2])
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in listing.stdout.splitlines() if line.startswith("GPU "))


# ------------------------------------------------------------------------------------- memory
def file_hash(path: str) -> str:
    """sha256 of the schedule file: an edited file is a new family, nothing of the old one is reused."""
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def memory_key(digest: str, schedule: str, binding: dict, world: int, topology: str, calls: int = 1,
               packets: int = 0, fuse_calls: bool = False, copy_engine: int = 0) -> str:
    key = {"file": digest, "schedule": schedule, "variant": binding, "world": world, "topology": topology}
    if calls > 1:  # a run of back-to-back calls is another measurement (one call keeps the old keys)
        key["calls"] = calls
        if not fuse_calls:  # a kernel per call: not what a memory of one kernel for the calls measured
            key["kernels"] = "per call"
    if packets:  # a lowering is another candidate (none keeps the old keys)
        key["packets"] = packets
    if copy_engine:
        key["copy_engine"] = copy_engine
    return json.dumps(key, sort_keys=True)


def candidate_label(binding: dict, packets: int = 0, copy_engine: int = 0) -> str:
    """`ALGO=oneshot`, `ALGO=oneshot, packets <= 32 KiB` or `ALGO=twoshot, copy engine >= 16 MiB`."""
    return (params.label(binding) + (f", packets <= {_size_text(packets)}" if packets else "")
            + (f", copy engine >= {_size_text(copy_engine)}" if copy_engine else ""))


def _lowered_at(defn: ScheduleDef, binding: dict, world: int, nbytes: int, calls: int, between: str,
                packets: int, copy_engine: int = 0) -> int:
    """How many signal words the packets rewrite lowers at `nbytes`, or how many puts go on the copy
    engine (0: the candidate is the variant itself)."""
    from .perf.predict import size_binding

    sched = defn.trace(world, defn.ranks_per_node, sizes=size_binding(defn, world, nbytes, defn.ranks_per_node),
                       params=binding)
    # the copy engine's puts of the run of calls alone; else the packets rewrite's words
    build = Build("nvshmem", calls, between, copy_engine=copy_engine) if copy_engine else \
        Build("nvshmem", calls, between, packets=packets)
    lowered = lower(sched, build)
    if copy_engine:
        return sum(len(ops) for ops in lowered.engine_ops.values())
    return len(lowered.packets.channels)


def load_memory(path: str) -> dict:
    """The memory file's tries by key (empty when there is none yet)."""
    if not os.path.exists(path):
        return {}
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError) as exc:
        raise TuneError(f"{path}: cannot read the tune memory ({exc}); move it away to start afresh") from None
    if not isinstance(data, dict) or data.get("version") != MEMORY_VERSION or not isinstance(data.get("tries"), list):
        raise TuneError(f"{path}: not a tune memory of version {MEMORY_VERSION}; move it away to start afresh")
    # a try of K calls records whether they were fused into one kernel; tries from before a kernel per
    # call was the default do not, and theirs were fused
    return {memory_key(t["file"], t["schedule"], t["variant"], t["world"], t["topology"], t.get("calls", 1),
                       t.get("packets", 0), t.get("fuse_calls", True), t.get("copy_engine", 0)): t
            for t in data["tries"]}


def save_memory(path: str, tries: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump({"version": MEMORY_VERSION, "tries": list(tries.values())}, handle, indent=2)
        handle.write("\n")
    os.replace(tmp, path)  # a crash mid-write keeps the last memory


# -------------------------------------------------------------------------------- the steps
def check_variant(defn: ScheduleDef, binding: dict, world: int, timeout: float | None,
                  packets: int = 0) -> tuple[str, str | None]:
    """The checker's verdict on one variant at `world` ranks (rewritten by the `packets` lowering when
    given), and its first error (None if verified)."""
    from .check import check

    try:
        sched = _trace_bounded(defn, world, binding, timeout)
    except ScheduleError as exc:
        return "error", str(exc)
    if packets:
        sched = lower(sched, Build("nvshmem", packets=packets)).sched
    result = check(sched, timeout=timeout, max_states=CHECK_MAX_STATES)
    if result.verdict == "verified" and result.complete:
        return "verified", None
    if result.errors:
        first = result.errors[0]
        return result.verdict, f"{first.kind}: {first.message}"
    return "incomplete", f"the check did not finish (stopped by {result.stopped_by})"


def _trace_bounded(defn: ScheduleDef, world: int, binding: dict, timeout: float | None):
    """`defn` traced at `world` with `binding`, within `timeout` seconds (SIGALRM, `dsl.guard`): a
    variant whose tracing loops is a `ScheduleError` (the variant is rejected); code that defeats the
    bound ends the process (exit 3)."""
    from .dsl import guard

    def stuck() -> None:
        guard.end_process(3, f"clockworks: error: incomplete: tracing {candidate_label(binding)} of {defn.name} did "
                             f"not finish within {timeout:g} s (--timeout), and it does not let itself be stopped\n")

    try:
        with guard.time_bound(timeout, on_stuck=stuck, grace=5.0):
            return defn.trace(world, params=binding)
    except guard.TimeUp:
        raise ScheduleError(f"tracing did not finish within {timeout:g} s (--timeout): an endless loop?",
                            file=defn.loc.file, line=defn.loc.line) from None


def variant_count(defn: ScheduleDef) -> int:
    """How many variants `defn`'s family has: the product of its choices' counts (nothing listed)."""
    return math.prod(len(p.values) for p in defn.params)


def iter_variants(defn: ScheduleDef):
    """The variants of `defn`, one at a time (`ScheduleDef.variants` lists them all)."""
    names = [p.name for p in defn.params]
    for combo in itertools.product(*(p.values for p in defn.params)):
        yield dict(zip(names, combo))


def check_calls(defn: ScheduleDef, binding: dict, world: int, calls: int, timeout: float | None,
                packets: int = 0) -> tuple:
    """For `calls` back-to-back calls: the cheapest separator the checker verifies, trying nothing,
    then two copies by call parity, then a sync_all, then a barrier_all between the calls
    (`lowering.lower` with a `Build` of `calls` calls: `lowering.repeat`, the result rewritten by the
    `packets` lowering when given). (verdict, first error, the separator or None, {separator: what the
    checker said})."""
    from .check import check
    from .lowering.repeat import BETWEEN, RepeatError

    try:
        base = _trace_bounded(defn, world, binding, timeout)
    except ScheduleError as exc:
        return "error", str(exc), None, {}
    said: dict[str, str] = {}
    for between in reversed(BETWEEN):  # none, sync, barrier: the cheapest first
        try:
            sched = lower(base, Build("nvshmem" if packets else "nccl", calls, between, packets=packets)).sched
        except RepeatError as exc:
            return "error", str(exc), None, said
        result = check(sched, timeout=timeout, max_states=CHECK_MAX_STATES)
        if result.verdict == "verified" and result.complete:
            said[between] = "verified"
            return "verified", None, between, said
        first = result.errors[0] if result.errors else None
        said[between] = (f"{result.verdict}: {first.kind}: {first.message}" if first else
                         f"incomplete: the check did not finish (stopped by {result.stopped_by})")
    return "violated", f"no separator makes {calls} back-to-back calls safe: {said['barrier']}", None, said


# What a candidate's prediction times: the generated NVSHMEM program's timed run (`perf.program`).
PREDICTED_AS = "nvshmem program"


def predict_variant(defn: ScheduleDef, binding: dict, topo, world: int, sizes: list[int],
                    mode: str = "graph", calls: int = 1, between: str = "barrier",
                    packets: int = 0, *, program: str | None = None, copy_engine: int = 0,
                    fuse_calls: bool = False) -> dict[str, dict]:
    """Predicted time (per call), busbw and bottleneck of one variant (rewritten by the `packets`
    lowering when given) at each size (keys: bytes, as text for JSON): the timed run of its generated
    `program` ("nvshmem"; `copy_engine`: its puts of at least that many bytes on the copy engine; a
    kernel per call of a run of `calls` unless `fuse_calls`), or with `program` None the schedule's own
    ops."""
    from .perf.predict import bound, predict_sizes

    # the K-call schedule, rewritten as validate builds its program (`lowering.lower`)
    build = Build(program or ("nvshmem" if packets or copy_engine else "nccl"), calls, between, fuse_calls, packets,
                  copy_engine if program == "nvshmem" else 0)
    with params.bind(binding):
        found = predict_sizes(defn, topo, world, sizes, mode=mode, ranks_per_node=defn.ranks_per_node, build=build,
                              as_program=program is not None)
    return {str(p.nbytes): {"time_us": round(p.time_us, 3), "busbw_GBs": round(p.busbw_GBs, 3),
                            "bottleneck": bound(p.timeline)} for p in found}


def rank(tries: list[dict], sizes: list[int]) -> dict[str, list[dict]]:
    """Per size, the predicted variants fastest first."""
    ranking = {}
    for nbytes in sizes:
        rows = [{"variant": t["variant"], "packets": t.get("packets", 0), "copy_engine": t.get("copy_engine", 0),
                 "label": candidate_label(t["variant"], t.get("packets", 0), t.get("copy_engine", 0)) + (
                     f" ({t['between']} between calls)" if t.get("between") else ""), **t["predicted"][str(nbytes)]}
                for t in tries if str(nbytes) in t.get("predicted", {})]
        ranking[str(nbytes)] = sorted(rows, key=lambda row: (row["time_us"], row["label"]))
    return ranking


def measure(path: str, defn: ScheduleDef, binding: dict, world: int, sizes: list[int], topology: str, out_dir: str,
            timeout: float | None, calls: int = 1, between: str = "barrier", packets: int = 0,
            fuse_calls: bool = False, copy_engine: int = 0) -> dict[str, dict]:
    """One variant (rewritten by the `packets` lowering when given) built and run at `sizes` with one
    `validate` call (NVSHMEM, bit-exact check on, NCCL's own collective measured beside it): per size
    (a string key), the measurement as JSON (`time_us`, `spread`, `verdict`, `nccl_us`, `folder`)."""
    from .runtime import validate

    name = params.label(binding).replace(",", "_") or "default"
    if packets:
        name += f"_packets{packets}"
    if copy_engine:
        name += f"_copy_engine{copy_engine}"
    name = os.path.join("measured", name)  # recorded relative
    folder = os.path.join(out_dir, name)
    with params.bind(binding):
        summary = validate.validate_file(path, backend="nvshmem", ranks=world, sizes=sorted(sizes), out_dir=folder,
                                         topology=topology, schedule_name=defn.name, calls=calls, between=between,
                                         timeout=validate.DEFAULT_TIMEOUT_S if timeout is None else timeout,
                                         packets=packets, fuse_calls=fuse_calls, copy_engine=copy_engine)
    found = {}
    cells = {cell.get("bytes"): cell for cell in summary.get("cells") or []}
    for nbytes in sizes:
        cell = cells.get(nbytes) or {}
        graph = cell.get("graph") or {}
        if cell.get("verdict") != "match" or not graph.get("median_us"):
            found[str(nbytes)] = {"verdict": cell.get("verdict") or summary.get("verdict") or "not run",
                                  "message": cell.get("message"), "folder": name}
            continue
        median = graph["median_us"]
        found[str(nbytes)] = {"verdict": "match", "time_us": median,
                              "spread": (graph["max_us"] - graph["min_us"]) / median,
                              "nccl_us": (cell.get("nccl") or {}).get("graph_us"), "folder": name}
    return found


# --------------------------------------------------------------------------------- the search
def tune(path: str, topology: str, world: int, sizes: list[int], out_dir: str, schedule_name: str | None = None,
         top: int = DEFAULT_TOP, noise: float = DEFAULT_NOISE, dry: bool = True, mode: str = "graph",
         check_timeout: float | None = CHECK_TIMEOUT_S, say: Callable[[str], None] = lambda _text: None,
         calls: int = 1, packets: list[int] | None = None, fuse_calls: bool = False,
         copy_engine: list[int] | None = None, max_variants: int | None = None) -> dict:
    """Search the family in `path` (see the module docstring); the report (`tune.json`'s content).
    `calls` > 1: every variant is checked, predicted and measured as that many back-to-back calls,
    with the cheapest separator between them that the checker verifies (`check_calls`). `packets`:
    each variant is also tried with each of these packet limits (bytes; the module docstring);
    `copy_engine`: and with its puts of at least each of these sizes on the copy engine.
    `fuse_calls`: the calls of a measured run share one kernel per rank (default: a kernel per call)."""
    from .topology import choose_topology, gpus

    if not dry and gpus_visible() == 0:
        raise TuneError(NO_GPU)
    chosen = choose_topology(topology)  # a shipped name: its calibrated file, when one ships
    topo = chosen.topology
    if chosen.warning():
        say(f"warning: {chosen.warning()}")
    if world > len(gpus(topo)):
        raise TuneError(f"--np {world}: {topo.name} has {len(gpus(topo))} GPUs (use a larger topology)")
    defs = _load_bounded(path, check_timeout)
    defn = _pick(defs, schedule_name, path)
    lowerings = [0, *sorted(set(packets or ()) - {0})]
    engines = sorted(set(copy_engine or ()) - {0})
    pairs = [(p, 0) for p in lowerings] + [(0, e) for e in engines]
    limit = MAX_VARIANTS if max_variants is None else max_variants
    count = variant_count(defn) * len(pairs)  # from the choices' counts: nothing is listed before this
    if count > limit:
        raise TuneError(f"{defn.name} has {count:,} candidates ({variant_count(defn):,} variant(s) x {len(pairs)} "
                        f"lowering(s)), more than the {limit:,} tune tries (narrow the cw.param/cw.choice lists, or "
                        f"raise the bound with --max-variants {count})")
    hygiene.prepare_out_dir(out_dir, "--out")
    memory_path = os.path.join(out_dir, MEMORY_FILE)
    memory = load_memory(memory_path)
    digest = file_hash(path)
    tries, skipped = [], 0

    def keyof(variant: dict, packets: int = 0, engine: int = 0) -> str:
        return memory_key(digest, defn.name, variant, world, topo.name, calls, packets, fuse_calls, engine)

    for binding, (limit, engine) in ((b, pair) for b in iter_variants(defn) for pair in pairs):
        key = keyof(binding, limit, engine)
        name = candidate_label(binding, limit, engine)
        entry = memory.get(key)
        if entry is not None and (entry.get("topology_file") != chosen.file  # predicted with other constants
                                  or entry.get("predicted_as") != PREDICTED_AS):  # or as the schedule's ops
            entry.update(predicted={}, topology_file=chosen.file, predicted_as=PREDICTED_AS)
        if entry is not None and (entry["status"] == "rejected" or all(
                str(n) in entry.get("predicted", {}) or n in entry.get("not_lowered", []) for n in sizes)):
            skipped += 1
            say(f"{name}: already {entry['status']} (tune memory)")
            tries.append(entry)
            continue
        if entry is None:
            between, said = None, None
            if calls > 1:
                verdict, error, between, said = check_calls(defn, binding, world, calls, check_timeout, limit)
            else:
                verdict, error = check_variant(defn, binding, world, check_timeout, limit)
            entry = {"file": digest, "schedule": defn.name, "variant": binding, "world": world,
                     "topology": topo.name, "topology_file": chosen.file, "verdict": verdict, "status": "checked",
                     "predicted_as": PREDICTED_AS, "predicted": {}, "measured": {}}
            if limit:
                entry.update(packets=limit, not_lowered=[])
            if engine:
                entry.update(copy_engine=engine, not_lowered=[])
            if calls > 1:
                entry.update(calls=calls, between=between, separators=said, fuse_calls=fuse_calls)
            if verdict != "verified":
                entry.update(status="rejected", reason=f"{verdict}: {error}")
                say(f"{name}: rejected, {verdict}: {error}")
        if entry["status"] != "rejected":
            missing = [n for n in sizes if str(n) not in entry["predicted"] and n not in entry.get("not_lowered", [])]
            if limit or engine:  # only where it lowers something: elsewhere the candidate is the variant itself
                between = entry.get("between") or "barrier"
                idle = [n for n in missing if not _lowered_at(defn, binding, world, n, calls, between, limit, engine)]
                entry["not_lowered"] = sorted(set(entry.get("not_lowered", [])) | set(idle))
                missing = [n for n in missing if n not in idle]
            entry["predicted"].update(predict_variant(
                defn, binding, topo, world, missing, mode, calls, entry.get("between") or "barrier", limit,
                program="nvshmem", copy_engine=engine, fuse_calls=fuse_calls))
            entry["status"] = "predicted"
            say(f"{name}: verified, predicted at {len(missing)} size(s)")
        memory[key] = entry
        save_memory(memory_path, memory)  # after each try: an interrupted run keeps what it decided
        tries.append(entry)
    ranking = rank([t for t in tries if t["status"] != "rejected"], sizes)
    report = {"schedule": defn.name, "file": os.path.basename(path), "topology": topo.name,
              "topology_file": chosen.file, "calibrated": chosen.calibrated, "world": world,
              "calls": calls, "mode": mode, "dry": dry, "noise": noise, "top": top, "variants": len(tries),
              "skipped": skipped,
              "rejected": [{"variant": t["variant"], "packets": t.get("packets", 0),
                            "copy_engine": t.get("copy_engine", 0),
                            "label": candidate_label(t["variant"], t.get("packets", 0), t.get("copy_engine", 0)),
                            "verdict": t["verdict"], "reason": t["reason"]}
                           for t in tries if t["status"] == "rejected"],
              "sizes": []}
    report["packets"] = lowerings[1:]
    report["copy_engine"] = engines
    if not dry:
        _measure_tops(path, defn, ranking, sizes, top, topology, out_dir, memory, memory_path, keyof, say)
    for nbytes in sizes:
        rows = ranking[str(nbytes)]
        row = {"bytes": nbytes, "ranked": rows, "predicted_winner": rows[0] if rows else None, "winner": None}
        if not dry and rows:
            chosen = _tops(rows, top)
            row["winner"], row["tried"] = _decide(chosen, nbytes, noise, memory, memory_path, keyof, say)
            row["nccl_us"] = next((m["nccl_us"] for m in (_measured(memory, keyof(r["variant"], r["packets"],
                                                                                  r.get("copy_engine", 0)), nbytes)
                                                          for r in chosen) if m and m.get("nccl_us")), None)
        report["sizes"].append(row)
    _write(os.path.join(out_dir, "tune.json"), json.dumps(report, indent=2) + "\n")
    _write(os.path.join(out_dir, "tune.md"), render_markdown(report))
    return report


def _measured(memory: dict, key: str, nbytes: int) -> dict | None:
    entry = memory.get(key) or {}
    return (entry.get("measured") or {}).get(str(nbytes))


def _tops(rows: list[dict], top: int) -> list[dict]:
    """The rows to measure at one size: the `top` best predicted of each lowering (the predictor does
    not model what packets change, so one lowering's prediction does not rank it against another's),
    in predicted order."""
    counted: dict[tuple, int] = {}
    chosen = []
    for row in rows:
        lowering = (row.get("packets", 0), row.get("copy_engine", 0))
        if counted.get(lowering, 0) < top:
            counted[lowering] = counted.get(lowering, 0) + 1
            chosen.append(row)
    return chosen


def _measure_tops(path, defn, ranking, sizes, top, topology, out_dir, memory, memory_path, keyof, say) -> None:
    """Measure every candidate at the sizes where it ranks in the top `top` of its lowering and was not
    measured before: one `validate` call per candidate (its programs built in parallel, NCCL measured once)."""
    wanted: dict[str, tuple[dict, int, list[int]]] = {}
    for nbytes in sizes:
        for row in _tops(ranking[str(nbytes)], top):
            engine = row.get("copy_engine", 0)
            if _measured(memory, keyof(row["variant"], row["packets"], engine), nbytes) is None:
                wanted.setdefault(row["label"], (row["variant"], row["packets"], engine, []))[3].append(nbytes)
    for label, (variant, limit, engine, todo) in wanted.items():
        entry = memory[keyof(variant, limit, engine)]
        say(f"{label}: building and measuring at {len(todo)} size(s)")
        try:
            found = measure(path, defn, variant, entry["world"], todo, topology, out_dir, None,
                            entry.get("calls", 1), entry.get("between") or "barrier", limit,
                            entry.get("fuse_calls", False), **({"copy_engine": engine} if engine else {}))
        except ClockworksError as exc:
            found = {str(n): {"verdict": "crashed", "message": str(exc)} for n in todo}
        entry["measured"].update(found)
        save_memory(memory_path, memory)


def _decide(rows, nbytes, noise, memory, memory_path, keyof, say) -> tuple:
    """The top variants at one size, in predicted order, through `accept`: the accepted one (or None),
    and each one tried ({label, time_us, verdict, decision})."""
    best, winner, tried = None, None, []
    for row in rows:
        key = keyof(row["variant"], row.get("packets", 0), row.get("copy_engine", 0))
        found = memory[key]["measured"].get(str(nbytes)) or {"verdict": "not measured", "message": None}
        if found.get("verdict") != "match":
            found["decision"] = f"not accepted: {found.get('verdict')}: {found.get('message')}"
        else:
            candidate = Measurement(found["time_us"], found.get("spread", 0.0))
            taken, why = accept(best, candidate, noise)
            found["decision"] = ("accepted: " if taken else "not accepted: ") + why
            if taken:
                best, winner = candidate, {"variant": row["variant"], "packets": row.get("packets", 0),
                                           "copy_engine": row.get("copy_engine", 0),
                                           "label": row["label"], **found,
                                           "predicted_us": row["time_us"], "bottleneck": row["bottleneck"]}
        say(f"{row['label']} at {nbytes} bytes: {found['decision']}")
        memory[key]["measured"][str(nbytes)] = found
        tried.append({"label": row["label"], "time_us": found.get("time_us"), "verdict": found.get("verdict"),
                      "decision": found["decision"]})
    save_memory(memory_path, memory)
    return winner, tried


def _load_bounded(path: str, timeout: float | None) -> list[ScheduleDef]:
    """`load_file(path)` within `timeout` seconds (a file that loops while it is imported is exit 3)."""
    from .dsl import guard
    from .errors import CheckIncomplete

    def stuck() -> None:
        guard.end_process(3, f"clockworks: error: incomplete: loading {path} did not finish within {timeout:g} s "
                             "(--timeout), and it does not let itself be stopped\n")

    try:
        with guard.time_bound(timeout, on_stuck=stuck, grace=5.0):
            return load_file(path)
    except guard.TimeUp:
        raise CheckIncomplete(f"loading {path} did not finish within {timeout:g} s (--timeout)") from None


def _pick(defs: list[ScheduleDef], name: str | None, path: str) -> ScheduleDef:
    if name is None:
        if len(defs) > 1:
            raise TuneError(f"{path} defines {len(defs)} schedules ({', '.join(d.name for d in defs)}); "
                            "pick one with --schedule NAME")
        return defs[0]
    for defn in defs:
        if defn.name == name:
            return defn
    raise TuneError(f"{path}: no schedule named {name!r}; it defines {', '.join(d.name for d in defs)}")


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def _size_text(nbytes: int) -> str:
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def render_markdown(report: dict) -> str:
    """tune.md: per size, the ranked variants, the predicted winner and its bottleneck; the rejected ones."""
    lowered = report.get("packets") or []
    mode = "dry run: checked, predicted and ranked, nothing built or measured" if report["dry"] else (
        f"measured: the top {report['top']} per size{' of each lowering' if lowered else ''}, accepted above a "
        f"noise of {report['noise']:.0%}")
    calls = report.get("calls") or 1
    per_call = (f" Each variant runs {calls} back-to-back calls per run, with the cheapest separator between them "
                "that the checker verifies for that many calls; times are per call." if calls > 1 else "")
    lines = [f"# tune: {report['schedule']} ({report['file']}) on {report['topology']}, {report['world']} ranks", "",
             f"{report['variants']} variant(s), {len(report['rejected'])} rejected by the checker, "
             f"{report['skipped']} taken from the tune memory; {mode}.{per_call} Predicted: the generated NVSHMEM "
             "program's timed run, as `validate` measures it (`perf/program.py`: the schedule's ops and the "
             "program's own costs).", ""]
    if lowered:
        lines += [f"Each variant is also tried with its put_signals of at most "
                  f"{', '.join(_size_text(n) for n in lowered)} sent as flag-in-data packets (`--packets`), "
                  "at the sizes where that lowers at least one. Their predictions are of the rewritten schedule's "
                  "program with its packet sends (one crossing of twice the bytes, no fence, no separate signal), "
                  "a model not fitted to packets (17% median error on the measured ones), so the measurements "
                  "decide.", ""]
    if report.get("copy_engine"):
        lines += [f"Each variant is also tried with its puts of at least "
                  f"{', '.join(_size_text(n) for n in report['copy_engine'])} issued on the copy engine "
                  "(`--copy-engine`), at the sizes where at least one put is that large. The schedule is the "
                  "variant's (checked as it is); its program's prediction prices those puts on the copy engine "
                  "(unfitted: `copy_engine_GBs`), and the measurements decide.", ""]
    for row in report["sizes"]:
        lines += [f"## {_size_text(row['bytes'])} per rank", ""]
        if not row["ranked"]:
            lines += ["no verified variant", ""]
            continue
        lines += ["| rank | variant | predicted us | busbw GB/s | bottleneck |", "|---|---|---|---|---|"]
        for i, ranked in enumerate(row["ranked"], 1):
            lines.append(f"| {i} | {ranked['label']} | {ranked['time_us']:.2f} | {ranked['busbw_GBs']:.1f} | "
                         f"{ranked['bottleneck']} |")
        best = row["predicted_winner"]
        lines += ["", f"Predicted winner: {best['label']}, {best['time_us']:.2f} us; "
                      f"bottleneck: {best['bottleneck']}."]
        if not report["dry"]:
            won = row["winner"]
            nccl = row.get("nccl_us")
            versus = (f"; NCCL's own collective {nccl:.2f} us, {nccl / won['time_us']:.2f}x" if won and nccl else
                      "; NCCL's own collective not measured" if won else "")
            lines.append(f"Measured winner: {won['label']}, {won['time_us']:.2f} us (CUDA graph, median; bit-exact)"
                         f"{versus}" if won else "Measured winner: none (no variant measured correctly)")
            for tried in row.get("tried", []):
                time = f"{tried['time_us']:.2f} us, " if tried.get("time_us") else ""
                lines.append(f"- {tried['label']}: {time}{tried['decision']}")
        lines.append("")
    if report["rejected"]:
        lines += ["## Rejected by the checker", ""]
        lines += [f"- {r['label']}: {r['reason']}" for r in report["rejected"]]
        lines.append("")
    return "\n".join(lines)


# ------------------------------------------------------------------------ the library (--emit)
def _try_of(tries: list[dict], report: dict, variant: dict, packets: int, copy_engine: int = 0) -> dict:
    """The memory's try of a report's candidate (empty if the memory lacks it)."""
    for entry in tries:
        if (entry.get("schedule") == report["schedule"] and entry.get("variant") == variant
                and entry.get("packets", 0) == packets and entry.get("copy_engine", 0) == copy_engine
                and entry.get("world") == report["world"]
                and entry.get("topology") == report["topology"] and entry.get("calls", 1) == report.get("calls", 1)):
            return entry
    return {}


def _timing(report: dict, entry: dict) -> str:
    """How a winner's time was taken, in words (a library call is one kernel per call)."""
    if report["dry"]:
        return "predicted per call"
    calls = report.get("calls", 1)
    if calls <= 1:
        return "one call per timed run"
    # tries from before a kernel per call was the default have no fuse_calls: their calls were fused
    fused = entry.get("fuse_calls", True)
    return (f"{calls} calls per timed run, " + ("fused into one kernel per rank (no launch between calls)" if fused
                                                else "a kernel per call"))


def winners_of(report: dict, tries: list[dict], where: str) -> tuple[list, list[str]]:
    """The winner per size of one tune report (`tune.json`'s content; `tries`: its memory's): the
    measured winner, or, in a dry run, the predicted one. Sizes without a winner are named."""
    from .codegen.library import Winner

    winners, missing = [], []
    for row in report["sizes"]:
        won = row.get("predicted_winner") if report["dry"] else row.get("winner")
        if not won:
            missing.append(f"{_size_text(row['bytes'])} ({where}: "
                           f"{'no verified variant' if report['dry'] else 'no variant measured correctly'})")
            continue
        packets, engine = won.get("packets", 0), won.get("copy_engine", 0)
        entry = _try_of(tries, report, won["variant"], packets, engine)
        winners.append(Winner(nbytes=row["bytes"], variant=dict(won["variant"]), packets=packets, copy_engine=engine,
                              between=entry.get("between"), time_us=won.get("time_us"),
                              nccl_us=row.get("nccl_us") if not report["dry"] else None, measured=not report["dry"],
                              label=candidate_label(won["variant"], packets, engine), timing=_timing(report, entry)))
    return winners, missing


def _read_results(folder: str) -> tuple[dict, list[dict]]:
    """`tune.json` and the memory's tries of a tune results folder."""
    path = os.path.join(folder, "tune.json")
    try:
        with open(path, encoding="utf-8") as handle:
            report = json.load(handle)
    except (OSError, ValueError) as exc:
        raise TuneError(f"--from {folder}: cannot read {path} ({exc}); point --from at a folder tune wrote") from None
    if not isinstance(report, dict) or "sizes" not in report or "schedule" not in report:
        raise TuneError(f"--from {folder}: {path} is not a tune report")
    memory_path = os.path.join(folder, MEMORY_FILE)
    tries = list(load_memory(memory_path).values())
    if not tries:
        raise TuneError(f"--from {folder}: no {MEMORY_FILE} beside tune.json (it records how each winner was checked)")
    return report, tries


def emit(path: str, out_dir: str, results: list[str] | None = None, reports: list[tuple[dict, list[dict], str]]
         | None = None, reset_every: int | None = None, schedule_name: str | None = None,
         say: Callable[[str], None] = lambda _text: None, check_timeout: float | None = CHECK_TIMEOUT_S,
         endless: bool = False) -> dict:
    """`clockworks tune --emit DIR`: the library of the winners (`codegen.library`) from tune results
    folders (`results`, e.g. a tune's `--out`) or from reports just made (`reports`: (report, its
    memory's tries, where)). The schedule file must be the one tuned (its sha256 is in the memory).
    `check_timeout`: each of the library's checks (every prefix of K calls, per size) stops after it.
    `endless`: calls without end (no reset) for each size whose calls `check.unbounded` proves safe for
    any number (`--calls-without-end`). Returns `cw_<name>.json`'s content, with `written`: the files."""
    from .codegen import library

    reports = list(reports or [])
    for folder in results or []:
        report, tries = _read_results(folder)
        reports.append((report, tries, folder))
    if not reports:
        raise TuneError("--emit: no tune results: tune first (FILE -t T --np N), or name a results folder with --from")
    digest = file_hash(path)
    defn = _pick(load_file(path), schedule_name or reports[0][0]["schedule"], path)
    winners, missing, seen = [], [], {}
    first = reports[0][0]
    for report, tries, where in reports:
        if (report["schedule"], report["world"], report["topology"]) != (first["schedule"], first["world"],
                                                                          first["topology"]):
            raise TuneError(f"--from {where}: {report['schedule']} at {report['world']} ranks on {report['topology']}, "
                            f"but {reports[0][2]} is {first['schedule']} at {first['world']} ranks on "
                            f"{first['topology']}: one library is one schedule, world and machine")
        if report["schedule"] != defn.name:
            raise TuneError(f"--from {where}: the results are of {report['schedule']}, not of {defn.name} in {path}")
        hashes = {t.get("file") for t in tries if t.get("schedule") == report["schedule"]}
        if digest not in hashes:
            raise TuneError(f"{path} is not the file {where} tuned (its sha256 {digest[:12]}... is not in the "
                            f"memory): the kernels would not be the ones measured; tune it again")
        found, lacking = winners_of(report, tries, where)
        missing += lacking
        for winner in found:
            if winner.nbytes in seen:
                raise TuneError(f"{_size_text(winner.nbytes)} was tuned in both {seen[winner.nbytes]} and {where}: "
                                "name each size once")
            seen[winner.nbytes] = where
            winners.append(winner)
    for text in missing:
        say(f"no kernel at {text}: the library refuses that size")
    calls = reset_every or library.DEFAULT_RESET_EVERY
    try:
        entries = library.plan_entries(defn, first["world"], winners, calls, timeout=check_timeout, say=say,
                                       endless=endless)
        provenance = {"source": ", ".join(where for _r, _t, where in reports), "topology": first["topology"],
                      "file": os.path.basename(path), "hash": digest,
                      "measured": all(w.measured for w in winners)}
        written = library.emit(entries, provenance, out_dir)
    except library.LibraryError as exc:
        raise TuneError(f"--emit: {exc}") from None
    described = library.describe(entries, provenance)
    described["written"] = [str(p) for p in written]
    described["not_tuned"] = missing
    return described
