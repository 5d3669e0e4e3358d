"""The launcher: start `mpiexec` on a job, watch it, stop it, collect what every rank wrote.

`run(job)` writes the job into a private directory, starts

    mpiexec -disable-auto-cleanup -n N python -m clockworks_dist.runtime.worker DIR      (MPICH)
    mpiexec [--allow-run-as-root] [--oversubscribe] -x NCCL_NVLS_ENABLE ... -n N python ...  (Open MPI)

(the flavour read from `mpiexec --version`, `mpiexec_command`; or, with `argv`, any program that
follows the same contract: a generated CUDA program, `codegen`) in a session of its own, and polls
(every `POLL_S`) the ranks' result lines, their progress words and whether each rank's process is
alive. It stops the job by killing mpiexec's process group and every process that runs a rank of
it (Open MPI puts each rank in a process group of its own), so no process is left behind:
- when every rank has finished;
- when a rank stopped (timeout, error) or died without a line: after `GRACE_S`, the time the
  other ranks need to notice (mpiexec signals them) and write their own lines;
- at the job's deadline (`timeout`), or when no rank has moved for `stall` seconds: the ranks
  that never wrote a line are stuck (in C code, or a hang the rank cannot see); their progress
  words say in which op.

`-disable-auto-cleanup` keeps MPICH's mpiexec from killing every rank the moment one dies, so the
others can report where they were; the launcher kills them itself. Open MPI's mpirun has no such
switch: when a rank dies it sends the others SIGTERM (each writes where it was, as for MPICH's
SIGUSR1) and then SIGKILL, so its reports of the other ranks may be coarser; the rank that died is
still the one named.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from .. import hygiene
from ..errors import MissingDependency
from . import job as job_mod
from . import progress as progress_mod

POLL_S = 0.05
GRACE_S = 2.0  # after a rank stops or dies, how long the others get to write their lines
EXIT_WAIT_S = 5.0  # after every rank finished, how long mpiexec gets to exit by itself
STDERR_TAIL = 4000
VERSION_TIMEOUT_S = 10.0
MPI_HINT = "pip install mpi4py mpich (or: pip install 'clockworks-dist[mpi]')"
# NVLink multicast stays off in every process we start (NCCL, NVSHMEM and PyTorch each have a switch):
# the GPU machines this tool targets are run with it off, and a rank that loads NCCL or NVSHMEM
# inherits this environment whatever the backend.
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "NVSHMEM_DISABLE_NVLS": "1", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}


def find_mpiexec() -> str:
    """The `mpiexec` (else `mpirun`) on PATH, or `MissingDependency` naming the package that provides one."""
    found = shutil.which("mpiexec") or shutil.which("mpirun")
    if found is None:
        raise MissingDependency(f"no mpiexec on PATH: the mpich package provides one ({MPI_HINT})")
    return found


@functools.lru_cache(maxsize=8)
def flavor(mpiexec: str) -> str:
    """The MPI implementation of `mpiexec`: "mpich", "openmpi" or "other" (`mpi_flavor` of what
    `mpiexec --version` prints)."""
    from ..calibrate.runner import bounded_run

    done = bounded_run([mpiexec, "--version"], VERSION_TIMEOUT_S)  # its whole group stopped at the bound
    if done is None:
        return "other"
    return mpi_flavor(done[1] + done[2])


def mpi_flavor(version_text: str) -> str:
    """"openmpi" for Open MPI's `mpiexec --version` ("mpiexec (OpenRTE) 4.1.6"), "mpich" for
    MPICH's Hydra ("HYDRA build details"), else "other"."""
    text = version_text.lower()
    if "open mpi" in text or "openrte" in text or "open-mpi.org" in text or "prrte" in text:
        return "openmpi"
    if "hydra" in text or "mpich" in text:
        return "mpich"
    return "other"


