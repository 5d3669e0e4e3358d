"""The cupy backend of `clockworks run` (CuPy and NCCL, one GPU per rank).

Everywhere: its table decides every op class, one-sided ops are refused with the reason and the
backend that runs them, missing CuPy and too few GPUs are bad input (exit 2), the launcher's
command line for Open MPI and MPICH, the launcher kills ranks that sit in process groups of their
own (as Open MPI starts them), and `--sizes`.

On a machine with CuPy and 2 GPUs (skipped elsewhere, with the reason): every correct protocol the
backend supports matches the checker at 2 ranks, every collective in every dtype on a reordered
split, a sweep of sizes, and hangs and crashes reported with the rank and op, within the timeout,
leaving no process."""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

pytest.importorskip("numpy")

import clockworks_dist as cw  # noqa: E402
from clockworks_dist import cli, ir  # noqa: E402
from clockworks_dist.runtime import select  # noqa: E402
from clockworks_dist.runtime import cupy_nccl, launch  # noqa: E402
from clockworks_dist.runtime.cupy_nccl import CUPY  # noqa: E402
from clockworks_dist.semantics.backends import BACKENDS, Unsupported  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PROTOCOLS = os.path.join(os.path.dirname(HERE), "protocols")
CORRECT = sorted(glob.glob(os.path.join(PROTOCOLS, "*.py")))
HAS_CUPY = importlib.util.find_spec("cupy") is not None
HAS_MPI = importlib.util.find_spec("mpi4py") is not None and (shutil.which("mpiexec") or shutil.which("mpirun"))
MPI_ENV = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK")

OPEN_MPI_VERSION = "mpirun (Open MPI) 4.1.6\n\nReport bugs to http://www.open-mpi.org/community/help/\n"
OPENRTE_VERSION = "mpiexec (OpenRTE) 4.1.6\n\nReport bugs to http://www.open-mpi.org/community/help/\n"
MPICH_VERSION = "HYDRA build details:\n    Version:                                 4.2.0\n"


def _gpus() -> int:
    return cupy_nccl.visible_gpus() if HAS_CUPY else 0


needs_gpus = pytest.mark.skipif(not HAS_CUPY or not HAS_MPI or _gpus() < 2,
                                reason="needs CuPy with NCCL (pip install 'clockworks-dist[gpu-cu13]'), mpi4py with "
                                       "an mpiexec, and 2 GPUs: this machine lacks "
                                       + ("CuPy" if not HAS_CUPY else "MPI" if not HAS_MPI else "2 GPUs"))


@pytest.fixture
def outside_mpi(monkeypatch):
    for name in MPI_ENV:
        monkeypatch.delenv(name, raising=False)


def _supported(sched: ir.Schedule) -> bool:
    try:
        select.supported(CUPY, sched)
    except select.BackendError:
        return False
    return True


# ------------------------------------------------------------------------------ the table
def test_the_cupy_table_decides_every_op_class():
    CUPY.check_complete()
    assert BACKENDS["cupy"] is CUPY
    for cls in ir.OP_CLASSES:
        kind = cls.model_fields["kind"].default
        if kind in ir.ONE_SIDED_KINDS or kind in ir.THREAD_SYNC_KINDS:  # the CuPy executor runs no threads
            assert cls in CUPY.unsupported and "mpi-cpu" in CUPY.unsupported[cls], kind
        else:
            assert cls in CUPY.table, kind


def test_which_protocols_the_cupy_backend_runs():
    runs = sorted(os.path.basename(path) for path in CORRECT
                  if all(_supported(defn.trace(2)) for defn in cw.load_file(path)))
    assert runs == ["direct_alltoall.py", "halving_doubling_allreduce.py", "hierarchical_allreduce.py",
                    "pipeline_1f1b.py", "ring_allgather.py", "ring_allreduce.py", "ring_reduce_scatter.py",
                    "tree_allreduce.py"]


def test_every_dtype_and_reduction_has_an_exact_nccl_mapping():
    assert set(cupy_nccl.NCCL_TYPES) == set(ir.DTYPE_BYTES)
    assert set(cupy_nccl.NCCL_OPS) == {"sum", "prod", "max", "min"}
    assert cupy_nccl.NCCL_TYPES["bfloat16"] == "NCCL_FLOAT32"  # stored as float32, rounded after


