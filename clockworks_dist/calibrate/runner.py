#!/usr/bin/env python3
"""Build and run the calibration microbenchmarks on a GPU machine; write the raw measurements.

    python clockworks_dist/calibrate/runner.py --out DIR [--quick] [--budget-s 480]

Runs as a plain script with the standard library alone (a GPU machine's Python need not have this
package's dependencies), so it imports nothing from `clockworks_dist`.

Steps, each with a timeout (nothing here can hang past `--budget-s`):
1. locate NCCL and NVSHMEM (the `nvidia-nccl-*` / `nvidia-nvshmem-*` wheels in this Python's
   site-packages, or CLOCKWORKS_NCCL_HOME / CLOCKWORKS_NVSHMEM_HOME), MPI's compile flags (`mpicc`),
   and nvcc;
2. build bench_nccl.cu, bench_nvshmem.cu and bench_kernels.cu (in parallel, into a temporary folder);
3. run under `mpirun -np N`, NVLink multicast off in every child's environment:
   the NCCL sweep (all-reduce, all-gather, reduce-scatter, broadcast, all-to-all, send/recv one way and
   both ways; 1 KiB .. 1 GiB), the NVSHMEM sweep (signal latency, put bandwidth over 1..132 blocks,
   host-issued puts), then the NCCL sweep again on one channel (NCCL_MAX_NCHANNELS=1) at fewer sizes,
   then both NCCL sweeps once more, untimed, with NCCL's per-call TUNING log on; and, as one process
   on one GPU, the plain-kernel sweep (the start of an empty and of a spinning kernel, eager and in a
   CUDA graph, and a reduce kernel's rate over HBM, 1 KiB .. 1 GiB);
4. write DIR/calibration_raw.jsonl (a provenance line first, then every measurement line tagged with
   its run, NCCL's channel counts and its per-call algorithm/protocol/channel decisions read from its
   TUNING log, then a summary line), DIR/build.log and DIR/run.log (repeated TUNING lines once).

Exits non-zero, naming what failed, if a build or a run fails; whatever was measured is kept.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import csv
import datetime as _dt
import io
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent

# NVLink multicast must stay off on shared machines: set in every environment this runner builds.
NVLS_OFF = {"NCCL_NVLS_ENABLE": "0", "NVSHMEM_DISABLE_NVLS": "1", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}
# One NCCL channel (one CTA per collective, one channel per peer for send/recv): per-channel limits.
ONE_CHANNEL = {"NCCL_MAX_NCHANNELS": "1", "NCCL_MAX_CTAS": "1", "NCCL_MAX_P2P_NCHANNELS": "1"}
# NCCL prints its channel counts and graph search at init; the runner reads them back from the log.
NCCL_DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,GRAPH"}
# With TUNING it also prints the algorithm, protocol and channels of every collective it launches,
# one log line per call: that costs the host time, so it runs in short untimed passes of its own.
NCCL_TUNING_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,TUNING"}
CHOICE_PASS_ARGS = ["--warmup", "1", "--iters-small", "1", "--iters-large", "1", "--graph-reps", "1"]

NCCL_OPS = ["allreduce", "allgather", "reducescatter", "broadcast", "alltoall", "sendrecv", "sendrecv_bidir"]
KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
ONE_CHANNEL_SIZES = [KIB << (2 * k) for k in range(11)]        # 1 KiB, 4 KiB, ..., 1 GiB
QUICK_ONE_CHANNEL_SIZES = [KIB, 64 * KIB, MIB, 16 * MIB]

# Documented fallbacks, used only when probing finds nothing better and the path exists.
FALLBACK_MPI_INCLUDES = ["/usr/lib/x86_64-linux-gnu/openmpi/include", "/usr/include/x86_64-linux-gnu/mpich"]
FALLBACK_NVCC = ["/usr/local/cuda/bin/nvcc"]


# ----------------------------------------------------------------------------- pure helpers


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="runner.py", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, type=Path, help="folder for calibration_raw.jsonl, build.log, run.log")
    p.add_argument("--quick", action="store_true", help="small sizes and few iterations (a smoke test)")
    p.add_argument("--budget-s", type=float, default=480.0, help="wall-clock budget for everything (s)")
    p.add_argument("--np", type=int, default=0, help="ranks (default: the number of GPUs, at least 2)")
    p.add_argument("--arch", default="", help="nvcc -arch (default: from nvidia-smi's compute capability, else sm_90)")
    p.add_argument("--build-dir", type=Path, default=None, help="where to build (default: a temporary folder)")
    p.add_argument("--skip-nccl", action="store_true")
    p.add_argument("--skip-nvshmem", action="store_true")
    p.add_argument("--skip-one-channel", action="store_true")
    p.add_argument("--skip-kernels", action="store_true")
    a = p.parse_args(argv)
    if a.budget_s <= 0:
        p.error("--budget-s must be positive")
    if a.np < 0 or a.np == 1:
        p.error("--np must be at least 2")
    return a


def parse_json_lines(text: str) -> list[dict]:
    """The JSON objects among `text`'s lines; other lines (logs, noise) are skipped."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not (line.startswith("{") and line.endswith("}")):
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


