"""Benchmark the model checker on every correct protocol in protocols/*.py.

For each protocol and world size the schedule is traced and checked in a fresh subprocess (memory
isolated, killable): the reduced search `--repeat` times (median seconds reported, states asserted
identical across repeats), then once without the stubborn-set reduction to show the reduction
ratio. A case that stops at its bound is recorded as incomplete with the states it reached, and the
larger sizes of that protocol are skipped.

    python scripts/bench_checker.py [--protocols NAME ...] [--ranks 2 4 8 ...] [--repeat 3]
                                    [--timeout 120] [--out scripts/results]

Writes <out>/bench_checker.json (machine info and one record per case) and <out>/bench_checker.md.

    python scripts/bench_checker.py --scaling [--repeat 1] [--timeout 600]

runs the reduced search on the scaling cases (`SCALING`: each protocol up to the sizes of the
targets, the hierarchical all-reduce at 8 ranks per node) and writes bench_checker_scaling.json,
.md (a table per protocol and the targets) and .png (states, seconds and peak memory against
ranks, log-log, with SPIN's figures on the 8-rank ring for scale; matplotlib needed for the plot).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROTOCOLS = REPO / "protocols"
# Where the workers import clockworks_dist and read protocols from: the repository, or (the default)
# a copy of both taken when the run starts, since the working tree may be edited during a long run.
SOURCE = Path(os.environ.get("CW_BENCH_SOURCE") or REPO)
DEFAULT_RANKS = (2, 4, 8, 16, 32, 64)
HARD_KILL_MARGIN = 30.0  # seconds past the check's own timeout before the subprocess is killed
UNREDUCED_TIMEOUT = 60.0
UNREDUCED_MIN_RANKS = (2, 4)  # always attempted, whatever happened before

# (label, protocol, ranks, ranks per node (None: the protocol's), limit in seconds, limit in MB or None).
# Seconds are the whole check() call (tracing the schedule apart, as in the tables); MB is the
# worker's peak resident memory, tracing included.
TARGETS = (
    ("8-rank ring all-reduce verified in < 1 s", "ring_allreduce", 8, None, 1.0, None),
    ("128-rank ring all-reduce verified in < 5 s", "ring_allreduce", 128, None, 5.0, None),
    ("1024-rank ring all-reduce verified in < 60 s and < 4 GB", "ring_allreduce", 1024, None, 60.0, 4096),
    ("1024-rank hierarchical all-reduce (8 per node) verified in < 30 s", "hierarchical_allreduce", 1024, 8, 30.0,
     None),
    ("64-rank NVSHMEM one-shot all-reduce (2 iterations) verified in < 10 s", "nvshmem_oneshot_allreduce", 64,
     None, 10.0, None),
    ("256-rank NVSHMEM one-shot all-reduce (2 iterations) verified in < 120 s", "nvshmem_oneshot_allreduce", 256,
     None, 120.0, None),
    ("64-rank NVSHMEM two-shot all-reduce verified in < 10 s", "nvshmem_twoshot_allreduce", 64, None, 10.0, None),
    ("256-rank NVSHMEM two-shot all-reduce verified in < 120 s", "nvshmem_twoshot_allreduce", 256, None, 120.0, None),
    ("64-rank NVSHMEM all-to-all dispatch verified in < 10 s", "nvshmem_alltoall_dispatch", 64, None, 10.0, None),
    ("256-rank NVSHMEM all-to-all dispatch verified in < 120 s", "nvshmem_alltoall_dispatch", 256, None, 120.0,
     None),
    ("8-PE fenced dispatch verified in < 5 s", "nvshmem_fenced_dispatch", 8, None, 5.0, None),
    ("64-PE fenced dispatch verified in < 60 s", "nvshmem_fenced_dispatch", 64, None, 60.0, None),
)
# The scaling run: protocol -> (ranks per node or None, sizes). The ring stops at 512 ranks (see
# NOT_RUN for 1024).
SCALING = {
    "ring_allreduce": (None, (8, 16, 32, 64, 128, 256, 512)),
    "hierarchical_allreduce": (8, (8, 16, 32, 64, 128, 256, 512, 1024)),
    "nvshmem_oneshot_allreduce": (None, (8, 16, 32, 64, 128, 256)),
    "nvshmem_twoshot_allreduce": (None, (8, 16, 32, 64, 128, 256)),
    "nvshmem_alltoall_dispatch": (None, (8, 16, 32, 64, 128, 256)),
    "nvshmem_fenced_dispatch": (None, (8, 16, 32, 64, 128)),
}
# Targets the scaling run does not attempt, and why.
NOT_RUN = {
    ("ring_allreduce", 1024): "not in this run: measured once alone (trace, then check() with no state cap): "
                              "verified, 5,237,761 states, 430 s of check and 143 s of trace, 10.9 GB peak "
                              "(3.1 GB of it the traced schedule of 3.1 million ops): past both limits, "
                              "about 7 times the time and 2.7 times the memory; the cost is per op (about 140 us "
                              "and 2.5 KB of check per op, 82 us per state), spread over matching, compiling the "
                              "model, the search and the post-search phase",
}
# SPIN on the same 8-rank ring all-reduce (Promela model of the same schedule), for scale: it had
# stored 326 million states and used 20 GB when stopped unfinished at 600 s.
SPIN_RING_8 = {"ranks": 8, "states": 326_000_000, "seconds": 600.0, "mb": 20_000, "finished": False}


# ------------------------------------------------------------------------------------- helpers
def _sanitize(text: str) -> str:
    """Strip machine paths, the home directory and the user name from a message."""
    for root in {str(SOURCE), str(REPO)}:
        text = text.replace(root + os.sep, "").replace(root, ".")
    home = os.path.expanduser("~")
    if home and home != "/":
        text = text.replace(home, "~")
    user = os.environ.get("USER") or os.environ.get("LOGNAME")
    if user and len(user) > 2:
        text = re.sub(rf"\b{re.escape(user)}\b", "<user>", text)
    return re.sub(r"(/[\w.-]+)+/([\w.-]+\.py)", r"\2", text)  # any other absolute path: basename


def _maxrss_mb() -> float:
    # ru_maxrss is in KiB on Linux (bytes on macOS)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024


def _emit(tag: str, payload: dict) -> None:
    sys.stdout.write(f"{tag} {json.dumps(payload)}\n")
    sys.stdout.flush()


# -------------------------------------------------------------------------------------- worker
def worker(protocol: str, ranks: int, reduction: bool, timeout: float, max_states: int | None,
           per_node: int | None = None) -> int:
    """One case in this process: trace, check, print one RESULT line (PROGRESS lines before it)."""
    import clockworks_dist as cw
    if not Path(cw.__file__).resolve().is_relative_to(SOURCE.resolve()):
        raise SystemExit(f"worker imported clockworks_dist from outside {SOURCE}")
    import clockworks_dist.check.symbolic  # noqa: F401  (imported lazily by check(); warm it up
    try:                                    # so that neither its time nor its memory counts)
        import z3
        solver = z3.Solver()  # the first solver allocates z3's context (~25 MB)
        solver.add(z3.Int("x") > 1)
        solver.check()
    except ImportError:
        pass

    defn = cw.load_file(os.path.relpath(SOURCE / "protocols" / f"{protocol}.py"))[0]
    started = time.perf_counter()
    try:
        schedule = defn.trace(ranks, ranks_per_node=per_node)
    except Exception as exc:  # the protocol cannot be traced at this size
        _emit("RESULT", {"status": "n/a", "error": _sanitize(f"{type(exc).__name__}: {exc}")})
        return 0
    trace_seconds = time.perf_counter() - started
    rss_before = _maxrss_mb()

    def progress(states: int, transitions: int, seconds: float, **_where) -> None:
        _emit("PROGRESS", {"states": states, "transitions": transitions, "seconds": round(seconds, 3),
                           "peak_mb": round(_maxrss_mb(), 1)})

    # time the phases of check() by wrapping two of its module-level helpers (instrumentation only)
    pipeline = sys.modules["clockworks_dist.check"]
    phases = {"search": 0.0, "symbolic": 0.0}

    def timed(phase, fn):
        def wrapper(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                phases[phase] += time.perf_counter() - t0
        return wrapper

    pipeline._search = timed("search", pipeline._search)
    pipeline._symbolic = timed("symbolic", pipeline._symbolic)
    started = time.perf_counter()
    result = cw.check(schedule, timeout=timeout, max_states=max_states, reduction=reduction, progress=progress)
    wall = time.perf_counter() - started
    peak = _maxrss_mb()
    _emit("RESULT", {
        "status": "ok", "verdict": result.verdict, "complete": result.complete, "stopped_by": result.stopped_by,
        "states": result.states, "transitions": result.transitions, "terminal_states": result.terminal_states,
        "seconds": wall, "check_seconds": result.seconds, "trace_seconds": trace_seconds,
        "search_seconds": phases["search"], "symbolic_seconds": phases["symbolic"],
        "violations": [f"{v.kind}: {_sanitize(v.message)}" for v in result.violations],
        "rss_before_check_mb": round(rss_before, 1), "peak_mb": round(peak, 1),
        "check_delta_mb": round(peak - rss_before, 1),
    })
    return 0


def run_case(protocol: str, ranks: int, reduction: bool, timeout: float, max_states: int | None,
             per_node: int | None = None) -> dict:
    """Run one case in a subprocess, killed at timeout + HARD_KILL_MARGIN."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--_worker", protocol, str(ranks),
           "1" if reduction else "0", str(timeout), str(max_states or 0), str(per_node or 0)]
    started = time.perf_counter()
    killed = False
    try:
        env = dict(os.environ, CW_BENCH_SOURCE=str(SOURCE))
        if SOURCE != REPO:  # the snapshot goes first on the path, ahead of the editable install
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SOURCE), os.environ.get("PYTHONPATH")]))
        proc = subprocess.run(cmd, cwd=SOURCE, capture_output=True, text=True, env=env,
                              timeout=timeout + HARD_KILL_MARGIN)
        out, err, rc = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        killed = True
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        rc = None
    elapsed = time.perf_counter() - started
    result, last = None, None
    for line in out.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[7:])
        elif line.startswith("PROGRESS "):
            last = json.loads(line[9:])
    if result is not None:
        result["process_seconds"] = elapsed
        return result
    # killed, or crashed: report what the search had reached
    why = "killed after %.0f s (hard limit)" % elapsed if killed else f"worker exited with {rc}"
    tail = _sanitize(err.strip().splitlines()[-1]) if err.strip() else ""
    return {"status": "killed" if killed else "crashed", "verdict": "incomplete", "complete": False,
            "stopped_by": "hard_kill" if killed else "crash", "error": why + (f": {tail}" if tail else ""),
            "states": last["states"] if last else None, "transitions": last["transitions"] if last else None,
            "seconds": elapsed, "progress_seconds": last["seconds"] if last else None,
            "peak_mb": last["peak_mb"] if last else None,
            "process_seconds": elapsed}