def physical_cores() -> int:
    """The cores (not hardware threads) this process may run on: Open MPI's default slot count."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    cores = set()
    for cpu in cpus:
        try:
            with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/physical_package_id", encoding="ascii") as h:
                package = h.read().strip()
            with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/core_id", encoding="ascii") as h:
                cores.add((package, h.read().strip()))
        except OSError:
            cores.add(("cpu", str(cpu)))
    return max(len(cores), 1)


def mpiexec_command(mpiexec: str, flavor_name: str, ranks: int, argv: list[str], euid: int | None = None,
                    cores: int | None = None) -> list[str]:
    """The command line that starts `ranks` processes running `argv`, for an mpiexec of
    `flavor_name` ("mpich", "openmpi", "other"). Open MPI: `--allow-run-as-root` when `euid` is 0
    (it refuses root otherwise), `--oversubscribe` when there are more ranks than `cores`, and `-x`
    for each switch of `NO_MULTICAST`, so every rank has NVLink multicast off whatever its node."""
    euid = os.geteuid() if euid is None else euid
    if flavor_name == "mpich":
        return [mpiexec, "-disable-auto-cleanup", "-n", str(ranks), *argv]
    if flavor_name == "openmpi":
        command = [mpiexec]
        if euid == 0:
            command.append("--allow-run-as-root")
        if ranks > (physical_cores() if cores is None else cores):
            command.append("--oversubscribe")
        for name in NO_MULTICAST:
            command += ["-x", name]
        return [*command, "-n", str(ranks), *argv]
    return [mpiexec, "-n", str(ranks), *argv]


def require_mpi4py() -> None:
    """`MissingDependency` unless mpi4py is importable."""
    if importlib.util.find_spec("mpi4py") is None:
        raise MissingDependency(f"the mpi-cpu backend needs mpi4py ({MPI_HINT})")


def inside_mpi_job() -> bool:
    """Whether this process was started by an MPI launcher (MPICH/Hydra, Open MPI, PMIx, Slurm)."""
    return any(name in os.environ for name in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK"))


@dataclass
class Outcome:
    """What a job left: every line each rank wrote, the last progress rows, which ranks died."""

    lines: list[dict]
    rows: list[dict]
    dead: list[int] = field(default_factory=list)  # ranks whose process ended without a line, first
    killed: list[int] = field(default_factory=list)  # ... and those mpiexec killed after another died
    stopped_by: str | None = None  # "deadline" or "stall" when the launcher had to stop the job
    returncode: int | None = None
    stderr: str = ""
    seconds: float = 0.0


def _alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def _read_lines(directory: str, ranks: int) -> list[dict]:
    lines = []
    for rank in range(ranks):
        path = job_mod.results_file(directory, rank)
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as handle:
            for text in handle:
                if text.endswith("\n"):  # a line still being written is read next time
                    lines.append(json.loads(text))
    return lines


def _processes() -> dict[int, tuple[int, int, bytes]]:
    """Every process of this machine: pid -> (parent pid, process group, command line)."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                cmdline = handle.read()
        except OSError:
            continue
        found[int(entry)] = (int(fields[1]), int(fields[2]), cmdline)
    return found


def _job_processes(root: int, directory: str) -> set[int]:
    """mpiexec's descendants, and every process whose command line names the job's directory (a
    rank whose mpiexec is gone)."""
    table = _processes()
    mark = os.fsencode(directory)
    found = {pid for pid, (_ppid, _pgid, cmdline) in table.items() if mark in cmdline.split(b"\0")}
    children: dict[int, list[int]] = {}
    for pid, (ppid, _pgid, _cmdline) in table.items():
        children.setdefault(ppid, []).append(pid)
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    found.discard(os.getpid())
    return found


def _kill_group(proc: subprocess.Popen, directory: str | None = None) -> None:
    """SIGKILL every rank of the job and mpiexec's process group (MPICH keeps the ranks in it;
    Open MPI gives each rank a group of its own), then reap mpiexec."""
    ranks = _job_processes(proc.pid, directory) if directory else set()
    own = os.getpgrp()
    for pid in ranks:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            group = os.getpgid(pid)
            if group not in (own, proc.pid):
                os.killpg(group, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=EXIT_WAIT_S)
    if directory:
        _until_gone(proc, directory)