# ------------------------------------------------------------------------------ bad input
def test_an_op_the_cupy_backend_cannot_run_is_named_with_the_reason_and_mpi_cpu(capsys, outside_mpi):
    code = cli.main(["run", os.path.join(PROTOCOLS, "nvshmem_oneshot_allreduce.py"), "--backend", "cupy"])
    assert code == 2
    err = capsys.readouterr().err
    assert "nvshmem_oneshot_allreduce.py:28: the cupy backend cannot run put_signal: NVSHMEM one-sided ops run in " \
           "the generated CUDA of `clockworks codegen`" in err
    assert "the mpi-cpu backend runs them on CPUs (--backend mpi-cpu) (rank 0)" in err
    sched = cw.load_file(os.path.join(PROTOCOLS, "dissemination_barrier.py"))[0].trace(2)
    with pytest.raises(Unsupported, match=r"dissemination_barrier.py:\d+: the cupy backend cannot run put: "):
        CUPY.lookup(sched.programs[0].ops[0])


@pytest.mark.skipif(HAS_CUPY, reason="CuPy is installed here: its absence cannot be shown")
def test_without_cupy_the_cupy_backend_says_what_to_install(capsys, outside_mpi):
    code = cli.main(["run", os.path.join(PROTOCOLS, "ring_allreduce.py"), "--backend", "cupy", "--json"])
    assert code == 2
    report = json.loads(capsys.readouterr().out)
    assert report["error"]["type"] == "MissingDependency"
    assert report["error"]["message"] == ("the cupy backend needs CuPy with NCCL, which is not installed: pip install "
                                          "'clockworks-dist[gpu-cu13]' (CUDA 13), or pip install cupy-cuda12x "
                                          "nvidia-nccl-cu12 (CUDA 12)")


def test_more_ranks_than_gpus_is_explained():
    assert select.gpu_shortage(2, 2) is None and select.gpu_shortage(1, 8) is None
    assert select.gpu_shortage(4, 2).startswith("--np 4: the cupy backend runs one rank per GPU, but 2 GPU(s) are "
                                                 "visible here")
    assert select.gpu_shortage(4, 2).endswith("run with --np 2 or fewer, or use --backend mpi-cpu")
    assert "no GPU is visible here" in select.gpu_shortage(2, 0)


@pytest.mark.skipif(not HAS_CUPY or _gpus() >= 64, reason="needs CuPy, and fewer than 64 GPUs")
def test_more_ranks_than_visible_gpus_is_bad_input(capsys, outside_mpi):
    code = cli.main(["run", os.path.join(PROTOCOLS, "ring_allreduce.py"), "--backend", "cupy", "--np", "64"])
    assert code == 2
    assert "--np 64: the cupy backend runs one rank per GPU" in capsys.readouterr().err


def test_sizes_that_the_main_buffer_cannot_hold_are_bad_input(capsys, outside_mpi):
    code = cli.main(["run", os.path.join(PROTOCOLS, "ring_allreduce.py"), "--backend", "cupy", "--sizes", "1KiB,6"])
    assert code == 2
    assert "ring_allreduce.py:11: 6 bytes is not a whole number of float32 elements of x" in capsys.readouterr().err
    code = cli.main(["run", os.path.join(PROTOCOLS, "ring_allreduce.py"), "--sizes", "lots"])
    assert code == 2
    assert "--sizes: cannot read size 'lots'" in capsys.readouterr().err


# ------------------------------------------------------------------------------ the launcher
def test_the_mpi_flavour_is_read_from_mpiexec_version():
    assert launch.mpi_flavor(OPEN_MPI_VERSION) == launch.mpi_flavor(OPENRTE_VERSION) == "openmpi"
    assert launch.mpi_flavor(MPICH_VERSION) == "mpich"
    assert launch.mpi_flavor("Intel(R) MPI Library for Linux* OS, Version 2021") == "other"


@pytest.mark.skipif(not HAS_MPI, reason="no mpiexec on PATH (pip install mpich)")
def test_the_flavour_of_the_mpiexec_on_path():
    mpiexec = launch.find_mpiexec()
    done = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30)
    assert launch.flavor(mpiexec) == launch.mpi_flavor(done.stdout + done.stderr) != "other"


def test_the_open_mpi_command_line():
    argv = ["python3", "-m", "clockworks_dist.runtime.worker", "/tmp/job"]
    as_root = launch.mpiexec_command("mpirun", launch.mpi_flavor(OPEN_MPI_VERSION), 2, argv, euid=0, cores=32)
    assert as_root == ["mpirun", "--allow-run-as-root", "-x", "NCCL_NVLS_ENABLE", "-x", "NVSHMEM_DISABLE_NVLS",
                       "-x", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "-n", "2", *argv]
    assert set(launch.NO_MULTICAST) == {"NCCL_NVLS_ENABLE", "NVSHMEM_DISABLE_NVLS", "TORCH_SYMM_MEM_DISABLE_MULTICAST"}
    crowded = launch.mpiexec_command("mpirun", "openmpi", 4, argv, euid=1000, cores=2)
    assert crowded[:2] == ["mpirun", "--oversubscribe"] and "--allow-run-as-root" not in crowded
    assert launch.mpiexec_command("mpiexec", "mpich", 4, argv, euid=0) == ["mpiexec", "-disable-auto-cleanup", "-n",
                                                                           "4", *argv]
    assert launch.mpiexec_command("mpiexec", "other", 2, argv) == ["mpiexec", "-n", "2", *argv]