# -------------------------------------------------------------------------------------- driver
def _rate(states, seconds):
    return round(states / seconds, 1) if states and seconds else None


def _median(runs: list[dict], key: str):
    values = [r[key] for r in runs if r.get(key) is not None]
    return round(statistics.median(values), 4) if values else None


def bench_reduced(protocol: str, ranks: int, args, per_node: int | None = None) -> dict:
    runs = []
    for _ in range(args.repeat):
        run = run_case(protocol, ranks, True, args.timeout, args.max_states, per_node)
        runs.append(run)
        if run.get("status") == "n/a" or not run.get("complete"):
            break  # no point repeating a case that cannot trace or stops at the bound
    rec = {"protocol": protocol, "ranks": ranks, "reduction": True, "code": code_version(SOURCE)}
    if per_node:
        rec["ranks_per_node"] = per_node
    if runs[0].get("status") == "n/a":
        rec.update(verdict="n/a", complete=None, error=runs[0]["error"], repeats=0)
        return rec
    finished = [r for r in runs if r.get("complete")]
    bounded = [r for r in runs if not r.get("complete")]
    ok_runs = [r for r in runs if r.get("status") == "ok"]
    # the search is deterministic: every repeat that finished must agree exactly
    states = {r["states"] for r in finished}
    transitions = {r["transitions"] for r in finished}
    verdicts = {r["verdict"] for r in finished}
    deterministic = len(states) <= 1 and len(transitions) <= 1 and len(verdicts) <= 1
    # a case where any repeat stopped at the bound is recorded as incomplete, with what it reached
    base = bounded[0] if bounded else runs[0]
    secs = [r["seconds"] if r.get("seconds") is not None else r.get("process_seconds") for r in runs]
    secs = [x for x in secs if x is not None]
    median = statistics.median(secs) if secs else None
    rec.update(
        verdict=base["verdict"] if not bounded else "incomplete", complete=not bounded,
        stopped_by=base.get("stopped_by"), states=base.get("states"), transitions=base.get("transitions"),
        terminal_states=base.get("terminal_states"),
        seconds_median=round(median, 4) if median is not None else None,
        seconds_all=[round(x, 4) for x in secs],
        states_per_second=_rate(base.get("states"), median),
        search_seconds_median=_median(ok_runs, "search_seconds"),
        search_states_per_second=_rate(base.get("states"), _median(ok_runs, "search_seconds")),
        symbolic_seconds_median=_median(ok_runs, "symbolic_seconds"),
        trace_seconds_median=_median(ok_runs, "trace_seconds"),
        peak_mb=max((r["peak_mb"] for r in runs if r.get("peak_mb") is not None), default=None),
        check_delta_mb=max((r["check_delta_mb"] for r in ok_runs), default=None),
        rss_before_check_mb=max((r["rss_before_check_mb"] for r in ok_runs), default=None),
        repeats=len(runs), deterministic=deterministic,
        violations=base.get("violations", []),
    )
    notes = []
    if base.get("error"):
        notes.append(base["error"])
    if bounded and finished:
        f = finished[0]
        notes.append(f"{len(finished)} of {len(runs)} repeats finished ({f['verdict']}, {f['states']:,} states, "
                     f"{f['seconds']:.1f} s) but a repeat stopped at the bound")
        rec["finished_repeats"] = [{"verdict": r["verdict"], "states": r["states"], "seconds": round(r["seconds"], 4)}
                                   for r in finished]
    if not deterministic:
        notes.append(f"NOT DETERMINISTIC across repeats: states {sorted(states)}, "
                     f"transitions {sorted(transitions)}, verdicts {sorted(verdicts)}")
    if notes:
        rec["error"] = "; ".join(notes)
    return rec


