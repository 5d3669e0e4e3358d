"""NCCL's own collective as the baseline of `clockworks validate`: `calibrate/bench_nccl.cu` built
once per source and toolchain (cached), run under mpirun at the validated sizes (bytes per rank, in
nccl-tests' convention), and its JSON lines read back."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from pathlib import Path

from .. import ir
from ..calibrate import runner
from ..errors import MissingDependency, ValidateError
from . import launch


BUILD_TIMEOUT_S = 600.0  # NCCL's benchmark; nvcc takes about a minute


# postcondition (its label's first word) -> bench_nccl.cu's --ops name
NCCL_COLLECTIVE = {"allreduce": "allreduce", "allgather": "allgather", "reduce_scatter": "reducescatter",
                   "alltoall": "alltoall", "broadcast": "broadcast"}


NCCL_LINES = "nccl.jsonl"


def nccl_collective(sched: ir.Schedule) -> str | None:
    """bench_nccl.cu's op for the schedule's postcondition (all_reduce -> allreduce, ...), or None
    when it names none of them (or several)."""
    kinds = {expectation.label.split("(")[0] for expectation in sched.expect}
    if len(kinds) != 1:
        return None
    return NCCL_COLLECTIVE.get(kinds.pop())



def gpu_arch() -> str:
    """nvcc's -arch for the GPUs here (their compute capability), else sm_90."""
    rows = runner._csv_query(["compute_cap"]) or [{}]
    return runner.arch_from_compute_cap(rows[0].get("compute_cap", "")) or "sm_90"


def build_nccl_bench(build_dir: str, timeout: float = BUILD_TIMEOUT_S) -> str:
    """Compile calibrate/bench_nccl.cu into `build_dir` (within `timeout`); the binary's path."""
    nvcc = runner.find_nvcc()
    if nvcc is None:
        raise MissingDependency("the NCCL baseline needs nvcc: put the CUDA toolkit's bin on PATH or set CUDA_HOME")
    nccl_home = runner.find_wheel_lib("nccl", "nccl.h", "CLOCKWORKS_NCCL_HOME")
    if nccl_home is None:
        raise MissingDependency("the NCCL baseline needs NCCL's headers: pip install nvidia-nccl-cu13 (or set "
                                "CLOCKWORKS_NCCL_HOME)")
    compile_flags, link_flags, _how = runner.mpi_build_flags()
    os.makedirs(build_dir, exist_ok=True)
    command = runner.build_commands(nvcc, gpu_arch(), runner.HERE, Path(build_dir), nccl_home, None,
                                    compile_flags, link_flags)["nccl"]
    binary = os.path.join(build_dir, "bench_nccl")
    cached = _bench_cache(command, build_dir, runner.HERE / "bench_nccl.cu")
    if cached is not None and os.path.exists(cached):
        shutil.copy2(cached, binary)  # built before from the same source, toolchain and flags
        return binary
    log = os.path.join(build_dir, "bench_nccl.build.log")
    code, output = launch.run_bounded(command, None, timeout, log)
    if code != 0 or not os.path.exists(binary):
        why = f"did not finish within {timeout:g} s" if code is None else f"failed (exit {code})"
        tail = " / ".join(output.strip().splitlines()[-3:])
        raise ValidateError(f"building bench_nccl.cu {why}: {tail} (the whole log: {log})")
    if cached is not None:
        with contextlib.suppress(OSError):  # a cache that cannot be written only costs the next build
            os.makedirs(os.path.dirname(cached), exist_ok=True)
            shutil.copy2(binary, cached + ".tmp")
            os.replace(cached + ".tmp", cached)
    return binary


def _bench_cache(command: list[str], build_dir: str, source: Path) -> str | None:
    """Where a bench_nccl built by `command` is kept between validate calls (None: no cache): under
    $CLOCKWORKS_CACHE (default ~/.cache/clockworks), named by a hash of the source and the command
    (the compiler, the GPU architecture, NCCL's and MPI's paths and flags), so any change rebuilds."""
    root = os.environ.get("CLOCKWORKS_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "clockworks")
    try:
        text = source.read_bytes()
    except OSError:
        return None
    where = os.path.abspath(build_dir)
    key = hashlib.sha256(text + json.dumps([part.replace(where, "{build}") for part in command]).encode()).hexdigest()
    return os.path.join(root, f"bench_nccl-{key[:20]}")


def nccl_command(binary: str, op: str, sizes: list[int], ranks: int, out_file: str,
                 mpiexec: str | None = None) -> list[str]:
    """mpirun's line for bench_nccl: `op` at `sizes` (bytes per rank, its convention: all-gather the
    gathered output, reduce-scatter the input, all-to-all the total sent)."""
    mpiexec = mpiexec or launch.find_mpiexec()
    argv = [binary, "--ops", op, "--sizes", ",".join(str(size) for size in sizes), "--out", out_file,
            "--label", "validate"]
    as_root = hasattr(os, "geteuid") and os.geteuid() == 0
    return runner.mpirun_command(mpiexec, launch.flavor(mpiexec), ranks, argv, list(launch.NO_MULTICAST), as_root)


def nccl_sizes(sizes: list[int], ranks: int) -> list[int]:
    """The sizes bench_nccl accepts: multiples of 4 bytes x ranks."""
    return [size for size in sizes if size % (4 * ranks) == 0]


def parse_nccl(lines: list[dict]) -> tuple[dict | None, dict[int, dict]]:
    """bench_nccl's header line, and its measurements by bytes per rank."""
    header = next((line for line in lines if line.get("bench") == "nccl_header"), None)
    cells = {int(line["bytes"]): line for line in lines if line.get("bench") == "nccl" and "bytes" in line}
    return header, cells


def run_nccl_bench(binary: str, op: str, sizes: list[int], ranks: int, timeout: float,
                   work_dir: str) -> tuple[dict | None, dict[int, dict], str | None]:
    """NCCL's `op` at `sizes` (bytes per rank), one mpirun, within `timeout`: (header, measurements
    by bytes, what went wrong or None)."""
    out_file = os.path.join(work_dir, NCCL_LINES)
    with contextlib.suppress(FileNotFoundError):
        os.remove(out_file)
    command = nccl_command(binary, op, sizes, ranks, out_file)
    code, output = launch.run_bounded(command, None, timeout, os.path.join(work_dir, "nccl.log"), mark=out_file)
    text = Path(out_file).read_text() if os.path.exists(out_file) else output
    header, cells = parse_nccl(runner.parse_json_lines(text))
    problem = None
    if code != 0:
        why = f"did not finish within {timeout:g} s" if code is None else f"exited with code {code}"
        tail = " / ".join(output.strip().splitlines()[-3:])
        problem = f"NCCL's {op} (bench_nccl) {why}; measured {len(cells)} of {len(sizes)} sizes: {tail}"
    return header, cells, problem