def test_the_launcher_kills_ranks_in_process_groups_of_their_own(tmp_path):
    """Open MPI starts each rank in a process group of its own: killing mpiexec's group is not
    enough. The launcher also kills mpiexec's descendants and every process naming the job's
    directory."""
    directory = str(tmp_path / "job")
    pid_file = tmp_path / "pids"
    rank = ("import os, sys, time; os.setpgid(0, 0); open(sys.argv[2], 'a').write(f'{os.getpid()}\\n'); "
            "time.sleep(120)")
    parent = ("import subprocess, sys, time\n"
              f"for _ in range(2): subprocess.Popen([sys.executable, '-c', {rank!r}, {directory!r}, "
              f"{str(pid_file)!r}])\n"
              "time.sleep(120)\n")
    proc = subprocess.Popen([sys.executable, "-c", parent], start_new_session=True)
    deadline = time.monotonic() + 30
    while (not pid_file.exists() or len(pid_file.read_text().split()) < 2) and time.monotonic() < deadline:
        time.sleep(0.05)
    ranks = [int(pid) for pid in pid_file.read_text().split()]
    assert len(ranks) == 2 and all(os.getpgid(pid) == pid for pid in ranks)
    launch._kill_group(proc, directory)
    time.sleep(0.2)
    assert proc.returncode is not None
    assert not [pid for pid in ranks if launch._alive(pid)]


@pytest.mark.skipif(not HAS_MPI, reason="no mpiexec on PATH (pip install mpich)")
def test_sizes_run_each_size_as_an_item_of_one_job(capsys, outside_mpi):
    code = cli.main(["run", os.path.join(PROTOCOLS, "ring_allreduce.py"), "--np", "2", "--sizes", "1KiB,4KiB",
                     "--iters", "2", "--json"])
    summary = json.loads(capsys.readouterr().out)
    assert code == 0, summary
    assert [(r["bytes"], r["verdict"]) for r in summary["results"]] == [(1024, "match"), (4096, "match")]
    # x holds the bytes; tmp half of them: (256 + 128) float32 elements per rank at 1 KiB
    assert [line["compare"]["checked"] for line in summary["results"][0]["ranks"]] == [2 * 384] * 2