def code_version(root: Path = REPO) -> dict:
    """The commit and a hash of the package's and protocols' sources under `root`."""
    import hashlib
    digest = hashlib.sha256()
    for path in sorted([*(root / "clockworks_dist").rglob("*.py"), *(root / "protocols").glob("*.py")]):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    commit, dirty = None, None
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                                text=True, timeout=10).stdout.strip() or None
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--", "clockworks_dist", "protocols"],
                                    cwd=REPO, capture_output=True, text=True, timeout=10).stdout.strip())
    except Exception:
        pass
    return {"commit": commit, "dirty": dirty, "source_sha256": digest.hexdigest()[:12]}


def bench_unreduced(protocol: str, ranks: int, args) -> dict:
    run = run_case(protocol, ranks, False, args.unreduced_timeout, args.max_states)
    rec = {"verdict": run.get("verdict"), "complete": bool(run.get("complete")),
           "stopped_by": run.get("stopped_by"), "states": run.get("states"),
           "transitions": run.get("transitions"),
           "seconds": round(run["seconds"], 4) if run.get("seconds") is not None else None,
           "search_seconds": _median([run], "search_seconds"),
           "states_per_second": _rate(run.get("states"), run.get("seconds")), "peak_mb": run.get("peak_mb"),
           "timeout": args.unreduced_timeout}
    if "error" in run:
        rec["error"] = run["error"]
    return rec