_CHANNELS_RE = re.compile(
    r"(\d+) coll channels, (\d+) collnet channels, (\d+) nvls channels, (\d+) p2p channels, "
    r"(\d+) p2p channels per peer")


def parse_nccl_channels(text: str) -> dict | None:
    """NCCL's channel counts from its INIT log line (the first one found), or None."""
    m = _CHANNELS_RE.search(text)
    if not m:
        return None
    keys = ["coll_channels", "collnet_channels", "nvls_channels", "p2p_channels", "p2p_channels_per_peer"]
    return dict(zip(keys, map(int, m.groups())))


_CHOICE_RE = re.compile(r"NCCL INFO (AllReduce|AllGather|ReduceScatter|Broadcast|Reduce): (\d+) Bytes -> "
                        r"Algo (\w+) proto (\w+) channel\{Lo\.\.Hi\}=\{(\d+)\.\.(\d+)\}")


def parse_nccl_choices(text: str) -> list[dict]:
    """NCCL's per-call decisions (TUNING log lines), one record per distinct decision. `bytes` is
    what NCCL prints: one rank's count for all-gather and reduce-scatter."""
    seen: dict[tuple, dict] = {}
    for m in _CHOICE_RE.finditer(text):
        coll, nbytes, algo, proto, lo, hi = m.groups()
        key = (coll, int(nbytes), algo, proto, int(lo), int(hi))
        if key not in seen:
            seen[key] = {"coll": coll, "bytes": int(nbytes), "algorithm": algo, "protocol": proto,
                         "channel_lo": int(lo), "channel_hi": int(hi), "channels": int(hi) - int(lo) + 1}
    return list(seen.values())


def squeeze_choice_lines(text: str) -> str:
    """The log with each distinct TUNING decision kept once (NCCL prints one per launch)."""
    kept, seen, dropped = [], set(), 0
    for line in text.splitlines(keepends=True):
        m = _CHOICE_RE.search(line)
        if m:
            if m.groups() in seen:
                dropped += 1
                continue
            seen.add(m.groups())
        kept.append(line)
    if dropped:
        kept.append(f"[runner: {dropped} repeated TUNING lines left out]\n")
    return "".join(kept)


def parse_mpicc_flags(text: str) -> tuple[list[str], list[str]]:
    """(compile flags, link flags for nvcc) from `mpicc --showme`/`mpicc -show` output.

    -I/-D go to compile; -L/-l go to link; -Wl,a,b becomes -Xlinker a -Xlinker b; -pthread is passed to
    the host compiler; the compiler name and anything else are dropped.
    """
    comp: list[str] = []
    link: list[str] = []
    toks = shlex.split(text)
    i = 0
    while i < len(toks):
        t = toks[i]
        if t in ("-I", "-L", "-D", "-l") and i + 1 < len(toks):
            t = t + toks[i + 1]
            i += 1
        if t.startswith(("-I", "-D")):
            comp.append(t)
        elif t.startswith(("-L", "-l")):
            link.append(t)
        elif t.startswith("-Wl,"):
            for part in t[4:].split(","):
                if part:
                    link += ["-Xlinker", part]
        elif t == "-pthread":
            link += ["-Xcompiler", "-pthread"]
        i += 1
    return comp, link


def detect_mpi_flavor(version_text: str) -> str:
    t = version_text.lower()
    if "open mpi" in t or "open-mpi" in t or "openrte" in t:
        return "openmpi"
    if "hydra" in t or "mpich" in t or "intel(r) mpi" in t:
        return "mpich"
    return "unknown"