def _until_gone(proc: subprocess.Popen, directory: str) -> None:
    """A SIGKILL takes effect when the kernel gets to it: wait (up to EXIT_WAIT_S) until no process
    of the job is alive, killing again any that a late start or a slow exit left, so that the job
    has no process left when the launcher returns."""
    deadline = time.monotonic() + EXIT_WAIT_S
    while time.monotonic() < deadline:
        # mpiexec's descendants only while it is not reaped (its pid could be another's after)
        root = proc.pid if proc.poll() is None else -1
        # (and only processes that still name the job: a pid seen before may be another's by now)
        left = {pid for pid in _job_processes(root, directory) if pid != proc.pid and _alive(pid)}
        if not left:
            return
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(POLL_S)


class _Watch:
    """The launcher's view of a running job, updated every poll."""

    def __init__(self, job: job_mod.Job, directory: str, timeout: float | None, stall: float | None):
        self.job, self.directory = job, directory
        self.started = time.monotonic()
        self.deadline = None if timeout is None else self.started + timeout
        self.stall = stall
        self.progress = progress_mod.Progress(os.path.join(directory, job_mod.PROGRESS_FILE))
        self.last_rows: list[dict] = []
        self.moved = self.started
        self.stop_at: float | None = None
        self.gone: dict[int, int] = {}  # rank -> the poll that found its process gone, without a stop line
        self.polls = 0
        self.lines: list[dict] = []
        self.stopped_by: str | None = None

    def _notified(self, rank: int) -> bool:
        """Whether mpiexec told `rank` that another rank died (MPICH: SIGUSR1, Open MPI: SIGTERM)
        before it ended."""
        try:
            with open(job_mod.signals_file(self.directory, rank), "rb") as handle:
                seen = handle.read()
        except OSError:
            return False
        return signal.SIGUSR1 in seen or signal.SIGTERM in seen

    def classify(self) -> tuple[list[int], list[int]]:
        """(died, killed) among the ranks that ended without a stop line: `died` is the one that
        died first; `killed`, those mpiexec ended after it (SIGUSR1 reached them, or they still
        gave signs of life after the first stopped). A rank that raised is the first itself."""
        rows = self.last_rows
        raised = any(line["status"] == "error" for line in self.lines)
        candidates = [r for r in self.gone if not self._notified(r)]
        if raised or not candidates:
            return [], sorted(self.gone)
        first = min(candidates, key=lambda r: (self.gone[r], rows[r].get("beat", 0) if r < len(rows) else 0))
        return [first], sorted(r for r in self.gone if r != first)

    def poll(self) -> bool:
        """Update; True when the job should end now."""
        now = time.monotonic()
        self.polls += 1
        rows = self.progress.read()
        if [dict(row, beat=0) for row in rows] != [dict(row, beat=0) for row in self.last_rows]:
            self.moved = now
        self.last_rows = rows
        gone = [rank for rank, row in enumerate(rows) if row["pid"] and rank not in self.gone
                and row["phase"] != "finished" and not _alive(row["pid"])]
        # read after looking at the processes: a rank writes its line before it exits
        self.lines = _read_lines(self.directory, self.job.ranks)
        stopped = {line["rank"] for line in self.lines if line["status"] not in ("match", "mismatch", "ran")}
        for rank in gone:
            if rank not in stopped:
                self.gone[rank] = self.polls
        ended = set(self.gone)
        if (stopped or ended) and self.stop_at is None:
            self.stop_at = now + GRACE_S
        if (stopped or ended) and set(range(self.job.ranks)) <= stopped | ended:
            return True  # every rank has said where it stopped, or died
        if all(row["phase"] == "finished" for row in rows) and self.stop_at is None:
            self.stop_at = now + EXIT_WAIT_S  # mpiexec exits by itself, unless finalising hangs
        if self.stop_at is not None and now >= self.stop_at:
            return True
        if self.deadline is not None and now >= self.deadline:
            self.stopped_by = "deadline"
            return True
        if self.stall is not None and now - self.moved >= self.stall:
            self.stopped_by = "stall"
            return True
        return False