def _fmt(value, digits=None):
    if value is None:
        return "–"
    if isinstance(value, float) and digits is not None:
        return f"{value:.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _secs(value):
    if value is None:
        return "–"
    return f"{value:.3f}" if value < 10 else f"{value:.1f}"


def targets(records: list[dict]) -> list[dict]:
    out = []
    for label, protocol, ranks, per_node, limit, limit_mb in TARGETS:
        rec = next((r for r in records if r["protocol"] == protocol and r["ranks"] == ranks
                    and r.get("ranks_per_node") == per_node), None)
        base = {"target": label, "protocol": protocol, "ranks": ranks, "ranks_per_node": per_node, "limit_s": limit,
                "limit_mb": limit_mb}
        if rec is None or rec.get("verdict") in (None, "skipped", "n/a"):
            out.append({**base, "result": "NOT MEASURED", "median_s": None, "verdict": rec and rec.get("verdict"),
                        "note": (rec and rec.get("note")) or NOT_RUN.get((protocol, ranks))})
            continue
        median = rec.get("seconds_median")
        ok = rec["verdict"] == "verified" and median is not None and median < limit
        if limit_mb is not None:
            ok = ok and rec.get("peak_mb") is not None and rec["peak_mb"] < limit_mb
        out.append({**base, "result": "PASS" if ok else "FAIL", "median_s": median, "verdict": rec["verdict"],
                    "states": rec.get("states"), "peak_mb": rec.get("peak_mb")})
    return out


def _sources_line(doc: dict) -> str:
    start, end, measured = doc["code_at_start"], doc["code_at_end"], doc["code_measured"]
    version = (f"commit {start['commit']}" + (" plus uncommitted changes" if start.get("dirty") else "")
               + f"; sha256 {measured['source_sha256']} over clockworks_dist/**/*.py and protocols/*.py")
    if doc["frozen"]:
        line = (f"Measured sources: a copy of clockworks_dist/ and protocols/ taken when the run started ({version}); "
                "every case imported that copy")
        if start != end:
            line += (f". The working tree changed during the run (commit {end['commit']} at the end), which "
                     "these numbers do not reflect")
        return line + "."
    if start == end:
        return f"Measured sources: the working tree ({version}), unchanged during the run."
    return (f"Measured sources: the working tree ({version}); **it changed during the run** (commit "
            f"{end['commit']}, sha256 {end['source_sha256']} at the end): each record's `code` in the JSON says "
            "which version it measured.")


