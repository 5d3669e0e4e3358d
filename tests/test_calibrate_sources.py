"""The calibration sources: the runner's pure functions, the benchmarks compiling for sm_90 (where nvcc
and the NCCL/NVSHMEM/MPI headers are installed), and the raw measurements committed from a GPU run.

No GPU is needed: the compile tests skip, with the reason, where a tool or a header is missing."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from clockworks_dist.calibrate import runner

ROOT = Path(__file__).resolve().parent.parent
CALIB = ROOT / "clockworks_dist" / "calibrate"
RAW = ROOT / "topologies" / "measured" / "raw" / "calibration_raw.jsonl"
KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30


# ----------------------------------------------------------------------------- the runner stays standalone


def test_runner_imports_only_the_standard_library():
    tree = ast.parse((CALIB / "runner.py").read_text())
    mods = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "runner.py must not use relative imports (it runs as a script)"
            mods.add((node.module or "").split(".")[0])
    assert "clockworks_dist" not in mods
    non_std = {m for m in mods if m not in sys.stdlib_module_names and m != "__future__"}
    assert not non_std, f"runner.py imports non-stdlib modules: {non_std}"


def test_runner_runs_as_a_script_and_prints_help():
    r = subprocess.run([sys.executable, str(CALIB / "runner.py"), "--help"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0
    assert "--out" in r.stdout and "--quick" in r.stdout


# ----------------------------------------------------------------------------- pure functions


def test_parse_args_defaults_and_flags(tmp_path):
    a = runner.parse_args(["--out", str(tmp_path)])
    assert a.out == tmp_path and not a.quick and a.budget_s == 480.0 and a.np == 0
    a = runner.parse_args(["--out", "x", "--quick", "--budget-s", "60", "--np", "4", "--arch", "sm_100"])
    assert a.quick and a.budget_s == 60.0 and a.np == 4 and a.arch == "sm_100"


@pytest.mark.parametrize("argv", [[], ["--out", "x", "--np", "1"], ["--out", "x", "--budget-s", "0"]])
def test_parse_args_rejects_bad_arguments(argv):
    with pytest.raises(SystemExit):
        runner.parse_args(argv)


def test_parse_json_lines_keeps_objects_and_skips_noise():
    text = "\n".join([
        'vm:1:1 [0] NCCL INFO Bootstrap : Using eth0',
        '{"bench":"nccl","op":"allreduce","bytes":1024,"eager_us":11.8,"nccl_est_us":null,"correct":true}',
        '  {"bench":"nvshmem","op":"put_block","blocks":4}  ',
        '{"bench":"nccl","op":"trunc',               # cut off mid-line
        '[1, 2, 3]',                                 # JSON, but not an object
        '{not json}',
        '',
    ])
    got = runner.parse_json_lines(text)
    assert [g["bench"] for g in got] == ["nccl", "nvshmem"]
    assert got[0]["nccl_est_us"] is None and got[0]["correct"] is True
    assert got[1]["blocks"] == 4


def test_parse_nccl_channels():
    line = ("vm:681:681 [0] NCCL INFO 24 coll channels, 24 collnet channels, 0 nvls channels, "
            "32 p2p channels, 32 p2p channels per peer")
    assert runner.parse_nccl_channels("noise\n" + line) == {
        "coll_channels": 24, "collnet_channels": 24, "nvls_channels": 0, "p2p_channels": 32,
        "p2p_channels_per_peer": 32}
    assert runner.parse_nccl_channels("nothing here") is None


def test_parse_mpicc_flags_open_mpi_and_mpich():
    comp, link = runner.parse_mpicc_flags("-I/usr/lib/ompi/include -pthread")
    assert comp == ["-I/usr/lib/ompi/include"]
    assert link == ["-Xcompiler", "-pthread"]
    comp, link = runner.parse_mpicc_flags(
        "cc -I/p/include -L/p/lib -Wl,-rpath -Wl,/p/lib -Wl,--enable-new-dtags -lmpi -D FOO=1")
    assert comp == ["-I/p/include", "-DFOO=1"]
    assert link == ["-L/p/lib", "-Xlinker", "-rpath", "-Xlinker", "/p/lib", "-Xlinker", "--enable-new-dtags",
                    "-lmpi"]


def test_detect_mpi_flavor():
    assert runner.detect_mpi_flavor("mpirun (Open MPI) 4.1.6\n\nReport bugs to ...") == "openmpi"
    assert runner.detect_mpi_flavor("HYDRA build details:\n    Version: 4.2.0") == "mpich"
    assert runner.detect_mpi_flavor("") == "unknown"


def test_mpirun_command_forwards_the_environment_under_open_mpi():
    names = list(runner.NVLS_OFF) + ["LD_LIBRARY_PATH"]
    cmd = runner.mpirun_command("mpirun", "openmpi", 2, ["./bench", "--out", "f"], names, as_root=True)
    assert cmd[0] == "mpirun" and "--allow-run-as-root" in cmd
    assert cmd[-3:] == ["./bench", "--out", "f"]
    assert cmd[cmd.index("-np") + 1] == "2"
    forwarded = {cmd[i + 1] for i, t in enumerate(cmd) if t == "-x"}
    assert forwarded == set(names)
    cmd = runner.mpirun_command("mpiexec", "mpich", 4, ["./bench"], names, as_root=False)
    assert cmd == ["mpiexec", "-np", "4", "./bench"]
    assert "--allow-run-as-root" not in runner.mpirun_command("mpirun", "openmpi", 2, [], [], as_root=False)


def test_child_env_turns_nvlink_multicast_off(monkeypatch):
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")
    monkeypatch.setenv("LD_LIBRARY_PATH", "/old")
    env = runner.child_env({"NCCL_MAX_NCHANNELS": "1"}, [Path("/new")])
    assert env["NCCL_NVLS_ENABLE"] == "0" and env["NVSHMEM_DISABLE_NVLS"] == "1"
    assert env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1" and env["NCCL_MAX_NCHANNELS"] == "1"
    assert env["LD_LIBRARY_PATH"] == "/new:/old"


def test_sweep_arguments_cover_the_benchmark_sizes(tmp_path):
    full = runner.nccl_sweep_args(False, False, tmp_path / "o", "default")
    assert full[full.index("--min-bytes") + 1] == str(KIB) and full[full.index("--max-bytes") + 1] == str(GIB)
    one = runner.nccl_sweep_args(False, True, tmp_path / "o", "1ch")
    sizes = [int(s) for s in one[one.index("--sizes") + 1].split(",")]
    assert sizes[0] == KIB and sizes[-1] == GIB and {64 * KIB, MIB, 16 * MIB, 256 * MIB} <= set(sizes)
    assert set(one[one.index("--ops") + 1].split(",")) >= {"allreduce", "allgather", "sendrecv"}
    quick = runner.nccl_sweep_args(True, False, tmp_path / "o", "default")
    assert int(quick[quick.index("--max-bytes") + 1]) <= 16 * MIB
    nv = runner.nvshmem_sweep_args(False, tmp_path / "n")
    assert nv[nv.index("--blocks") + 1] == "1,4,16,32,132" and nv[nv.index("--max-bytes") + 1] == str(GIB)


def test_arch_from_compute_cap():
    assert runner.arch_from_compute_cap("9.0") == "sm_90"
    assert runner.arch_from_compute_cap(" 10.0 ") == "sm_100"
    assert runner.arch_from_compute_cap("[N/A]") is None


def test_build_commands(tmp_path):
    nc, ns = tmp_path / "nccl", tmp_path / "nvshmem"
    cmds = runner.build_commands("nvcc", "sm_90", CALIB, tmp_path / "b", nc, ns, ["-I/mpi"], ["-lmpi"])
    n = cmds["nccl"]
    assert n[0] == "nvcc" and "-arch=sm_90" in n and f"-I{nc / 'include'}" in n and "-l:libnccl.so.2" in n
    assert str(CALIB / "bench_nccl.cu") in n and n[-1] == "-lmpi"
    s = cmds["nvshmem"]
    assert "-rdc=true" in s and "-lnvshmem_host" in s and "-lnvshmem_device" in s
    assert f"-L{tmp_path / 'b' / 'nvl'}" in s
    k = cmds["kernels"]  # one GPU, no MPI, no library
    assert k[0] == "nvcc" and "-arch=sm_90" in k and str(CALIB / "bench_kernels.cu") in k
    assert not any(flag.startswith(("-l", "-I")) for flag in k)
    assert set(runner.build_commands("nvcc", "sm_90", CALIB, tmp_path, None, ns, [], [])) == {"nvshmem", "kernels"}
    assert set(runner.build_commands("nvcc", "sm_90", CALIB, tmp_path, None, None, [], [])) == {"kernels"}


def test_kernel_sweep_arguments(tmp_path):
    full = runner.kernel_sweep_args(False, tmp_path / "k")
    assert full[full.index("--max-bytes") + 1] == str(GIB) and full[full.index("--out") + 1] == str(tmp_path / "k")
    quick = runner.kernel_sweep_args(True, tmp_path / "k")
    assert int(quick[quick.index("--max-bytes") + 1]) <= 16 * MIB
    assert runner.parse_args(["--out", "x", "--skip-kernels"]).skip_kernels


def test_summarize_counts_and_flags_wrong_cells():
    recs = [{"run": "a", "bench": "nccl", "op": "allreduce", "bytes": 1, "correct": True},
            {"run": "a", "bench": "nccl", "op": "allgather", "bytes": 2, "correct": False},
            {"run": "b", "bench": "nvshmem", "op": "put_block", "bytes": 3, "blocks": 4, "correct": None}]
    s = runner.summarize(recs)
    assert s["counts"] == {"a:nccl": 2, "b:nvshmem": 1}
    assert s["incorrect"] == [{"run": "a", "bench": "nccl", "op": "allgather", "bytes": 2, "blocks": None}]


def test_prepare_nvshmem_links(tmp_path):
    lib = tmp_path / "nvshmem" / "lib"
    lib.mkdir(parents=True)
    (lib / "libnvshmem_host.so.3").write_bytes(b"")
    (lib / "libnvshmem_device.a").write_bytes(b"")
    runner.prepare_nvshmem_links(tmp_path / "nvshmem", tmp_path / "b")
    runner.prepare_nvshmem_links(tmp_path / "nvshmem", tmp_path / "b")   # idempotent
    assert (tmp_path / "b" / "nvl" / "libnvshmem_host.so").resolve() == (lib / "libnvshmem_host.so.3").resolve()
    assert (tmp_path / "b" / "nvl" / "libnvshmem_device.a").is_symlink()


# ----------------------------------------------------------------------------- the .cu files compile


def _nvcc() -> str:
    nvcc = runner.find_nvcc()
    if not nvcc:
        pytest.skip("nvcc not found: install the CUDA toolkit (PATH or CUDA_HOME) to compile the benchmarks")
    return nvcc


def _mpi_compile_flags() -> list[str]:
    comp, _, how = runner.mpi_build_flags()
    if runner.find_mpi_header(comp) is None:
        pytest.skip(f"mpi.h not found (MPI flags from {how}): `pip install mpich` or install an MPI")
    return comp


def _compile(cmd: list[str]) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stdout}\n{r.stderr}"


def test_bench_nccl_compiles_for_sm90(tmp_path):
    nvcc = _nvcc()
    nccl = runner.find_wheel_lib("nccl", "nccl.h", "CLOCKWORKS_NCCL_HOME")
    if nccl is None:
        pytest.skip("nccl.h not found: `pip install nvidia-nccl-cu13` (or set CLOCKWORKS_NCCL_HOME)")
    comp = _mpi_compile_flags()
    _compile([nvcc, "-O2", "-arch=sm_90", f"-I{nccl / 'include'}", *comp, "-c",
              str(CALIB / "bench_nccl.cu"), "-o", str(tmp_path / "bench_nccl.o")])


def test_bench_kernels_compiles_and_links_for_sm90(tmp_path):
    nvcc = _nvcc()
    _compile([nvcc, "-O2", "-arch=sm_90", str(CALIB / "bench_kernels.cu"), "-o", str(tmp_path / "bench_kernels")])
    assert (tmp_path / "bench_kernels").is_file()


def test_bench_kernels_prints_what_the_fit_reads():
    """Each kind of kernel the benchmark times is a microbenchmark schedule the fit predicts."""
    from clockworks_dist.perf.microbench import KERNEL_OPS, SPIN_US

    source = (CALIB / "bench_kernels.cu").read_text()
    for op in KERNEL_OPS:
        assert f'"{op}"' in source, op
    assert f"double spin_us = {SPIN_US:.1f};" in source
    assert '\\"bench\\":\\"kernel\\"' in source


def test_bench_nvshmem_compiles_for_sm90(tmp_path):
    nvcc = _nvcc()
    nvshmem = runner.find_wheel_lib("nvshmem", "nvshmem.h", "CLOCKWORKS_NVSHMEM_HOME")
    if nvshmem is None:
        pytest.skip("nvshmem.h not found: `pip install nvidia-nvshmem-cu13` (or set CLOCKWORKS_NVSHMEM_HOME)")
    comp = _mpi_compile_flags()
    _compile([nvcc, "-O2", "-arch=sm_90", "-rdc=true", f"-I{nvshmem / 'include'}", *comp, "-c",
              str(CALIB / "bench_nvshmem.cu"), "-o", str(tmp_path / "bench_nvshmem.o")])


# ----------------------------------------------------------------------------- the committed measurements


def _raw() -> list[dict]:
    if not RAW.is_file():
        pytest.skip(f"no recorded calibration run at {RAW.relative_to(ROOT)}")
    return [json.loads(line) for line in RAW.read_text().splitlines() if line.strip()]


def test_recorded_run_has_provenance_and_a_clean_summary():
    recs = _raw()
    prov, summary = recs[0], recs[-1]
    assert prov["bench"] == "provenance"
    for key in ("date_utc", "gpu", "driver", "wheels"):
        assert prov[key], key
    assert summary["bench"] == "summary" and summary["ok"] and not summary["incorrect"]
    headers = [r for r in recs if r["bench"] == "nccl_header"]
    assert headers and all(h["nccl_version"] and h["gpu"] for h in headers)
    assert any(r["bench"] == "nvshmem_header" and r["nvshmem_version"] for r in recs)


def test_recorded_nccl_sweep_is_complete_and_correct():
    recs = [r for r in _raw() if r["bench"] == "nccl" and r["run"] == "nccl_default"]
    sizes = [KIB << k for k in range(21)]
    for op in runner.NCCL_OPS:
        cells = {r["bytes"]: r for r in recs if r["op"] == op}
        assert sorted(cells) == sizes, op
        for r in cells.values():
            assert r["correct"] is True and r["eager_us"] > 0 and r["graph_us"] > 0
            if op in ("allreduce", "allgather", "reducescatter", "broadcast"):
                assert r["nccl_est_us"] > 0
            else:
                assert r["nccl_est_us"] is None
    one = [r for r in _raw() if r["bench"] == "nccl" and r["run"] == "nccl_1ch"]
    assert one and all(r["nchannels_env"] == "1" and r["correct"] for r in one)
    ch = [r for r in _raw() if r["bench"] == "nccl_channels" and r["run"] == "nccl_1ch"]
    assert ch and ch[0]["coll_channels"] == 1 and ch[0]["p2p_channels_per_peer"] == 1


def test_recorded_nvshmem_sweep_is_complete():
    recs = [r for r in _raw() if r["bench"] == "nvshmem"]
    assert any(r["op"] == "signal_pingpong" and r["us"] > 0 for r in recs)
    puts = [r for r in recs if r["op"] == "put_block" and "skipped" not in r]
    one_block = sorted(r["bytes"] for r in puts if r["blocks"] == 1)
    assert one_block == [KIB << k for k in range(21)]
    assert {r["blocks"] for r in puts} == {1, 4, 16, 32, 132}
    assert all(r.get("correct") is not False for r in recs)
    assert any(r["correct"] is True for r in puts)
    assert any(r["op"] == "put_on_stream" for r in recs)

