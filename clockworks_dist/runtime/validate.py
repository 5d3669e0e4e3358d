"""`clockworks validate`: build a schedule's generated program, run it under mpirun, check it bit for
bit, time it, and set it beside the prediction and NCCL's own collective (DESIGN.md, "Execution").

Per size of the main buffer (bytes per rank, as `clockworks predict` counts them), top to bottom:
1. trace the schedule at that size and check it (an unverified schedule is refused: `no_check`);
2. the checker's values (`runtime.expected.build_reference`) and, per rank, its expectation file
   (`write_expectations`, the format in `codegen/__init__.py`);
3. generate the program (`program.generate`), compile it (`build.compile_program`);
4. run it under the runtime's launcher (`runtime.launch.run` with the program as each rank's
   command, NVLink multicast off), which ends hangs and crashes within the timeout and leaves no
   process behind; a rank that dumped its memory is compared again with every execution of the
   checker (`recompare`); the verdict (`runtime.verdict.summarize`) and the times, eager and graph;
5. predict the same cell with a calibrated topology (eager and graph modes);
then NCCL's collective for the schedule's postcondition at the same sizes (`calibrate/bench_nccl.cu`),
and the results folder: `results.json`, `results.md` (`render_table`), `results.png` (`plot_cells`).

`--launcher slurm` does steps 1-3 here, writes every job directory and an sbatch script
(`write_sbatch`) that builds, runs each size with `srun --mpi=pmix` and summarises (`collect`) on
the cluster. `--backend cupy` runs the schedule with the cupy executor (`clockworks run`'s path)
instead of generated code.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import datetime
import json
import os
import shlex
import shutil
import struct
import sys
import tempfile
from pathlib import Path

import numpy as np

from .. import hygiene, ir
from ..calibrate import runner
from ..dsl import bounded
from ..errors import ClockworksError, MissingDependency, ValidateError
from . import job as job_mod
from . import launch, verdict
from . import progress as progress_mod
from .compare import annotate, compare_rank
from .worker import _merge
from .expected import Reference, build_reference, expect_rank
from ..semantics.numeric import storage
from ..dsl.message import size_text
from ..lowering import Build, Lowered, LoweringError, as_built, lower
from ..lowering.repeat import RepeatError
from ..report.validate import plot_cells, render_table, summary_lines
from .nccl_bench import (
    NCCL_LINES, build_nccl_bench, nccl_collective, nccl_sizes, parse_nccl, run_nccl_bench,
)

BACKENDS = ("nccl", "nvshmem", "cupy")
LAUNCHERS = ("mpirun", "local", "slurm")  # local: mpirun here, as mpirun
MAGIC = b"CWEXPECT"
VERSION = 1
DEFAULT_ITERS, DEFAULT_WARMUP, DEFAULT_TIMEOUT_S = 20, 2, 60.0
# The launcher's backstop: a program gets its --timeout for its run, counted once MPI, NCCL or NVSHMEM and
# its buffers are set up; the launcher ends the job this much later (start-up, the report, the exit), so
# each rank can say where it was.
STARTUP_S = 30.0
SEARCH_SHARE = 0.5  # of the timeout, for the checker's search of every final value
SAVED_FILES = ("stdout.txt", "stderr.txt")  # kept from a job directory when a cell does not match
MANIFEST = "validate.json"
SBATCH = "validate.sbatch"


# ------------------------------------------------------------------------------ expectation files
def expect_file(directory: str, rank: int) -> str:
    """Where rank `rank` finds its expected values in a job directory."""
    return os.path.join(directory, f"expect{rank}.bin")


def dump_file(directory: str, rank: int, iteration: int) -> str:
    """Where rank `rank` writes its memory when the check after run `iteration` differs from the
    expected values."""
    return os.path.join(directory, f"dump{rank}_{iteration}.bin")


def mask_ranges(mask: np.ndarray) -> np.ndarray:
    """The runs of True in `mask` as (start, stop) rows, little-endian uint64 (vectorised: a gigabyte
    buffer's mask takes a few passes of numpy, no Python loop)."""
    mask = np.asarray(mask, dtype=bool)
    if not mask.size:
        return np.zeros((0, 2), dtype="<u8")
    edges = np.flatnonzero(mask[1:] != mask[:-1]) + 1
    bounds = np.concatenate(([0], edges, [mask.size]))
    starts, stops = bounds[:-1], bounds[1:]
    keep = mask[starts]
    return np.stack([starts[keep], stops[keep]], axis=1).astype("<u8")


def to_device(values: np.ndarray, dtype: str) -> np.ndarray:
    """Values in runtime storage as the device holds them: bfloat16 (stored as float32 holding
    bfloat16 values) becomes its 2-byte bits, the top half of the float32; the rest little-endian."""
    if dtype == "bfloat16":
        bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
        return (bits >> np.uint32(16)).astype("<u2")
    return np.ascontiguousarray(values, dtype=storage(dtype).newbyteorder("<"))


def from_device(raw: np.ndarray, dtype: str) -> np.ndarray:
    """The inverse of `to_device`: device bytes (uint8) as runtime storage."""
    raw = np.ascontiguousarray(raw, dtype=np.uint8)
    if dtype == "bfloat16":
        return (raw.view("<u2").astype(np.uint32) << np.uint32(16)).view(np.float32)
    return raw.view(storage(dtype).newbyteorder("<")).astype(storage(dtype))


def _fit(array: np.ndarray | None, count: int, fill=0) -> np.ndarray | None:
    """`array` cut or padded to `count` elements (a buffer the atoms do not cover to its end)."""
    if array is None or len(array) == count:
        return array
    out = np.full(count, fill, dtype=array.dtype)
    out[:min(count, len(array))] = array[:count]
    return out


def _write_section(handle, mask: np.ndarray | None, values: np.ndarray | None, dtype: str) -> None:
    ranges = mask_ranges(mask) if mask is not None else np.zeros((0, 2), dtype="<u8")
    handle.write(struct.pack("<Q", len(ranges)))
    ranges.tofile(handle)
    if len(ranges):
        to_device(values, dtype).tofile(handle)


def write_expectations(directory: str, sched: ir.Schedule, reference: Reference) -> list[str]:
    """Write `expect<k>.bin` for every rank of `sched` into `directory` (the format in
    `codegen/__init__.py`), from the checker's values; the paths, by rank."""
    paths = []
    for program in sched.programs:
        expect = expect_rank(reference, program.rank)
        words = len(expect.signals)
        path = expect_file(directory, program.rank)
        with open(path, "wb") as handle:
            handle.write(struct.pack("<8sIIII", MAGIC, VERSION, program.rank, len(program.buffers), words))
            for decl in program.buffers:
                want = expect.buffers[decl.name]
                handle.write(struct.pack("<QII", decl.count, ir.DTYPE_BYTES[decl.dtype], 0))
                _write_section(handle, _fit(want.checked, decl.count, False), _fit(want.expected, decl.count),
                               decl.dtype)
                _write_section(handle, _fit(want.post_mask, decl.count, False), _fit(want.post, decl.count),
                               decl.dtype)
            handle.write(struct.pack("<Q", words))
            expect.signals.astype("<u8").tofile(handle)
            expect.signals_checked.astype(np.uint8).tofile(handle)
        paths.append(path)
    return paths


# ------------------------------------------------------------------------------------ dumps
def read_dump(path: str, sched: ir.Schedule, rank: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Rank `rank`'s memory as its program dumped it: every buffer (runtime storage dtype, by
    name) and its signal words (uint64)."""
    program = sched.programs[rank]
    sizes = [decl.count * ir.DTYPE_BYTES[decl.dtype] for decl in program.buffers]
    words = sum(decl.count for decl in program.signals)
    want = sum(sizes) + 8 * words
    got = os.path.getsize(path)
    if got != want:
        raise ValidateError(f"{path}: rank {rank}'s dump holds {got:,} bytes, but its buffers "
                            f"({', '.join(d.name for d in program.buffers)}) and {words} signal words take "
                            f"{want:,}: the program was generated from another schedule (generate it again)")
    raw = np.fromfile(path, dtype=np.uint8)
    memory, offset = {}, 0
    for decl, size in zip(program.buffers, sizes):
        memory[decl.name] = from_device(raw[offset:offset + size], decl.dtype)
        offset += size
    return memory, raw[offset:].view("<u8").astype(np.uint64)


def recompare(line: dict, directory: str, sched: ir.Schedule, reference: Reference) -> dict:
    """A rank line whose program dumped its memory (`compare.dumps`: the checks that differed from
    the reference execution), each dump compared again on the host with every execution of the
    checker: a value another execution leaves is no mismatch. The line's `compare` and `status` are
    replaced (the program's own counts of checked elements over all its checks are kept); returns
    the line."""
    found = line.get("compare") or {}
    if not found.get("dumped") or reference is None:
        return line
    rank = line["rank"]
    total, expect = None, expect_rank(reference, rank)
    for iteration in found.get("dumps") or []:
        path = dump_file(directory, rank, iteration)
        if not os.path.exists(path):
            line["message"] = (f"rank {rank} says it dumped its memory, but {os.path.basename(path)} is missing "
                               "(the program's dump failed: is the job directory writable?)")
            return line
        memory, signals = read_dump(path, sched, rank)
        comparison = compare_rank(expect, memory, signals, iteration)
        total = comparison if total is None else _merge(total, comparison)
    if total is None:
        return line
    annotate(reference, total.first)
    again = total.to_json()
    again.update(checked=found.get("checked", again["checked"]),
                 post_checked=found.get("post_checked", again["post_checked"]), dumped=True,
                 dumps=found.get("dumps"), recompared=True)
    line["compare"] = again
    if line["status"] in ("match", "mismatch"):
        line["status"] = "match" if total.ok else "mismatch"
    return line


# ------------------------------------------------------------------------------- running one program
def program_argv(binary: str, iters: int, warmup: int, timeout: float | None, graph: bool) -> list[str]:
    """Each rank's command line (the contract in `codegen/__init__.py`); "{dir}": the job directory."""
    argv = [os.fspath(binary), "--job", "{dir}", "--iters", str(iters), "--warmup", str(warmup)]
    if timeout is not None:
        argv += ["--timeout", f"{timeout:g}"]
    return argv if graph else argv + ["--no-graph"]


def launcher_timeout(timeout: float | None) -> float | None:
    """The launcher's bound on a program whose own bound is `timeout` (None: none)."""
    return None if timeout is None else timeout + STARTUP_S


def timing(lines: list[dict], key: str = "seconds", skip: int = 0) -> dict | None:
    """Per run, the slowest rank's time in `key` (after the first `skip`); median, min and max in
    us (`verdict`'s convention)."""
    return verdict._timing([{"seconds": (line.get(key) or [])[skip:]} for line in lines])


def summarize_run(sched: ir.Schedule, reference: Reference | None, outcome: launch.Outcome,
                  directory: str) -> dict:
    """One program's run summed up: dumped lines compared again, the verdict, eager and graph times."""
    for line in outcome.lines:
        recompare(line, directory, sched, reference)
    summary = verdict.summarize([sched], outcome)
    result = summary["results"][0]
    result["graph_time"] = timing(result["ranks"], "graph_seconds")
    result["checked"] = sum((line.get("compare") or {}).get("checked", 0) for line in result["ranks"])
    if result["verdict"] == "match":  # a program checks after some runs only, not after each iteration
        others = sum((line.get("compare") or {}).get("other_execution", 0) for line in result["ranks"])
        also = f" ({others:,} hold the value of another execution of the checker)" if others else ""
        result["message"] = (f"results match: {result['checked']:,} comparisons of elements and signal words "
                             f"(every rank, every check) equal the checker's values{also}")
    result["returncode"] = outcome.returncode
    if result["verdict"] in ("crash", "hang") and outcome.stderr.strip():
        result["mpiexec_stderr"] = outcome.stderr
    if reference is not None and reference.note:
        result["note"] = reference.note
    return result


def _job(sched: ir.Schedule, reference: Reference | None, timeout: float | None, iters: int, backend: str,
         nbytes: int | None) -> job_mod.Job:
    item = job_mod.Item(name=sched.name, world=sched.world, schedule_json=sched.to_json(), reference=reference,
                        timeout=timeout, backend=backend, nbytes=nbytes)
    return job_mod.Job(items=[item], ranks=sched.world, iters=iters, backend=backend)


def prepare_job_dir(directory: str, sched: ir.Schedule, reference: Reference | None, timeout: float | None,
                    iters: int, backend: str, nbytes: int | None = None) -> job_mod.Job:
    """A job directory a program runs in: the job (for `collect`), every rank's expected values
    (none when no execution of the checker finishes: the ranks only run), the progress file."""
    job = _job(sched, reference, timeout, iters, backend, nbytes)
    job_mod.write(directory, job)
    if reference is not None and reference.final is not None:
        write_expectations(directory, sched, reference)
    progress_mod.create(os.path.join(directory, job_mod.PROGRESS_FILE), job.ranks)
    return job


def run_program(binary: str, sched: ir.Schedule, reference: Reference | None, ranks: int | None = None,
                timeout: float | None = DEFAULT_TIMEOUT_S, iters: int = DEFAULT_ITERS,
                warmup: int = DEFAULT_WARMUP, graph: bool = True, env: dict | None = None, *,
                backend: str = "nccl", nbytes: int | None = None, save_to: str | None = None) -> dict:
    """Run a generated program of `sched` under mpiexec (one rank per process, NVLink multicast
    off): its run bounded by `timeout` seconds (the program's --timeout; the launcher ends the job
    `STARTUP_S` later at the latest), and return its result: `verdict` (match, ran, mismatch, hang,
    crash), `message`, each rank's line, `time` (eager) and `graph_time` (us: median, min, max of
    the slowest rank per run), `checked`. `save_to`: a folder that keeps mpiexec's output of a run
    that did not match."""
    if ranks is not None and ranks != sched.world:
        raise ValidateError(f"{sched.name} is traced at {sched.world} ranks, but the run asks for {ranks} "
                            "(trace it again at that size)")
    directory = tempfile.mkdtemp(prefix="clockworks-validate-")
    try:
        job = _job(sched, reference, timeout, iters, backend, nbytes)
        if reference is not None and reference.final is not None:
            write_expectations(directory, sched, reference)
        argv = program_argv(binary, iters, warmup, timeout, graph)
        outcome = launch.run(job, timeout=launcher_timeout(timeout), env=env, argv=argv, directory=directory)
        result = summarize_run(sched, reference, outcome, directory)
        if save_to and result["verdict"] != "match":
            os.makedirs(save_to, exist_ok=True)
            for name in SAVED_FILES + tuple(f"rank{r}.jsonl" for r in range(sched.world)):
                if os.path.exists(os.path.join(directory, name)):
                    shutil.copy(os.path.join(directory, name), os.path.join(save_to, name))
        return result
    finally:
        shutil.rmtree(directory, ignore_errors=True)


# ----------------------------------------------------------------------------------- bounded runs


# ------------------------------------------------------------------------------- the NCCL baseline


# ----------------------------------------------------------------------------------- predictions
def pick_topology(topology: str | None, world: int, gpu_names: list[str]):
    """The topology to predict with: `topology` when given (a shipped name means its calibrated
    file when one ships: `topology.calibrated`), else the calibrated one of this machine (a shipped
    file under measured/ whose provenance names these GPUs and that has `world` of them).
    (topology or None, a note saying which and why)."""
    from ..topology import choose_topology, gpus, load_topology
    from ..topology.calibrated import CALIBRATED_DIR

    if topology:
        chosen = choose_topology(topology)
        topo = chosen.topology
        if len(gpus(topo)) < world:
            raise ValidateError(f"--topology {topology}: {topo.name} has {len(gpus(topo))} GPUs, but the schedule "
                                f"has {world} ranks (give a topology of this machine)")
        return topo, f"{topo.name}, {chosen.describe()}"
    names = sorted(set(gpu_names))
    if not names:
        return None, "no prediction: no GPU is visible here to pick a calibrated topology (pass --topology)"
    for path in sorted(CALIBRATED_DIR.glob("*.yaml")):
        topo = load_topology(path)
        made_on = topo.provenance.gpu if topo.provenance else None
        if made_on and names == [made_on] and len(gpus(topo)) >= world:
            return topo, f"{topo.name}, calibrated on {made_on} ({topo.provenance.date})"
    from ..topology.calibrated import library_error_text
    from ..topology.model import DATA_DIR

    for path in sorted(DATA_DIR.glob("*.yaml")):  # a shipped description of these GPUs: the library's constants
        topo = load_topology(path)
        made_on = topo.provenance.gpu if topo.provenance else None
        if made_on and names == [made_on] and topo.nodes == 1 and len(gpus(topo)) >= world:
            return topo, (f"{topo.name}, uncalibrated ({path.name}: {topo.provenance.method or 'described'}; the "
                          f"library's constants: {library_error_text(topo)})")
    return None, (f"no prediction: no topology of {', '.join(names)} x {world} ships with clockworks "
                  "(run clockworks topology detect there and pass --topology FILE, or calibrate there)")


def predict_cell(sched: ir.Schedule, topo, mode: str) -> float:
    """The predicted time per run of `sched` on `topo` in `mode` (graph or eager), us: what
    `clockworks predict` prints for this schedule and size."""
    from ..perf.network import from_topology
    from ..perf.predict import simulate, steady_state_us
    from ..perf.simulate import compile_model

    network = from_topology(topo, sched.world)
    model = compile_model(sched)
    timeline = simulate(sched, network, topo.constants, mode, model=model)
    return steady_state_us(sched, timeline, topo.constants, mode, network, model=model)


def program_model(meta: dict) -> str | None:
    """The backend whose generated program's timed run `perf.program` models for a validate run
    described by `meta` (its backend and packets), or None where it does not: the cupy executor
    (timed from Python) and put_signals lowered to packets. There the prediction is the schedule's
    own ops, as `clockworks predict` times them. A kernel per call is modelled (`kernel_splits`)."""
    if meta.get("backend") not in ("nccl", "nvshmem") or meta.get("packets"):
        return None
    return meta["backend"]


def build_meta(build: Build, lowered: list[Lowered]) -> dict:
    """How the run was lowered, as its results record it (`build_of` reads it back): calls and their
    separator, a kernel per call or one, where the progress words are, packets (with each size's
    lowered words) and copy-engine sizes."""
    calls, nvshmem = build.calls, build.backend == "nvshmem"
    return {"calls": calls, "between": build.between if calls > 1 else None,
            "kernels": ("per call" if build.kernel_per_call else "one") if calls > 1 and nvshmem else None,
            # where an NVSHMEM kernel writes its progress words: GPU memory, copied to the host beside the
            # kernel (validate never passes --host-progress); runs from before this was recorded wrote
            # them to host-mapped memory until 2026-11-23 08:27 UTC, which costs each op a PCIe round
            "progress_words": ("host" if build.host_progress else "gpu") if nvshmem else None,
            "packets": ({"max_bytes": build.packets, "channels": [len(low.packets.channels) for low in lowered],
                         "refused": lowered[0].packets.refused[:8]} if build.packets else None),
            "copy_engine": ({"min_bytes": build.copy_engine} if build.copy_engine else None)}


def build_of(meta: dict) -> Build:
    """The `Build` of a validate run, read back from its results (`meta`, `results.json`'s top level):
    its backend, calls and separator, a kernel per call or one, packets and copy-engine sizes, and
    where its progress words were (`progress_words`; runs from before it was recorded: `host_progress`)."""
    calls = meta.get("calls") or 1
    return Build(backend=meta.get("backend") or "nccl", calls=calls, between=meta.get("between") or "barrier",
                 fuse_calls=calls > 1 and meta.get("kernels") != "per call",  # older runs: one kernel
                 packets=(meta.get("packets") or {}).get("max_bytes") or 0,
                 copy_engine=(meta.get("copy_engine") or {}).get("min_bytes") or 0,
                 host_progress=meta.get("progress_words") == "host")


def kernel_splits(sched: ir.Schedule, meta: dict) -> dict[int, list[int]] | None:
    """Where each call's kernel begins in the K-call schedule `sched` of a validate run with a kernel per
    call (`meta["kernels"]`), read back from a results folder; None for one kernel a run."""
    if meta.get("kernels") != "per call":
        return None
    from ..lowering.repeat import starts_of_repeated

    return starts_of_repeated(sched, meta.get("calls") or 1, meta.get("between") or "barrier")


def prediction_source(meta: dict) -> str:
    """What the predicted column predicts, in words, for the results' text."""
    if program_model(meta):
        return "the generated program's timed run (`perf/program.py`: the schedule's ops and the program's own costs)"
    if meta.get("packets") and meta.get("backend") == "nvshmem" and meta.get("launcher") == "local":
        return ("the generated program's timed run, its put_signals sent as packets (`perf/program.py`; packets "
                "are in no fit of the model)")
    return "the schedule's ops (`clockworks predict`; the program's own costs are not modelled for this run)"


def predictions(lowered: Lowered, topo, as_program: bool) -> tuple[dict | None, str | None]:
    """Eager and graph predictions of one cell ({mode}_us, for the whole run), or None and why: the
    timed run of the generated program of `lowered` (`perf.program.program_us`) when `as_program`,
    else the schedule's own ops (`predict_cell`)."""
    if topo is None:
        return None, None
    try:
        if as_program:
            from ..perf.program import program_us

            return {f"{mode}_us": round(program_us(lowered, topo, mode), 2) for mode in ("eager", "graph")}, None
        return {f"{mode}_us": round(predict_cell(lowered.sched, topo, mode), 2) for mode in ("eager", "graph")}, None
    except ClockworksError as exc:
        return None, f"no prediction: {exc}"


# ------------------------------------------------------------------------------------- the cells
def main_bytes(sched: ir.Schedule) -> int:
    """Bytes per rank of the main buffer, as `clockworks predict` counts them."""
    from ..perf.predict import main_buffer

    buf = main_buffer(sched)
    return buf.count * ir.DTYPE_BYTES[buf.dtype]


def _ratio(numerator, denominator) -> float | None:
    if numerator is None or not denominator:
        return None
    return round(numerator / denominator, 4)


def make_cell(nbytes: int, result: dict, predicted: dict | None, nccl: dict | None, notes: list[str]) -> dict:
    """One row of the results: the measured times of a run, its prediction, NCCL's time at the
    same size, the errors and speedups."""
    eager, graph = result.get("time"), result.get("graph_time")
    measured = {"eager": eager["median_us"] if eager else None, "graph": graph["median_us"] if graph else None}
    cell = {"bytes": nbytes, "size": size_text(nbytes), "verdict": result["verdict"], "message": result["message"],
            "eager": eager, "graph": graph, "predicted": predicted, "error": None, "nccl": nccl,
            "speedup_vs_nccl": None, "elements_checked": result.get("checked", 0), "notes": list(notes),
            "ranks": result.get("ranks", [])}
    if result.get("mpiexec_stderr"):
        cell["mpiexec_stderr"] = result["mpiexec_stderr"]
    if predicted:
        cell["error"] = {mode: _ratio((predicted[f"{mode}_us"] - measured[mode]) if measured[mode] else None,
                                      measured[mode]) for mode in ("eager", "graph")}
    if nccl and nccl.get("eager_us") is not None:
        cell["speedup_vs_nccl"] = {mode: _ratio(nccl.get(f"{mode}_us"), measured[mode]) for mode in ("eager", "graph")}
    if result.get("note"):
        cell["notes"].append(result["note"])
    return cell


def nccl_cell(op: str | None, found: dict[int, dict], nbytes: int, ranks: int, problem: str | None,
              none: str = "no NCCL collective") -> tuple:
    """NCCL's measurement of one size ({op, eager_us, graph_us, correct}) or None, and a note
    (`none` when there is no op to measure)."""
    if op is None:
        return None, none
    line = found.get(nbytes)
    if line is not None:
        return {"op": op, "eager_us": line.get("eager_us"), "graph_us": line.get("graph_us"),
                "correct": line.get("correct")}, None
    if nbytes % (4 * ranks):
        return None, f"NCCL's {op} not measured: {nbytes} bytes is not a multiple of 4 x {ranks} ranks"
    return None, problem or f"NCCL's {op} not measured at {nbytes} bytes"


# ------------------------------------------------------------------------------------ the outputs


def machine_provenance() -> dict:
    """The GPUs (nvidia-smi), driver, MPI and wheels here."""
    try:
        mpiexec = launch.find_mpiexec()
    except MissingDependency:
        mpiexec = None
    found = runner.collect_provenance(runner.find_nvcc(), mpiexec)
    names = [gpu.get("name") for gpu in found.get("gpus") or []]
    keep = ("date_utc", "gpus", "driver", "nvidia_smi_topo", "nvcc_version", "mpi_version", "wheels", "python",
            "platform", "env")
    return {"gpu_names": names, **{key: found.get(key) for key in keep}}


def write_results(out_dir: str, cells: list[dict], meta: dict) -> dict:
    """results.json, results.md and results.png in `out_dir`; the JSON's content."""
    worst = max((cell["verdict"] for cell in cells), key=verdict.VERDICTS.index, default="not run")
    report = {"verdict": worst, **meta, "cells": cells}
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "results.json"), "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=1)
    with open(os.path.join(out_dir, "results.md"), "w", encoding="utf-8") as handle:
        handle.write(render_table(cells, meta, prediction_source(meta), launch.NO_MULTICAST))
    written = ["results.json", "results.md"]
    try:  # the measurements are kept even where matplotlib is missing (plot them elsewhere: `replot`)
        plot_cells(cells, os.path.join(out_dir, "results.png"),
                   f"{meta.get('schedule')}, {meta.get('ranks')} ranks, {meta.get('backend')}")
        written.append("results.png")
    except MissingDependency as exc:
        report["plot_note"] = f"results.png not written: {exc}"
    report["files"] = [os.path.join(out_dir, name) for name in written]
    return report


def replot(out_dir: str) -> str:
    """results.png again from a folder's results.json (made where matplotlib was missing)."""
    with open(os.path.join(out_dir, "results.json"), encoding="utf-8") as handle:
        report = json.load(handle)
    path = os.path.join(out_dir, "results.png")
    plot_cells(report["cells"], path, f"{report.get('schedule')}, {report.get('ranks')} ranks, {report.get('backend')}")
    return path


# ------------------------------------------------------------------------------------ Slurm
def write_sbatch(path: str, out_dir: str, cells: list[dict], ranks: int, *, nodes: int = 1, iters: int,
                 warmup: int, graph: bool, timeout: float, nccl: dict | None, python: str | None = None,
                 name: str = "clockworks-validate", account: str | None = None, partition: str | None = None) -> str:
    """An sbatch script that, on the cluster: turns NVLink multicast off, builds every program and
    NCCL's benchmark (`python -m clockworks_dist.runtime.validate build OUT`), runs each size with
    `srun --mpi=pmix` (one task per GPU, each bounded by `timeout`), NCCL's collective, and sums up
    (`... validate collect OUT`). `cells`: {source, binary, job} per size, paths. Returns the text."""
    python = python or sys.executable
    q = shlex.quote
    per_run = int(launcher_timeout(timeout))
    limit = 600 + per_run * (len(cells) + 1)  # builds, every size, NCCL, the summary
    lines = ["#!/bin/bash", f"#SBATCH --job-name={q(name)}", f"#SBATCH --nodes={nodes}", f"#SBATCH --ntasks={ranks}",
             f"#SBATCH --ntasks-per-node={-(-ranks // nodes)}", "#SBATCH --gpus-per-task=1",
             f"#SBATCH --time={limit // 3600:02d}:{limit % 3600 // 60:02d}:{limit % 60:02d}",
             f"#SBATCH --output={q(os.path.join(out_dir, 'slurm-%j.out'))}"]
    if account:
        lines.append(f"#SBATCH --account={q(account)}")
    if partition:
        lines.append(f"#SBATCH --partition={q(partition)}")
    lines += ["# Written by clockworks validate --launcher slurm: build, run every size, sum up.", "set -u"]
    lines += [f"export {key}={value}" for key, value in launch.NO_MULTICAST.items()]
    lines += [f"OUT={q(out_dir)}", f"PYTHON={q(python)}", "",
              "# every generated program and NCCL's benchmark, compiled on a node of the job",
              '"$PYTHON" -m clockworks_dist.runtime.validate build "$OUT" || exit 2', ""]
    srun = ["srun", "--mpi=pmix", f"--ntasks={ranks}", "--gpus-per-task=1", "--kill-on-bad-exit=0"]
    for cell in cells:
        argv = [part if part != "{dir}" else cell["job"] for part in
                program_argv(cell["binary"], iters, warmup, timeout, graph)]
        lines.append(f"# {cell['size']} per rank: the program's own --timeout reports each rank's op; "
                     "timeout(1) ends srun if it cannot")
        output = f" > {q(os.path.join(cell['job'], 'stdout.txt'))} 2> {q(os.path.join(cell['job'], 'stderr.txt'))}"
        lines.append(shlex.join(["timeout", "--kill-after=10", str(per_run), *srun, *argv]) + output)
    if nccl:
        bench = [os.path.join(out_dir, "build", "bench_nccl"), "--ops", nccl["op"], "--sizes",
                 ",".join(str(size) for size in nccl["sizes"]), "--out", os.path.join(out_dir, NCCL_LINES),
                 "--label", "validate"]
        lines += ["", f"# NCCL's own {nccl['op']} at the same sizes",
                  shlex.join(["timeout", "--kill-after=10", str(per_run * max(1, len(nccl["sizes"]) // 4 + 1)),
                              *srun, *bench]) + f" > {q(os.path.join(out_dir, 'nccl.log'))} 2>&1"]
    lines += ["", "# the verdicts, the times, the predictions: results.json, results.md, results.png",
              '"$PYTHON" -m clockworks_dist.runtime.validate collect "$OUT"', ""]
    text = "\n".join(lines)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(path, 0o755)
    return text


def _outcome_of(directory: str, ranks: int) -> launch.Outcome:
    """What a job directory holds after a run the launcher did not watch (srun): every rank's
    lines and progress row; a rank that started, did not finish and wrote no line died."""
    lines = launch._read_lines(directory, ranks)
    path = os.path.join(directory, job_mod.PROGRESS_FILE)
    rows = progress_mod.Progress(path).read() if os.path.exists(path) else []
    said = {line["rank"] for line in lines}
    dead = [rank for rank, row in enumerate(rows) if row["pid"] and row["phase"] != "finished" and rank not in said]
    stderr = ""
    with contextlib.suppress(OSError):
        stderr = Path(directory, "stderr.txt").read_text(errors="replace")[-launch.STDERR_TAIL:]
    return launch.Outcome(lines=lines, rows=rows, dead=dead, stderr=stderr)


def build_all(out_dir: str) -> None:
    """The sbatch script's build step: compile every program of the manifest (in parallel) and
    NCCL's benchmark; each binary lands where the script runs it."""
    manifest = _read_manifest(out_dir)
    from ..codegen import build

    def one(cell: dict) -> None:
        binary = build.compile_program(cell["source"], manifest["backend"], os.path.dirname(cell["binary"]))
        if os.path.abspath(binary) != os.path.abspath(cell["binary"]):
            shutil.copy(binary, cell["binary"])

    with concurrent.futures.ThreadPoolExecutor(max_workers=_build_workers(len(manifest["cells"]))) as pool:
        jobs = [pool.submit(one, cell) for cell in manifest["cells"]]
        if manifest.get("nccl"):
            jobs.append(pool.submit(build_nccl_bench, os.path.join(out_dir, "build")))
        for job in jobs:
            job.result()


def collect(out_dir: str) -> dict:
    """Sum up a results folder the sbatch script ran: every size's verdict and times (dumped
    memory compared again), the predictions, NCCL's lines; writes results.json/.md/.png."""
    manifest = _read_manifest(out_dir)
    header, found = (None, {})
    nccl_path = os.path.join(out_dir, NCCL_LINES)
    if os.path.exists(nccl_path):
        header, found = parse_nccl(runner.parse_json_lines(Path(nccl_path).read_text()))
    machine = machine_provenance()
    topo = None
    topo_note = None
    cells = []
    for entry in manifest["cells"]:
        job = job_mod.read(entry["job"])
        item = job.items[0]
        sched = ir.Schedule.from_json(item.schedule_json)
        if topo is None and topo_note is None:
            topo, topo_note = pick_topology(manifest.get("topology"), sched.world, machine["gpu_names"])
        result = summarize_run(sched, item.reference, _outcome_of(entry["job"], job.ranks), entry["job"])
        built = as_built(sched, build_of(manifest), kernel_splits(sched, manifest))
        predicted, why = predictions(built, topo, program_model(manifest) is not None)
        result, predicted = _per_call(result, predicted, manifest.get("calls") or 1)
        nccl, nccl_note = nccl_cell((manifest.get("nccl") or {}).get("op"), found, entry["bytes"], sched.world,
                                    None if header else "NCCL's benchmark wrote nothing (see nccl.log)")
        cells.append(make_cell(entry["bytes"], result, predicted, nccl, [n for n in (why, nccl_note) if n]))
    meta = {**{k: manifest[k] for k in ("schedule", "file", "backend", "ranks", "iters", "warmup", "graph",
                                          "timeout")},
            **{k: manifest.get(k) for k in ("params", "calls", "between", "kernels", "progress_words", "packets",
                                            "copy_engine")},
            "launcher": "slurm", "topology": topo_note, "nccl_op": (manifest.get("nccl") or {}).get("op"),
            "nccl_version": (header or {}).get("nccl_version"), "nccl_header": header, "machine": machine}
    return write_results(out_dir, cells, meta)


def _read_manifest(out_dir: str) -> dict:
    path = os.path.join(out_dir, MANIFEST)
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except OSError as exc:
        raise ValidateError(f"{path}: {exc.strerror or exc} (write the folder with clockworks validate "
                            "--launcher slurm first)") from None


def _build_workers(count: int) -> int:
    return max(1, min(count + 1, 8, (os.cpu_count() or 2) // 2))


# ---------------------------------------------------------------------------------- the command
def load_schedules(path: str, ranks: int | None, sizes, schedule_name: str | None, timeout: float | None,
                   size_bindings: dict[str, int] | None = None) -> tuple[list[ir.Schedule], list[int]]:
    """The schedule of `path` traced at `ranks` (at each of `sizes`: "1KiB..1GiB", "4096,1MiB" or a
    list of ints; bytes per rank of the main buffer; `size_bindings`: the other size symbols), within
    `timeout` (`dsl.bounded`); the main buffer's bytes per rank of each."""
    schedules, _ = bounded.load_sized(path, ranks, sizes, schedule_name, timeout, size_bindings)
    names = list(dict.fromkeys(sched.name for sched in schedules))
    if len(names) > 1:
        raise ValidateError(f"{path} defines {len(names)} schedules ({', '.join(names)}); name the one to validate "
                            "with --schedule NAME")
    return schedules, [main_bytes(sched) for sched in schedules]


def verify(sched: ir.Schedule, timeout: float | None) -> None:
    """`ValidateError` unless the checker verifies `sched` (the first error, and the fix)."""
    from ..check import check

    result = check(sched, timeout=timeout)
    if result.verdict == "verified":
        return
    where = f"{sched.loc.file}:{sched.loc.line}: {sched.name} at {sched.world} ranks"
    if result.verdict == "violated":
        first = result.errors[0]
        op = next((ref for ref in first.ops if ref.loc is not None), None)
        if op is not None:  # the user's line of the first op involved, and its rank
            where = f"{op.loc.file}:{op.loc.line}: {sched.name} at {sched.world} ranks, rank {op.rank}"
        raise ValidateError(f"{where}: the checker finds {len(result.errors)} error(s), first {first.kind}: "
                            f"{first.message} (run clockworks check on it; fix the schedule, or pass --no-check "
                            "to run it anyway)")
    raise ValidateError(f"{where}: the check did not finish (stopped by {result.stopped_by} in "
                        f"{result.stopped_in or 'the search'}); raise --timeout, or pass --no-check")


def reference_of(sched: ir.Schedule, search: float | None, no_check: bool) -> Reference | None:
    """The checker's values of `sched`; with `no_check`, None for a schedule whose sends, recvs or
    collectives do not even match (the program then runs without expected values: "ran", or a hang)."""
    from ..errors import ScheduleError

    try:
        return build_reference(sched, timeout=search)
    except ScheduleError:
        if not no_check:
            raise
        return None


# The switch of a generated NVSHMEM program that lets several ranks of a node share one GPU.
SHARE_GPUS_ENV = "CW_SHARE_GPUS"


def _require_gpus(ranks: int, backend: str) -> None:
    visible = runner.gpu_count()
    if visible < ranks:
        raise ValidateError(f"--np {ranks}: the {backend} program runs one rank per GPU, but {visible} GPU(s) are "
                            "visible here (nvidia-smi -L): run on a machine with enough GPUs, or write a Slurm job "
                            "with --launcher slurm")


def _generate(lowered: Lowered, path: str) -> str:
    """Write the program of `lowered` (`lowering.lower`) to `path`; an op the backend cannot emit is named."""
    from ..semantics.backends import Unsupported
    from ..codegen import program

    backend = lowered.build.backend
    try:
        text = program.generate(lowered)
    except Unsupported as exc:
        raise ValidateError(f"{lowered.sched.name}: {exc} (the {backend} backend cannot generate it: try another "
                            "--backend)") from None
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    return path


def validate_file(path: str, backend: str = "nccl", ranks: int | None = None, sizes=None,
                  timeout: float | None = DEFAULT_TIMEOUT_S, out_dir: str | None = None, iters: int = DEFAULT_ITERS,
                  warmup: int = DEFAULT_WARMUP, graph: bool = True, launcher: str = "local",
                  topology: str | None = None, schedule_name: str | None = None, no_check: bool = False,
                  size_bindings: dict[str, int] | None = None, nccl: bool = True, nodes: int = 1, calls: int = 1,
                  between: str = "barrier", packets: int = 0, fuse_calls: bool = False,
                  copy_engine: int = 0, share_gpus: bool = False) -> dict:
    """`clockworks validate FILE`: see the module docstring. Returns the report (`results.json`'s
    content: `verdict`, the worst over the sizes, and one cell per size); with `--launcher
    slurm`, what was written (`verdict` "written", `sbatch`). `nccl`: measure NCCL's collective.
    Each schedule is lowered once, by `lowering.lower(sched, Build(backend, calls, between, fuse_calls,
    packets, copy_engine))`. `calls` > 1: each run is `calls` back-to-back calls (`lowering.repeat`,
    separated by `between`), checked and generated as one schedule; times and predictions are then per
    call. `packets` > 0 (nvshmem): put_signals of at most that many bytes go as flag-in-data packets
    (`lowering.packets`); the rewritten schedule is the one checked, run and compared. With `calls` > 1
    the NVSHMEM program launches one kernel per call, as a library call would (`fuse_calls`: one kernel
    for them all). `copy_engine` > 0 (nvshmem): puts and put_signals of at least that many bytes go on
    the copy engine (`lowering.nvshmem_plan.copy_engine_ops`); the schedule checked is the same (it only
    orders more). `share_gpus` (nvshmem): the ranks share the GPUs here, several PEs on one GPU
    (NVSHMEM's multiple processes per GPU), to check the program's results on a machine with fewer
    GPUs than ranks; its times are then no figure of a machine with a GPU per rank, and NCCL is not
    measured (NCCL refuses two ranks on one GPU)."""
    if share_gpus and backend != "nvshmem":
        raise ValidateError(f"--share-gpus: only the nvshmem program runs several ranks on one GPU (NVSHMEM's "
                            f"multiple processes per GPU); the {backend} backend needs a GPU per rank (NCCL refuses "
                            "two ranks on one GPU)")
    if share_gpus and launcher == "slurm":
        raise ValidateError("--share-gpus runs the ranks here, under mpirun; a Slurm job asks for a GPU per task "
                            "(leave out --share-gpus or --launcher slurm)")
    if share_gpus:
        nccl = False
    if backend not in BACKENDS:
        raise ValidateError(f"unknown backend {backend!r}; clockworks validate knows {', '.join(BACKENDS)}")
    if launcher not in LAUNCHERS:
        raise ValidateError(f"unknown launcher {launcher!r}; one of {', '.join(LAUNCHERS)}")
    schedules, nbytes = load_schedules(path, ranks, sizes, schedule_name, timeout, size_bindings)
    try:
        build = Build(backend, calls, between, fuse_calls, packets, copy_engine)
        lowered = [lower(sched, build) for sched in schedules]
    except LoweringError as exc:
        raise ValidateError(str(exc)) from None
    except RepeatError as exc:
        raise ValidateError(f"--calls {calls}: {exc}") from None
    schedules = [low.sched for low in lowered]
    if not no_check:
        for sched in schedules:
            verify(sched, timeout)
    out_dir = out_dir or f"validate-{schedules[0].name}"
    # checked now, created once nothing is missing: a refusal (no GPU, no MPI) leaves no empty folder
    hygiene.check_out_dir(out_dir, "--out")
    search = None if timeout is None else timeout * SEARCH_SHARE
    meta = {"schedule": schedules[0].name, "file": path, "backend": backend, "ranks": schedules[0].world,
            "iters": iters, "warmup": warmup, "graph": graph and backend != "cupy", "timeout": timeout,
            "nccl_op": nccl_collective(schedules[0]) if nccl else None, "nccl": nccl, "no_check": no_check,
            "params": dict(schedules[0].params),  # the family's variant (cw.param, cw.choice), if any
            **build_meta(build, lowered)}
    if share_gpus:
        meta["shared_gpus"] = True
    if launcher == "slurm":
        return _prepare_slurm(lowered, nbytes, out_dir, meta, topology, search, nodes)
    launch.find_mpiexec()
    if backend == "cupy":
        return _validate_cupy(schedules, nbytes, out_dir, meta, topology, search)
    _require_gpus(1 if share_gpus else schedules[0].world, backend)
    from ..codegen import build

    toolchain = build.find_toolchain(backend)
    toolchain.require(backend)
    hygiene.prepare_out_dir(out_dir, "--out")
    build_root = os.path.join(out_dir, "build")
    with concurrent.futures.ThreadPoolExecutor(max_workers=_build_workers(len(schedules))) as pool:
        bench = pool.submit(build_nccl_bench, build_root) if meta["nccl_op"] and schedules[0].world > 1 else None
        binaries = []
        for low, size in zip(lowered, nbytes):
            folder = os.path.join(build_root, str(size))
            os.makedirs(folder, exist_ok=True)
            source = _generate(low, os.path.join(folder, f"{low.sched.name}.cu"))
            binaries.append(pool.submit(build.compile_program, source, backend, folder, toolchain))
        binaries = [os.fspath(job.result()) for job in binaries]
        bench_binary, bench_problem = None, None
        if bench is not None:
            try:
                bench_binary = bench.result()
            except ClockworksError as exc:
                bench_problem = f"no NCCL baseline: {exc}"
    results = []
    for sched, size, binary in zip(schedules, nbytes, binaries):
        reference = reference_of(sched, search, no_check)
        # --share-gpus: the program lets several ranks of a node share a GPU (its setup refuses that otherwise)
        env = {**os.environ, SHARE_GPUS_ENV: "1"} if meta.get("shared_gpus") else None
        results.append(run_program(binary, sched, reference, sched.world, timeout, iters, warmup, graph, env,
                                   backend=backend, nbytes=size, save_to=os.path.join(out_dir, "runs", str(size))))
    return _finish(lowered, nbytes, results, out_dir, meta, topology, bench_binary, bench_problem, timeout)


def _finish(lowered: list[Lowered], nbytes, results, out_dir, meta, topology, bench_binary, bench_problem,
            timeout) -> dict:
    """NCCL's collective at the same sizes, the predictions, the results folder."""
    schedules = [low.sched for low in lowered]
    world = schedules[0].world
    header, found = None, {}
    if bench_binary is not None:
        wanted = nccl_sizes(nbytes, world)
        if wanted:
            bound = (timeout or DEFAULT_TIMEOUT_S) * max(1, len(wanted))
            header, found, bench_problem = run_nccl_bench(bench_binary, meta["nccl_op"], wanted, world, bound,
                                                          os.path.join(out_dir, "build"))
    machine = machine_provenance()
    topo, topo_note = pick_topology(topology, world, machine["gpu_names"])
    cells = []
    calls = meta.get("calls") or 1
    for low, size, result in zip(lowered, nbytes, results):
        # the program's run is modelled (`program_model`), and so is one whose put_signals went as packets
        modelled = program_model(meta) is not None or (low.packets is not None and meta["backend"] == "nvshmem")
        predicted, why = predictions(low, topo, modelled)
        result, predicted = _per_call(result, predicted, calls)
        nccl, nccl_note = nccl_cell(meta["nccl_op"] if world > 1 else None, found, size, world, bench_problem,
                                    none="no NCCL collective" if meta.get("nccl", True) else "NCCL not measured")
        cells.append(make_cell(size, result, predicted, nccl, [n for n in (why, nccl_note) if n]))
    meta = {**meta, "launcher": "local", "topology": topo_note, "nccl_version": (header or {}).get("nccl_version"),
            "nccl_header": header, "machine": machine,
            "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    if topo is None:
        meta["prediction_note"] = topo_note
    return write_results(out_dir, cells, meta)


def _per_call(result: dict, predicted: dict | None, calls: int) -> tuple[dict, dict | None]:
    """A run of `calls` calls (--calls): its timings and predictions divided among the calls."""
    if calls <= 1:
        return result, predicted

    def share(found):
        if not found:
            return found
        return {k: (round(v / calls, 3) if k.endswith("_us") and v is not None else v) for k, v in found.items()}

    result = {**result, "time": share(result.get("time")), "graph_time": share(result.get("graph_time"))}
    return result, ({k: round(v / calls, 2) for k, v in predicted.items()} if predicted else predicted)


def _validate_cupy(schedules, nbytes, out_dir, meta, topology, search) -> dict:
    """The cupy executor (`clockworks run --backend cupy`'s path): every size in one mpiexec job,
    `warmup` + `iters` iterations each, the first `warmup` left out of the times."""
    from . import select
    from .cupy_nccl import CUPY

    for sched in schedules:
        select.supported(CUPY, sched)
    select.require_gpus(schedules[0].world)
    launch.require_mpi4py()
    hygiene.prepare_out_dir(out_dir, "--out")
    timeout = meta["timeout"]
    warmup, iters = meta["warmup"], meta["iters"]
    items = [job_mod.Item(name=s.name, world=s.world, schedule_json=s.to_json(),
                          reference=reference_of(s, search, meta["no_check"]), timeout=timeout, nbytes=size)
             for s, size in zip(schedules, nbytes)]
    job = job_mod.Job(items=items, ranks=schedules[0].world, iters=warmup + iters, backend="cupy")
    total = None if timeout is None else timeout * len(items) + 30.0
    outcome = launch.run(job, timeout=total)
    summary = verdict.summarize(schedules, outcome)
    results = []
    for result, item in zip(summary["results"], items):
        result["time"] = timing(result["ranks"], "seconds", skip=warmup)
        result["graph_time"] = None
        result["checked"] = sum((line.get("compare") or {}).get("checked", 0) for line in result["ranks"])
        if item.reference is not None and item.reference.note:
            result["note"] = item.reference.note
        results.append(result)
    if summary["verdict"] in ("crash", "hang") and outcome.stderr.strip():
        results[-1]["mpiexec_stderr"] = outcome.stderr
    bench_binary, bench_problem = None, None
    if meta["nccl_op"] and schedules[0].world > 1:
        try:
            bench_binary = build_nccl_bench(os.path.join(out_dir, "build"))
        except ClockworksError as exc:
            bench_problem = f"no NCCL baseline: {exc}"
    return _finish(schedules, nbytes, results, out_dir, meta, topology, bench_binary, bench_problem, timeout)


def _prepare_slurm(lowered: list[Lowered], nbytes, out_dir, meta, topology, search, nodes) -> dict:
    """Generate every program, write every job directory and the sbatch script; nothing runs here."""
    schedules = [low.sched for low in lowered]
    if meta["backend"] == "cupy":
        raise ValidateError("--launcher slurm runs generated programs: use --backend nccl or nvshmem "
                            "(the cupy backend runs under clockworks run inside the allocation)")
    hygiene.prepare_out_dir(out_dir, "--out")
    out_dir = os.path.abspath(out_dir)
    # the sbatch script embeds these paths, #SBATCH lines included (which no quoting protects): plain
    # words only
    for what, path in (("--out", out_dir), ("the Python interpreter", sys.executable)):
        if not hygiene.shell_safe(path):
            raise ValidateError(f"--launcher slurm: {what} {path!r} holds spaces or shell syntax, which the sbatch "
                                "script cannot carry safely: use a folder named with letters, digits and ._-/+ only")
    cells = []
    for low, size in zip(lowered, nbytes):
        sched = low.sched
        folder = os.path.join(out_dir, "build", str(size))
        job_dir = os.path.join(out_dir, "runs", str(size))
        os.makedirs(folder, exist_ok=True)
        os.makedirs(job_dir, exist_ok=True)
        source = _generate(low, os.path.join(folder, f"{sched.name}.cu"))
        reference = reference_of(sched, search, meta["no_check"])
        prepare_job_dir(job_dir, sched, reference, meta["timeout"], meta["iters"], meta["backend"], size)
        cells.append({"bytes": size, "size": size_text(size), "source": source,
                      "binary": os.path.join(folder, sched.name), "job": job_dir})
    world = schedules[0].world
    nccl = None
    if meta["nccl_op"] and world > 1 and nccl_sizes(nbytes, world):
        nccl = {"op": meta["nccl_op"], "sizes": nccl_sizes(nbytes, world)}
    manifest = {**meta, "topology": topology, "nodes": nodes, "cells": cells, "nccl": nccl}  # the baseline to run
    with open(os.path.join(out_dir, MANIFEST), "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=1)
    script = os.path.join(out_dir, SBATCH)
    write_sbatch(script, out_dir, cells, world, nodes=nodes, iters=meta["iters"], warmup=meta["warmup"],
                 graph=meta["graph"], timeout=meta["timeout"] or DEFAULT_TIMEOUT_S, nccl=nccl,
                 name=f"validate-{meta['schedule']}")
    return {**manifest, "verdict": "written", "sbatch": script, "out": out_dir}


def main(argv: list[str] | None = None) -> int:
    """The sbatch script's steps: `python -m clockworks_dist.runtime.validate build|collect OUT`."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] not in ("build", "collect"):
        sys.stderr.write("usage: python -m clockworks_dist.runtime.validate build|collect OUT\n")
        return 2
    try:
        if argv[0] == "build":
            build_all(argv[1])
            return 0
        report = collect(argv[1])
    except ClockworksError as exc:
        sys.stderr.write(f"clockworks validate: error: {exc}\n")
        return 2
    print("\n".join(summary_lines(report)))
    return 0 if report["verdict"] == "match" else 1


if __name__ == "__main__":
    sys.exit(main())