def markdown(doc: dict) -> str:
    m, st = doc["machine"], doc["settings"]
    lines = ["# Model checker benchmark", ""] + ([] if doc.get("finished") else
                                                 ["**Partial results: the run was interrupted.**", ""]) + [
             f"Generated {doc['date']} by `scripts/bench_checker.py` (clockworks-dist {m['package_version']}"
             + ").", "",
             _sources_line(doc), "",
             f"Machine: {m['cpu_model']}, {m['cpu_count']} cores, {m['memory_gb']} GB RAM, "
             f"Python {m['python_version']} ({m['platform']}). Shared machine: timings are noisy.", "",
             f"Settings: DFS, reduced search repeated {st['repeat']}× (median reported, states identical across "
             f"repeats), time budget {st['timeout']:g} s per check (process killed at +{HARD_KILL_MARGIN:.0f} s), "
             + (f"state cap {st['max_states']:,}" if st["max_states"] else "no state cap")
             + (f"; unreduced search run once with a {st['unreduced_timeout']:.0f} s budget. "
                if st["unreduced_timeout"] else "; unreduced search not run. ")
             + "Median s is the whole check() call (matching, model build, the state-space search and the "
             "post-search symbolic phase); states/s = states / median s. Search s and search st/s are the "
             "state-space search alone; symbolic s is the post-search phase (happens-before of one execution "
             "and the z3 size/wait checks); both are medians, measured by wrapping check()'s internal helpers. "
             "Trace s (building the schedule) is separate. Peak MB is the worker process's max RSS "
             "(interpreter and imports included); Δ MB is its growth during the check. z3 and the checker are "
             "imported, and z3's context created, before the clock starts (a one-off cost of ~0.1 s and "
             "~35 MB, excluded).", ""]
    by_protocol: dict[str, list[dict]] = {}
    for rec in doc["records"]:
        by_protocol.setdefault(rec["protocol"], []).append(rec)
    for protocol, recs in by_protocol.items():
        lines += [f"## {protocol}", "",
                  "| ranks | verdict | states | transitions | median s | states/s | search s | search st/s "
                  "| symbolic s | trace s | peak MB | Δ MB | unreduced states | reduction ratio | note |",
                  "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        for r in recs:
            u = r.get("unreduced") or {}
            note = r.get("error") or r.get("note") or ""
            if r.get("stopped_by"):
                note = (note + "; " if note else "") + f"stopped by {r['stopped_by']}"
            if r.get("violations"):
                note = (note + "; " if note else "") + "; ".join(r["violations"])
            if u.get("note"):
                unred = u["note"]
            elif u:
                unred = _fmt(u.get("states")) + ("" if u.get("complete") else
                                                 f" (incomplete, {u.get('stopped_by')} at {_secs(u.get('seconds'))} s)")
            else:
                unred = "–"
            ratio = (f"{u['states'] / r['states']:.1f}×" if u.get("states") and r.get("states") else "–")
            if u and not u.get("complete") and u.get("states") and r.get("states"):
                ratio = "≥ " + ratio
            verdict = r["verdict"] + ("" if r.get("complete") or r["verdict"] in ("n/a", "skipped")
                                      or r["verdict"] == "incomplete" else " (incomplete)")
            lines.append(
                f"| {r['ranks']} | {verdict} | {_fmt(r.get('states'))} | {_fmt(r.get('transitions'))} "
                f"| {_secs(r.get('seconds_median'))} | {_fmt(r.get('states_per_second'), 0)} "
                f"| {_secs(r.get('search_seconds_median'))} | {_fmt(r.get('search_states_per_second'), 0)} "
                f"| {_secs(r.get('symbolic_seconds_median'))} "
                f"| {_secs(r.get('trace_seconds_median'))} | {_fmt(r.get('peak_mb'), 0)} "
                f"| {_fmt(r.get('check_delta_mb'), 0)} | {unred} | {ratio} | {note.replace('|', '/')} |")
        lines.append("")
    lines += ["## Targets", "", "| target | verdict | median s | peak MB | result |", "|---|---|---:|---:|---|"]
    for t in doc["targets"]:
        lines.append(f"| {t['target']} | {t.get('verdict') or '–'} | {_secs(t['median_s'])} "
                     f"| {_fmt(t.get('peak_mb'), 0)} | **{t['result']}** |")
    lines.append("")
    return "\n".join(lines)


def machine_info() -> dict:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    try:
        from importlib.metadata import version
        pkg = version("clockworks-dist")
    except Exception:
        import clockworks_dist
        pkg = clockworks_dist.__version__
    commit = None
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                                text=True, timeout=10).stdout.strip() or None
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True,
                               timeout=10).stdout.strip()
        if commit and dirty:
            commit += "+dirty"
    except Exception:
        pass
    return {"cpu_model": cpu, "cpu_count": os.cpu_count(), "memory_gb": mem,
            "python_version": platform.python_version(), "python_implementation": platform.python_implementation(),
            "platform": f"{platform.system()} {platform.machine()}", "package_version": pkg, "git_commit": commit}