# ------------------------------------------------------------------------------ on 2 GPUs
def _workers(mark: str) -> list[int]:
    """Processes running a rank (or the mpiexec) of a job whose directory is under `mark`."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    cmdline = handle.read()
            except OSError:
                continue
            if b"clockworks_dist.runtime.worker" in cmdline and os.fsencode(mark) in cmdline:
                found.append(int(entry))
    return found


@pytest.fixture
def jobs(tmp_path, monkeypatch):
    """A directory for this test's jobs (the launcher's temporary directories go there, so other
    jobs on the machine are not counted); fails the test if a process of them outlives it."""
    mark = str(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", mark)
    yield mark
    deadline = time.monotonic() + 2.0  # killed processes take a moment to go
    while _workers(mark) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _workers(mark)


def _run(schedules: list[ir.Schedule], **options) -> dict:
    from clockworks_dist.runtime import job as job_mod
    from clockworks_dist.runtime import verdict
    from clockworks_dist.runtime.expected import build_reference

    items = [job_mod.Item(name=s.name, world=s.world, schedule_json=s.to_json(), reference=build_reference(s),
                          timeout=120.0) for s in schedules]
    job = job_mod.Job(items=items, ranks=max(s.world for s in schedules), backend="cupy", **options)
    return verdict.summarize(schedules, launch.run(job, timeout=300.0, stall=120.0))


def _cli(jobs_dir: str, *args: str, env: dict | None = None) -> tuple[int, str, str, float]:
    command = [sys.executable, "-m", "clockworks_dist.cli", "run", "--backend", "cupy", *args]
    started = time.monotonic()
    clean = {k: v for k, v in os.environ.items() if k not in MPI_ENV}
    done = subprocess.run(command, capture_output=True, text=True, timeout=300,
                          env={**clean, "TMPDIR": jobs_dir, **(env or {})})
    return done.returncode, done.stdout, done.stderr, time.monotonic() - started


@needs_gpus
def test_every_correct_protocol_it_supports_matches_on_2_gpus(jobs):
    schedules = [defn.trace(2) for path in CORRECT for defn in cw.load_file(path)]
    runnable = [s for s in schedules if _supported(s)]
    assert len(runnable) == 8
    summary = _run(runnable, iters=3, jitter=5)
    failed = [(r["schedule"], r["message"]) for r in summary["results"] if r["verdict"] != "match"]
    assert not failed
    assert all(r["time"]["iterations"] == 3 and r["time"]["median_us"] > 0 for r in summary["results"])


@cw.schedule(ranks=(2,))
def collectives_every_dtype(r):
    """Every collective in every dtype, prod/max/min too, on a communicator whose members are
    listed in reverse, in-place and overlapping forms, and local ops."""
    n, me = r.world, r.rank
    for dt in ("float16", "bfloat16", "float32", "float64", "int32", "int64", "uint32", "uint64"):
        x = r.buffer(f"x_{dt}", count=4 * n, dtype=dt, role="input")
        y = r.buffer(f"y_{dt}", count=4 * n, dtype=dt, role="output")
        z = r.buffer(f"z_{dt}", count=4 * n, dtype=dt, role="output")
        back = r.comm(f"back_{dt}", list(range(n))[::-1])
        r.all_to_all(x, y, comm=back)
        r.reduce_scatter(x, z.region(0, 4), op="prod", comm=back)
        r.reduce_to(1, x, z if me == 1 else None, op="max")
        r.broadcast(x.region(0, 2), z.region(4, 6), root=0, comm=back)
        r.all_gather(x.region(0, 2), y.region(0, 4), comm=back)
        r.all_reduce(x.region(4, 6), z.region(6, 8), op="min")
        r.barrier(comm=back)
        with r.group():
            r.send(1 - me, x.region(6, 8))
            r.recv(1 - me, z.region(0, 2), reduce="sum")
        r.all_to_all(y, y)
        r.all_reduce(y.region(0, 4), y.region(2, 6))
        r.reduce(x.region(0, 3), x.region(0, 3), x.region(3, 6), op="sum")
        r.fill(x.region(7, 8), 0.1)
        r.compute("k", reads=[x.region(0, 8)], writes=[x.region(4, 6)])


@needs_gpus
def test_every_collective_in_every_dtype_matches(jobs):
    sched = collectives_every_dtype.trace(2)
    assert cw.check(sched).verdict == "verified"
    result = _run([sched], iters=2, jitter=7)["results"][0]
    assert result["verdict"] == "match", result["message"]


@needs_gpus
def test_a_sweep_of_sizes_matches_and_is_timed(jobs):
    code, out, err, _ = _cli(jobs, os.path.join(PROTOCOLS, "ring_allreduce.py"), "--np", "2", "--sizes",
                             "1KiB,1MiB,64MiB", "--iters", "3", "--json")
    assert code == 0, err
    results = json.loads(out)["results"]
    assert [(r["bytes"], r["verdict"]) for r in results] == [(1024, "match"), (1 << 20, "match"), (64 << 20, "match")]
    assert results[2]["time"]["median_us"] > results[0]["time"]["median_us"]


@needs_gpus
def test_a_rank_that_stops_issuing_is_a_hang_naming_each_ranks_op(jobs):
    """Rank 0 stops before its second op (in Python, waiting on nothing); rank 1's GPU waits in
    NCCL for it. The run ends within the timeout, rank 1 naming its op and what it waits for."""
    code, out, err, seconds = _cli(jobs, os.path.join(PROTOCOLS, "ring_allreduce.py"), "--np", "2", "--timeout", "20",
                                   env={"CLOCKWORKS_RUN_FAULT": "0:1:hang"})
    assert code == 1, err
    assert seconds < 20 + 15
    assert "hang" in out or "crash" in out
    assert "rank 1 is in group(send(peer=0, x[0:4]); recv(peer=0, x[4:8])) at ring_allreduce.py:22, waiting for " \
           "its matching recv on rank 0 and the matching send from rank 0 (NCCL, on the GPU)" in out


@needs_gpus
def test_a_rank_that_is_killed_is_named(jobs):
    code, out, _err, _ = _cli(jobs, os.path.join(PROTOCOLS, "ring_allreduce.py"), "--np", "2", "--json",
                              "--timeout", "60", env={"CLOCKWORKS_RUN_FAULT": "1:1:kill"})
    assert code == 1
    result = json.loads(out)["results"][0]
    assert result["verdict"] == "crash" and result["crashed"] == [1]
    assert "rank 1 died (its process ended without a result; killed?) in" in result["message"]


@needs_gpus
def test_a_corrupted_element_is_reported_against_the_checker(jobs):
    code, out, _err, _ = _cli(jobs, os.path.join(PROTOCOLS, "ring_allgather.py"), "--np", "2", "--json",
                              env={"CLOCKWORKS_RUN_FAULT": "1:0:corrupt"})
    assert code == 1
    record = json.loads(out)["results"][0]["ranks"][1]["compare"]["first"][0]
    assert (record["rank"], record["buffer"], record["element"], record["against"]) == (1, "x", 0, "checker")
    assert record["got"] == record["expected"] + 1