def mpirun_command(launcher: str, flavor: str, np_: int, argv: list[str], env_names: list[str],
                   as_root: bool) -> list[str]:
    """The launch line. Open MPI forwards each named variable explicitly (-x); Hydra passes the whole
    environment by default."""
    cmd = [launcher]
    if flavor == "openmpi":
        if as_root:
            cmd.append("--allow-run-as-root")
        cmd += ["--bind-to", "none"]
        for n in sorted(set(env_names)):
            cmd += ["-x", n]
    cmd += ["-np", str(np_)]
    return cmd + list(argv)


def nccl_sweep_args(quick: bool, one_channel: bool, out_file: Path, label: str) -> list[str]:
    a = ["--out", str(out_file), "--label", label]
    if one_channel:
        sizes = QUICK_ONE_CHANNEL_SIZES if quick else ONE_CHANNEL_SIZES
        ops = ["allreduce", "allgather", "sendrecv"] if quick else NCCL_OPS
        a += ["--sizes", ",".join(map(str, sizes)), "--ops", ",".join(ops),
              "--warmup", "3", "--iters-large", "5"]
    else:
        a += ["--min-bytes", str(KIB), "--max-bytes", str(16 * MIB if quick else GIB)]
    if quick:
        a += ["--iters-small", "20", "--iters-large", "5", "--graph-reps", "2"]
    return a


def nvshmem_sweep_args(quick: bool, out_file: Path) -> list[str]:
    a = ["--out", str(out_file)]
    if quick:
        a += ["--max-bytes", str(16 * MIB), "--blocks", "1,4,132", "--reps", "3", "--pp-iters", "2000"]
    else:
        a += ["--max-bytes", str(GIB), "--blocks", "1,4,16,32,132", "--multi-min-bytes", str(64 * KIB)]
    return a


def kernel_sweep_args(quick: bool, out_file: Path) -> list[str]:
    a = ["--out", str(out_file)]
    if quick:
        a += ["--max-bytes", str(16 * MIB), "--iters", "50", "--iters-large", "5", "--graph-reps", "2"]
    else:
        a += ["--max-bytes", str(GIB)]
    return a


def arch_from_compute_cap(cap: str) -> str | None:
    m = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", cap or "")
    return f"sm_{m.group(1)}{m.group(2)}" if m else None


def build_commands(nvcc: str, arch: str, src_dir: Path, build_dir: Path, nccl_home: Path | None,
                   nvshmem_home: Path | None, mpi_comp: list[str], mpi_link: list[str]) -> dict[str, list[str]]:
    """nvcc command lines for the programs (keys 'nccl', 'nvshmem', 'kernels'); a missing library skips its
    program (the kernel benchmark needs none).

    NVSHMEM's device link wants -lnvshmem_host -lnvshmem_device, while the wheels ship
    libnvshmem_host.so.3: link through symlinks (made by `prepare_nvshmem_links`) in build_dir/nvl."""
    cmds: dict[str, list[str]] = {"kernels": [nvcc, "-O2", f"-arch={arch}", str(src_dir / "bench_kernels.cu"),
                                              "-o", str(build_dir / "bench_kernels")]}
    if nccl_home is not None:
        lib = nccl_home / "lib"
        cmds["nccl"] = [nvcc, "-O2", f"-arch={arch}", f"-I{nccl_home / 'include'}", *mpi_comp,
                        str(src_dir / "bench_nccl.cu"), "-o", str(build_dir / "bench_nccl"),
                        f"-L{lib}", "-l:libnccl.so.2", "-Xlinker", f"-rpath={lib}", *mpi_link]
    if nvshmem_home is not None:
        lib = nvshmem_home / "lib"
        cmds["nvshmem"] = [nvcc, "-O2", f"-arch={arch}", "-rdc=true", f"-I{nvshmem_home / 'include'}", *mpi_comp,
                           str(src_dir / "bench_nvshmem.cu"), "-o", str(build_dir / "bench_nvshmem"),
                           f"-L{build_dir / 'nvl'}", "-lnvshmem_host", "-lnvshmem_device",
                           "-Xlinker", f"-rpath={lib}", *mpi_link]
    return cmds


def summarize(records: list[dict]) -> dict:
    """Counts per bench and run, and the checked cells that were wrong."""
    counts: dict[str, int] = {}
    wrong = []
    for r in records:
        k = f"{r.get('run', '?')}:{r.get('bench', '?')}"
        counts[k] = counts.get(k, 0) + 1
        if r.get("correct") is False:
            wrong.append({k2: r.get(k2) for k2 in ("run", "bench", "op", "bytes", "blocks")})
    return {"counts": counts, "incorrect": wrong}