# ------------------------------------------------------------------------------------- scaling
def _run_scaling(args) -> int:
    """The reduced search on every scaling case, larger sizes of a protocol skipped once one stops
    at its bound; writes bench_checker_scaling.{json,md,png}."""
    started = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    records: list[dict] = []
    names = args.protocols or list(SCALING)

    def write(final: bool) -> dict:
        doc = {"benchmark": "clockworks-dist model checker, scaling", "finished": final,
               "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
               "machine": machine_info(), "code_measured": code_version(SOURCE), "frozen": SOURCE != REPO,
               "code_at_start": started_code, "code_at_end": code_version(),
               "settings": {"strategy": "dfs", "repeat": args.repeat, "timeout": args.timeout,
                            "hard_kill_after": args.timeout + HARD_KILL_MARGIN,
                            "cases": {n: SCALING[n] for n in names}},
               "spin_ring_8": SPIN_RING_8, "records": records, "targets": targets(records),
               "total_seconds": round(time.perf_counter() - started, 1)}
        (out / "bench_checker_scaling.json").write_text(json.dumps(doc, indent=1) + "\n")
        (out / "bench_checker_scaling.md").write_text(scaling_markdown(doc))
        scaling_plot(doc, out / "bench_checker_scaling.png")
        return doc

    started_code = code_version()
    for protocol in names:
        per_node, sizes = SCALING[protocol]
        stop = None
        for ranks in sizes:
            if stop is not None:
                records.append({"protocol": protocol, "ranks": ranks, "ranks_per_node": per_node, "verdict": "skipped",
                                "complete": None, "note": f"skipped: incomplete at {stop} ranks"})
                continue
            rec = bench_reduced(protocol, ranks, args, per_node)
            records.append(rec)
            print(f"{protocol:28s} {ranks:5d} ranks  {rec['verdict']:10s} {_fmt(rec.get('states')):>10s} states "
                  f"{_secs(rec.get('seconds_median')):>7s} s  (search {_secs(rec.get('search_seconds_median'))}, "
                  f"symbolic {_secs(rec.get('symbolic_seconds_median'))})  "
                  f"trace {_secs(rec.get('trace_seconds_median'))} s  peak {_fmt(rec.get('peak_mb'), 0)} MB"
                  + (f"  [{rec['error']}]" if rec.get("error") else ""),
                  flush=True)
            if not rec.get("complete"):
                stop = ranks
            write(final=False)
    doc = write(final=True)
    print()
    for t in doc["targets"]:
        print(f"{t['result']:12s} {t['target']}: median {_secs(t['median_s'])} s, peak {_fmt(t.get('peak_mb'), 0)} MB "
              f"(verdict {t.get('verdict')})")
    print(f"\nwrote {out / 'bench_checker_scaling.md'} (.json, .png) in {doc['total_seconds']:.0f} s")
    return 0


def _label(protocol: str, per_node) -> str:
    return protocol + (f" ({per_node} per node)" if per_node else "")