def run(job: job_mod.Job, timeout: float | None, stall: float | None = None, mpiexec: str | None = None,
        env: dict | None = None, argv: list[str] | None = None, directory: str | None = None) -> Outcome:
    """Run `job` under mpiexec with `job.ranks` processes; see the module docstring.

    `argv`: the command of each rank, where "{dir}" stands for the job directory (default: the
    Python worker, `python -m clockworks_dist.runtime.worker DIR`); a generated program follows the
    same contract (`codegen`). `directory`: an empty directory the caller made and removes itself,
    to write files there before the run and read them after (default: a private temporary one)."""
    mpiexec = mpiexec or find_mpiexec()
    if argv is None:
        require_mpi4py()
    if directory is not None:
        return _run_in(job, directory, timeout, stall, mpiexec, env, argv)
    directory = tempfile.mkdtemp(prefix="clockworks-run-")
    try:
        return _run_in(job, directory, timeout, stall, mpiexec, env, argv)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def rank_command(argv: list[str] | None, directory: str) -> list[str]:
    """Each rank's command: `argv` with "{dir}" replaced by `directory`, else the Python worker."""
    if argv is None:
        return [sys.executable, "-m", "clockworks_dist.runtime.worker", directory]
    return [os.fspath(part).replace("{dir}", directory) for part in argv]


def _run_in(job, directory, timeout, stall, mpiexec, env, argv=None) -> Outcome:
    job_mod.write(directory, job)
    progress_mod.create(os.path.join(directory, job_mod.PROGRESS_FILE), job.ranks)
    command = mpiexec_command(mpiexec, flavor(mpiexec), job.ranks, rank_command(argv, directory))
    errors_path = os.path.join(directory, "stderr.txt")
    watch = _Watch(job, directory, timeout, stall)
    with open(errors_path, "wb") as errors, open(os.path.join(directory, "stdout.txt"), "wb") as output:
        proc = subprocess.Popen(command, stdout=output, stderr=errors, stdin=subprocess.DEVNULL,
                                start_new_session=True, env={**(os.environ if env is None else env), **NO_MULTICAST})
        hygiene.track(proc.pid)  # a signal that ends the command ends mpiexec's group at once
        try:
            while True:
                if proc.poll() is not None:  # mpiexec ended by itself: one last look at who died
                    watch.poll()
                    break
                if watch.poll():
                    break
                time.sleep(POLL_S)
        finally:
            _kill_group(proc, directory)
            hygiene.untrack(proc.pid)
    watch.lines = _read_lines(directory, job.ranks)
    dead, killed = watch.classify()
    with open(errors_path, "rb") as handle:
        stderr = handle.read()[-STDERR_TAIL:].decode("utf-8", "replace")
    return Outcome(lines=watch.lines, rows=watch.last_rows, dead=dead, killed=killed,
                   stopped_by=watch.stopped_by,
                   returncode=proc.returncode, stderr=stderr, seconds=time.monotonic() - watch.started)


def run_bounded(command: list[str], env: dict | None, timeout: float, log: str,
                mark: str | None = None) -> tuple[int | None, str]:
    """Run `command` in a session of its own, its output to `log`, for at most `timeout` seconds;
    every process it started is ended after: its descendants, its session, and every process
    whose command line has the argument `mark` (Open MPI's ranks leave mpirun's session).
    (exit code, None when it was stopped; output)."""
    with open(log, "wb") as output:
        proc = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env={**(os.environ if env is None else env),
                                                             **NO_MULTICAST})
        hygiene.track(proc.pid)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            _kill_group(proc, mark or log)
            hygiene.untrack(proc.pid)
    with open(log, "rb") as handle:
        return code, handle.read().decode("utf-8", "replace")