# ----------------------------------------------------------------------------- probing


# A tool query (nvcc --version, mpicc -show, nvidia-smi) that has not answered in this long is stopped.
QUERY_TIMEOUT_S = 30.0


def bounded_run(cmd: list[str], timeout: float = QUERY_TIMEOUT_S) -> tuple[int, str, str] | None:
    """(exit status, stdout, stderr) of `cmd`, or None if it cannot start or runs past `timeout`
    seconds. It runs in a session of its own, and that whole group is killed at the deadline (or when
    this process is interrupted): a wrapper script's children, which hold the pipes open, included."""
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                text=True, errors="replace", start_new_session=True)
    except (OSError, ValueError):
        return None
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        return None
    finally:
        if proc.returncode is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the group started above, by its id
            except (ProcessLookupError, PermissionError):
                pass
            try:
                proc.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                pass


def _cmd_output(cmd: list[str], timeout: float = QUERY_TIMEOUT_S) -> str | None:
    done = bounded_run(cmd, timeout)
    if done is None:
        return None
    rc, out, _err = done
    return out if rc == 0 else None


def candidate_site_dirs() -> list[Path]:
    dirs: list[Path] = []
    try:
        import importlib.util
        spec = importlib.util.find_spec("nvidia")
        if spec and spec.submodule_search_locations:
            dirs += [Path(p).parent for p in spec.submodule_search_locations]
    except (ImportError, ValueError):
        pass
    try:
        import site
        dirs += [Path(p) for p in site.getsitepackages()]
        dirs.append(Path(site.getusersitepackages()))
    except (AttributeError, ImportError):
        pass
    dirs += [Path(p) for p in sys.path if p]
    seen, out = set(), []
    for d in dirs:
        if d not in seen:
            seen.add(d)
            out.append(d)
    return out


def find_wheel_lib(sub: str, header: str, env_var: str) -> Path | None:
    """The folder holding include/<header> and lib/: $env_var, else <site-packages>/nvidia/<sub>."""
    if os.environ.get(env_var):
        p = Path(os.environ[env_var])
        return p if (p / "include" / header).is_file() else None
    for d in candidate_site_dirs():
        p = d / "nvidia" / sub
        if (p / "include" / header).is_file():
            return p
    return None


def find_nvcc() -> str | None:
    w = shutil.which("nvcc")
    if w:
        return w
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var) and (Path(os.environ[var]) / "bin" / "nvcc").is_file():
            return str(Path(os.environ[var]) / "bin" / "nvcc")
    for p in FALLBACK_NVCC:
        if Path(p).is_file():
            return p
    return None


def mpi_build_flags() -> tuple[list[str], list[str], str]:
    """(compile flags, link flags, how they were found)."""
    mpicc = shutil.which("mpicc")
    if mpicc:
        comp = _cmd_output([mpicc, "--showme:compile"])
        link = _cmd_output([mpicc, "--showme:link"])
        if comp is not None and link is not None:   # Open MPI
            c, _ = parse_mpicc_flags(comp)
            _, l = parse_mpicc_flags(link)
            return c, l or ["-lmpi"], "mpicc --showme"
        show = _cmd_output([mpicc, "-show"])          # MPICH and derivatives
        if show is not None:
            c, l = parse_mpicc_flags(show)
            return c, l or ["-lmpi"], "mpicc -show"
    for inc in FALLBACK_MPI_INCLUDES:
        if (Path(inc) / "mpi.h").is_file():
            return [f"-I{inc}"], ["-lmpi"], f"fallback {inc}"
    return [], ["-lmpi"], "none (mpi.h must be on the default include path)"


def find_mpi_header(comp_flags: list[str]) -> Path | None:
    for f in comp_flags:
        if f.startswith("-I") and (Path(f[2:]) / "mpi.h").is_file():
            return Path(f[2:]) / "mpi.h"
    return None