def scaling_markdown(doc: dict) -> str:
    m, st = doc["machine"], doc["settings"]
    spin = doc["spin_ring_8"]
    lines = ["# Model checker scaling", ""] + ([] if doc.get("finished") else ["**Partial results.**", ""]) + [
        f"Generated {doc['date']} by `scripts/bench_checker.py --scaling` (clockworks-dist {m['package_version']}).",
        "", _sources_line(doc), "",
        f"Machine: {m['cpu_model']}, {m['cpu_count']} cores, {m['memory_gb']} GB RAM, Python {m['python_version']} "
        f"({m['platform']}). Shared machine: timings are noisy.", "",
        f"Settings: DFS with the partial-order reduction, {st['repeat']} run(s) per case (median), a "
        f"{st['timeout']:g} s budget per check. Check s is the whole check() call (matching, model, search, "
        "post-search phase); search s and post s are its state-space search and its post-search phase "
        "(happens-before of one execution, z3 size and wait checks, unfinished deliveries); trace s (running "
        "the DSL to build the schedule) comes before and is not in check s. Peak MB is the worker's peak "
        "resident memory, tracing included. A size is skipped once a smaller one stopped at its bound.", "",
        f"For scale: SPIN on the same 8-rank ring all-reduce had stored {spin['states']:,} states and used "
        f"{spin['mb'] / 1000:.0f} GB when stopped, unfinished, after {spin['seconds']:.0f} s.", "",
        "![states, seconds and peak memory against ranks](bench_checker_scaling.png)", ""]
    groups: dict[tuple, list[dict]] = {}
    for rec in doc["records"]:
        groups.setdefault((rec["protocol"], rec.get("ranks_per_node")), []).append(rec)
    for (protocol, per_node), recs in groups.items():
        lines += [f"## {_label(protocol, per_node)}", "",
                  "| ranks | verdict | states | check s | states/s | search s | post s | trace s | peak MB | note |",
                  "|---:|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for r in recs:
            note = r.get("error") or r.get("note") or ""
            if r.get("stopped_by"):
                note = (note + "; " if note else "") + f"stopped by {r['stopped_by']}"
            lines.append(f"| {r['ranks']} | {r['verdict']} | {_fmt(r.get('states'))} "
                         f"| {_secs(r.get('seconds_median'))} | {_fmt(r.get('states_per_second'), 0)} "
                         f"| {_secs(r.get('search_seconds_median'))} "
                         f"| {_secs(r.get('symbolic_seconds_median'))} | {_secs(r.get('trace_seconds_median'))} "
                         f"| {_fmt(r.get('peak_mb'), 0)} | {note.replace('|', '/')} |")
        lines.append("")
    lines += ["## Targets", "", "| target | verdict | check s | peak MB | result | note |",
              "|---|---|---:|---:|---|---|"]
    for t in doc["targets"]:
        lines.append(f"| {t['target']} | {t.get('verdict') or '–'} | {_secs(t['median_s'])} "
                     f"| {_fmt(t.get('peak_mb'), 0)} | **{t['result']}** | {t.get('note') or ''} |")
    lines.append("")
    return "\n".join(lines)


def scaling_plot(doc: dict, path: Path) -> None:
    """States, check seconds and peak MB against ranks, log-log, one line per protocol, with
    SPIN's point on the 8-rank ring (hollow: it stopped unfinished)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install 'clockworks-dist[plot]')", file=sys.stderr)
        return
    spin = doc["spin_ring_8"]
    fig, axes = plt.subplots(1, 3, figsize=(16, 5))
    groups: dict[tuple, list[dict]] = {}
    for rec in doc["records"]:
        if rec.get("verdict") == "verified":
            groups.setdefault((rec["protocol"], rec.get("ranks_per_node")), []).append(rec)
    for ax, key, title, spin_value in zip(axes, ("states", "seconds_median", "peak_mb"),
                                          ("states", "check seconds", "peak memory (MB)"),
                                          (spin["states"], spin["seconds"], spin["mb"])):
        for (protocol, per_node), recs in groups.items():
            xs = [r["ranks"] for r in recs if r.get(key)]
            ys = [r[key] for r in recs if r.get(key)]
            ax.plot(xs, ys, marker="o", label=_label(protocol, per_node))
        ax.plot([spin["ranks"]], [spin_value], marker="s", markersize=9, markerfacecolor="none", color="black",
                linestyle="none", label="SPIN, 8-rank ring (stopped, unfinished)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("ranks")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle("clockworks check: reduced DFS, verified cases (2-core machine)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--_worker":
        protocol, ranks, red, timeout, cap = argv[1:6]
        per_node = int(argv[6]) if len(argv) > 6 else 0
        return worker(protocol, int(ranks), red == "1", float(timeout), int(cap) or None, per_node or None)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--protocols", nargs="+", metavar="NAME", help="protocol file stems (default: all)")
    parser.add_argument("--ranks", nargs="+", type=int, default=list(DEFAULT_RANKS))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=120.0, help="check time budget per case (s)")
    parser.add_argument("--unreduced-timeout", type=float, default=UNREDUCED_TIMEOUT)
    parser.add_argument("--no-unreduced", action="store_true", help="skip the unreduced searches")
    parser.add_argument("--max-states", type=int, default=None, help="state cap per check (default: none)")
    parser.add_argument("--out", default=str(REPO / "scripts" / "results"))
    parser.add_argument("--scaling", action="store_true",
                        help="run the scaling cases (SCALING) instead, reduced search only; "
                             "writes bench_checker_scaling.*")
    parser.add_argument("--no-freeze", action="store_true",
                        help="import the package from the working tree in every case, instead of from a copy "
                             "taken at the start (edits made during the run would then be measured)")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")

    available = sorted(p.stem for p in PROTOCOLS.glob("*.py") if not p.stem.startswith("_"))
    if args.scaling and args.protocols:
        unknown = [n for n in args.protocols if n not in SCALING]
        if unknown:
            parser.error(f"no scaling case for {', '.join(unknown)}; cases: {', '.join(SCALING)}")
    names = args.protocols or available
    unknown = [n for n in names if n not in available]
    if unknown:
        parser.error(f"unknown protocol(s) {', '.join(unknown)}; available: {', '.join(available)}")
    sizes = sorted(set(args.ranks))

    global SOURCE
    snapshot = None
    if not args.no_freeze:
        import shutil
        import tempfile
        snapshot = Path(tempfile.mkdtemp(prefix="cw-bench-"))
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
        shutil.copytree(REPO / "clockworks_dist", snapshot / "clockworks_dist", ignore=ignore)
        shutil.copytree(REPO / "protocols", snapshot / "protocols", ignore=ignore)
        SOURCE = snapshot
    try:
        return _run_scaling(args) if args.scaling else _run(args, names, sizes)
    finally:
        if snapshot is not None:
            shutil.rmtree(snapshot, ignore_errors=True)
            SOURCE = REPO


def _run(args, names: list[str], sizes: list[int]) -> int:
    started = time.perf_counter()
    started_code = code_version()
    measured_code = code_version(SOURCE)
    records: list[dict] = []
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def write(final: bool) -> dict:
        """Write both outputs (after every protocol too, so an interrupted run keeps what it measured)."""
        doc = {
            "benchmark": "clockworks-dist model checker",
            "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "finished": final,
            "machine": machine_info(),
            "code_measured": measured_code, "frozen": SOURCE != REPO,
            "code_at_start": started_code, "code_at_end": code_version(),
            "settings": {"strategy": "dfs", "repeat": args.repeat, "timeout": args.timeout,
                         "hard_kill_after": args.timeout + HARD_KILL_MARGIN,
                         "unreduced_timeout": None if args.no_unreduced else args.unreduced_timeout,
                         "max_states": args.max_states, "ranks": sizes, "protocols": names},
            "records": records,
            "total_seconds": round(time.perf_counter() - started, 1),
        }
        doc["targets"] = targets(records)
        (out / "bench_checker.json").write_text(json.dumps(doc, indent=1) + "\n")
        (out / "bench_checker.md").write_text(markdown(doc))
        return doc

    for protocol in names:
        incomplete_at = None
        unreduced_stop = None
        for ranks in sizes:
            if incomplete_at is not None:
                records.append({"protocol": protocol, "ranks": ranks, "verdict": "skipped", "complete": None,
                                "note": f"skipped: smaller size incomplete ({incomplete_at} ranks)"})
                print(f"{protocol:28s} {ranks:3d} ranks  skipped (smaller size incomplete)", flush=True)
                continue
            try:
                rec = bench_reduced(protocol, ranks, args)
            except Exception as exc:  # a bug here must not lose the rest of the run
                rec = {"protocol": protocol, "ranks": ranks, "verdict": "error", "complete": False,
                       "error": _sanitize(f"benchmark error: {type(exc).__name__}: {exc}")}
            records.append(rec)
            if rec["verdict"] == "n/a":
                print(f"{protocol:28s} {ranks:3d} ranks  n/a: {rec['error']}", flush=True)
                continue
            print(f"{protocol:28s} {ranks:3d} ranks  {rec['verdict']:10s} {_fmt(rec.get('states')):>10s} states "
                  f"{_secs(rec.get('seconds_median')):>7s} s  {_fmt(rec.get('states_per_second'), 0):>8s} st/s  "
                  f"(search {_secs(rec.get('search_seconds_median'))}, symbolic "
                  f"{_secs(rec.get('symbolic_seconds_median'))})  trace {_secs(rec.get('trace_seconds_median'))} s  "
                  f"peak {_fmt(rec.get('peak_mb'), 0)} MB"
                  + ("" if rec.get("deterministic", True) else "  NOT DETERMINISTIC")
                  + (f"  [{rec['error']}]" if rec.get("error") else ""), flush=True)
            if not rec.get("complete"):
                incomplete_at = ranks
            # the unreduced search: always at 2 and 4 ranks, further while it finishes in budget
            if args.no_unreduced or not rec.get("complete"):
                continue
            if unreduced_stop is not None and ranks not in UNREDUCED_MIN_RANKS:
                rec["unreduced"] = {"note": f"not run: incomplete at {unreduced_stop} ranks"}
                continue
            try:
                u = bench_unreduced(protocol, ranks, args)
            except Exception as exc:
                u = {"verdict": "error", "complete": False, "states": None,
                     "error": _sanitize(f"benchmark error: {type(exc).__name__}: {exc}")}
            rec["unreduced"] = u
            if u.get("states") and rec.get("states"):
                rec["reduction_ratio"] = round(u["states"] / rec["states"], 2)
                rec["reduction_ratio_is_lower_bound"] = not u["complete"]
            print(f"{'':28s} {'':3s}        unreduced {u['verdict'] or '?':10s} {_fmt(u.get('states')):>10s} states "
                  f"{_secs(u.get('seconds')):>7s} s" + (f"  ratio {rec['reduction_ratio']}" if 'reduction_ratio' in rec
                                                        else ""), flush=True)
            if not u["complete"] and unreduced_stop is None:
                unreduced_stop = ranks
        write(final=False)

    doc = write(final=True)
    print()
    for t in doc["targets"]:
        print(f"{t['result']:12s} {t['target']}: median {_secs(t['median_s'])} s (verdict {t.get('verdict')})")
    if doc["code_at_start"] != doc["code_at_end"] and not doc["frozen"]:
        print(f"WARNING: the package sources changed during the run: {doc['code_at_start']} -> "
              f"{doc['code_at_end']}", file=sys.stderr)
    print(f"\nwrote {out / 'bench_checker.json'} and {out / 'bench_checker.md'} "
          f"in {doc['total_seconds']:.0f} s")
    bad = [r for r in records if r.get("deterministic") is False]
    if bad:
        print("NOT DETERMINISTIC: " + ", ".join(f"{r['protocol']}@{r['ranks']}" for r in bad), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