def _csv_query(fields: list[str]) -> list[dict] | None:
    if not shutil.which("nvidia-smi"):
        return None
    out = _cmd_output(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader"])
    if out is None:
        return None
    rows = []
    for row in csv.reader(io.StringIO(out)):
        if row:
            rows.append({k: v.strip() for k, v in zip(fields, row)})
    return rows


def wheel_version(*names: str) -> dict[str, str]:
    from importlib import metadata
    out = {}
    for n in names:
        try:
            out[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            pass
    return out


def collect_provenance(nvcc: str | None, launcher: str | None) -> dict:
    gpus = _csv_query(["index", "name", "driver_version", "memory.total", "pci.bus_id"])
    extra = _csv_query(["index", "compute_cap", "clocks.sm", "clocks.max.sm", "clocks.mem", "power.limit"])
    if gpus and extra:
        for g, e in zip(gpus, extra):
            g.update({k: v for k, v in e.items() if k != "index"})
    prov = {
        "bench": "provenance",
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "gpus": gpus,
        "gpu": gpus[0]["name"] if gpus else None,
        "driver": gpus[0]["driver_version"] if gpus else None,
        "nvidia_smi_topo": _cmd_output(["nvidia-smi", "topo", "-m"]) if shutil.which("nvidia-smi") else None,
        "nvlink_status": _cmd_output(["nvidia-smi", "nvlink", "-s"]) if shutil.which("nvidia-smi") else None,
        "nvcc_version": (_cmd_output([nvcc, "--version"]) or "").strip().splitlines()[-1:] if nvcc else None,
        "mpi_version": ((_cmd_output([launcher, "--version"]) or "").strip().splitlines() or [None])[0]
        if launcher else None,
        "wheels": wheel_version("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nvshmem-cu13", "nvidia-nvshmem-cu12"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "env": dict(NVLS_OFF),
    }
    return prov


# ----------------------------------------------------------------------------- running


@dataclass
class Step:
    name: str
    rc: int | None = None
    timed_out: bool = False
    seconds: float = 0.0
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out


@dataclass
class Runner:
    out: Path
    deadline: float
    log_build: io.TextIOBase
    log_run: io.TextIOBase
    steps: list[Step] = field(default_factory=list)

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def run(self, name: str, cmd: list[str], env: dict, limit: float, log: io.TextIOBase) -> tuple[Step, str]:
        """Runs cmd in its own process group; kills that group at the timeout. Returns (step, output)."""
        step = Step(name)
        self.steps.append(step)
        timeout = min(limit, self.remaining() - 5.0)
        log.write(f"\n===== {name}: {shlex.join(cmd)}\n")
        shown = {k: env[k] for k in sorted(env) if k.startswith(("NCCL_", "NVSHMEM_", "TORCH_", "LD_LIBRARY"))}
        log.write(f"      env: {json.dumps(shown)}\n")
        log.flush()
        if timeout <= 1:
            step.note = "no time left in the budget"
            log.write(f"      skipped: {step.note}\n")
            return step, ""
        t0 = time.monotonic()
        try:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                    start_new_session=True, errors="replace")
        except OSError as e:
            step.rc, step.note = 127, str(e)
            log.write(f"      cannot start: {e}\n")
            return step, ""
        try:
            output, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            step.timed_out = True
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(proc.pid, sig)   # the group this runner started, by its id
                except ProcessLookupError:
                    break
                try:
                    output, _ = proc.communicate(timeout=10)
                    break
                except subprocess.TimeoutExpired:
                    continue
            else:
                output = ""
            output = output or ""
        step.rc = proc.returncode
        step.seconds = round(time.monotonic() - t0, 2)
        log.write(squeeze_choice_lines(output))
        log.write(f"\n----- {name}: rc={step.rc} timed_out={step.timed_out} {step.seconds}s\n")
        log.flush()
        return step, output


def child_env(extra: dict | None = None, ld_prepend: list[Path] | None = None) -> dict:
    env = dict(os.environ)
    env.update(NVLS_OFF)
    if extra:
        env.update(extra)
    if ld_prepend:
        old = env.get("LD_LIBRARY_PATH", "")
        env["LD_LIBRARY_PATH"] = ":".join([str(p) for p in ld_prepend] + ([old] if old else []))
    return env


def prepare_nvshmem_links(nvshmem_home: Path, build_dir: Path) -> None:
    nvl = build_dir / "nvl"
    nvl.mkdir(parents=True, exist_ok=True)
    lib = nvshmem_home / "lib"
    host = sorted(lib.glob("libnvshmem_host.so*"))
    if host:
        link = nvl / "libnvshmem_host.so"
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(host[0])
    dev = lib / "libnvshmem_device.a"
    if dev.is_file():
        link = nvl / "libnvshmem_device.a"
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(dev)


def gpu_count() -> int:
    out = _cmd_output(["nvidia-smi", "-L"]) if shutil.which("nvidia-smi") else None
    return len([ln for ln in (out or "").splitlines() if ln.startswith("GPU ")])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    t_start = time.monotonic()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    jsonl_path = out / "calibration_raw.jsonl"
    build_log = open(out / "build.log", "w")
    run_log = open(out / "run.log", "w")
    runner = Runner(out, t_start + args.budget_s, build_log, run_log)
    failures: list[str] = []

    nvcc = find_nvcc()
    launcher = shutil.which("mpirun") or shutil.which("mpiexec")
    nccl_home = find_wheel_lib("nccl", "nccl.h", "CLOCKWORKS_NCCL_HOME")
    nvshmem_home = find_wheel_lib("nvshmem", "nvshmem.h", "CLOCKWORKS_NVSHMEM_HOME")
    mpi_comp, mpi_link, mpi_how = mpi_build_flags()
    prov = collect_provenance(nvcc, launcher)
    arch = args.arch or (arch_from_compute_cap((prov.get("gpus") or [{}])[0].get("compute_cap", "")) or "sm_90")
    ngpu = gpu_count()
    np_ = args.np or max(2, ngpu)
    flavor = detect_mpi_flavor(_cmd_output([launcher, "--version"]) or "") if launcher else "unknown"
    prov.update({
        "quick": args.quick, "ranks": np_, "gpus_visible": ngpu, "arch": arch, "mpi_flavor": flavor,
        "mpi_flags_from": mpi_how, "nccl_home": str(nccl_home) if nccl_home else None,
        "nvshmem_home": str(nvshmem_home) if nvshmem_home else None,
        "one_channel_env": dict(ONE_CHANNEL), "nccl_debug_env": dict(NCCL_DEBUG_ENV),
    })
    git = _cmd_output(["git", "-C", str(HERE), "rev-parse", "HEAD"])
    prov["git_commit"] = git.strip() if git else None
    jsonl = open(jsonl_path, "w")
    jsonl.write(json.dumps(prov) + "\n")
    jsonl.flush()
    build_log.write(f"provenance: {json.dumps({k: prov[k] for k in ('gpu', 'driver', 'wheels', 'arch', 'ranks')})}\n")
    build_log.write(f"nvcc={nvcc} launcher={launcher} ({flavor}) mpi flags from {mpi_how}: {mpi_comp} {mpi_link}\n")

    records: list[dict] = []

    def keep(lines: list[dict], run: str) -> None:
        for r in lines:
            r = {"run": run, **r}
            records.append(r)
            jsonl.write(json.dumps(r) + "\n")
        jsonl.flush()

    # ---- build
    problems = []
    if not nvcc:
        problems.append("nvcc not found (PATH, CUDA_HOME)")
    if not launcher:
        problems.append("mpirun/mpiexec not found")
    if nccl_home is None and not args.skip_nccl:
        problems.append("NCCL headers not found (pip install nvidia-nccl-cu13, or set CLOCKWORKS_NCCL_HOME)")
    if nvshmem_home is None and not args.skip_nvshmem:
        problems.append("NVSHMEM headers not found (pip install nvidia-nvshmem-cu13, or set CLOCKWORKS_NVSHMEM_HOME)")
    if ngpu < 2:
        problems.append(f"{ngpu} GPU(s) visible to nvidia-smi; the benchmarks need 2")
    built: dict[str, Path] = {}
    build_dir = args.build_dir or Path(tempfile.mkdtemp(prefix="cw_calib_"))
    build_dir.mkdir(parents=True, exist_ok=True)
    if nvcc:
        if nvshmem_home is not None:
            prepare_nvshmem_links(nvshmem_home, build_dir)
        cmds = build_commands(nvcc, arch, HERE, build_dir,
                              None if args.skip_nccl else nccl_home,
                              None if args.skip_nvshmem else nvshmem_home, mpi_comp, mpi_link)
        env = child_env()
        if args.skip_kernels:
            cmds.pop("kernels", None)
        logs = {k: io.StringIO() for k in cmds}
        with concurrent.futures.ThreadPoolExecutor(max_workers=3) as ex:
            futs = {k: ex.submit(runner.run, f"build {k}", c, env, 300.0, logs[k]) for k, c in cmds.items()}
            for k, f in futs.items():
                step, _ = f.result()
                build_log.write(logs[k].getvalue())
                if step.ok and (build_dir / f"bench_{k}").is_file():
                    built[k] = build_dir / f"bench_{k}"
                else:
                    failures.append(f"build {k} failed (rc={step.rc}, timed_out={step.timed_out}); see build.log")
        build_log.flush()
    for p in problems:
        failures.append(p)
        build_log.write(f"problem: {p}\n")

    # ---- runs
    as_root = hasattr(os, "geteuid") and os.geteuid() == 0
    ld = [nvshmem_home / "lib"] if nvshmem_home else []
    if launcher and ngpu >= 2:
        plan = []  # (run, program, arguments, environment, time limit, keep its timings)
        if "nccl" in built:
            plan.append(("nccl_default", "nccl", nccl_sweep_args(args.quick, False, build_dir / "nccl_default.jsonl",
                                                                  "default"), {**NCCL_DEBUG_ENV}, 240.0, True))
        if "nvshmem" in built:
            plan.append(("nvshmem", "nvshmem", nvshmem_sweep_args(args.quick, build_dir / "nvshmem.jsonl"), {}, 200.0,
                         True))
        if "nccl" in built and not args.skip_one_channel:
            plan.append(("nccl_1ch", "nccl", nccl_sweep_args(args.quick, True, build_dir / "nccl_1ch.jsonl", "1ch"),
                         {**NCCL_DEBUG_ENV, **ONE_CHANNEL}, 240.0, True))
        if "kernels" in built:  # one process, one GPU: no mpirun
            plan.append(("kernels", "kernels", kernel_sweep_args(args.quick, build_dir / "kernels.jsonl"), {}, 120.0,
                         True))
        if "nccl" in built:  # NCCL's decisions, logged in untimed passes
            plan.append(("nccl_choices", "nccl", nccl_sweep_args(args.quick, False, build_dir / "nccl_choices.jsonl",
                                                                  "choices") + CHOICE_PASS_ARGS,
                         {**NCCL_TUNING_ENV}, 120.0, False))
            if not args.skip_one_channel:
                plan.append(("nccl_1ch_choices", "nccl",
                             nccl_sweep_args(args.quick, True, build_dir / "nccl_1ch_choices.jsonl", "1ch_choices")
                             + CHOICE_PASS_ARGS, {**NCCL_TUNING_ENV, **ONE_CHANNEL}, 120.0, False))
        for run, prog, pargs, extra, limit, timed in plan:
            out_file = Path(pargs[pargs.index("--out") + 1])
            if out_file.exists():
                out_file.unlink()
            env = child_env(extra, ld)
            names = list(NVLS_OFF) + list(extra) + ["LD_LIBRARY_PATH"]
            cmd = ([str(built[prog]), *pargs] if prog == "kernels" else
                   mpirun_command(launcher, flavor, np_, [str(built[prog]), *pargs], names, as_root))
            step, output = runner.run(run, cmd, env, limit, run_log)
            lines = parse_json_lines(out_file.read_text()) if out_file.exists() else []
            if not lines:   # the program also prints its lines; use them if the file is missing
                lines = [r for r in parse_json_lines(output)
                         if str(r.get("bench", "")).startswith(("nccl", "nvshmem", "kernel"))]
            if timed:
                keep(lines, run)
            if prog == "nccl":
                ch = parse_nccl_channels(output)
                if ch:
                    keep([{"bench": "nccl_channels", **ch}], run)
                keep([{"bench": "nccl_choice", **c} for c in parse_nccl_choices(output)], run)
            if not step.ok:
                failures.append(f"run {run} failed (rc={step.rc}, timed_out={step.timed_out}, "
                                f"{step.note or 'see run.log'}); kept {len(lines)} lines")

    summary = {"bench": "summary", "ok": not failures, "failures": failures,
               "steps": [vars(s) for s in runner.steps], "seconds": round(time.monotonic() - t_start, 1),
               **summarize(records)}
    jsonl.write(json.dumps(summary) + "\n")
    jsonl.close()
    build_log.close()
    run_log.close()
    print(json.dumps({k: summary[k] for k in ("ok", "failures", "seconds", "counts", "incorrect")}, indent=1))
    if failures:
        print("calibration runner: FAILED:\n  " + "\n  ".join(failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
