"""`codegen.build`: finding nvcc, NCCL, NVSHMEM and MPI, the nvcc command lines, and real builds
(no GPU needed: programs are compiled and linked, never run; none links libcuda).

The finder is tested on fake layouts (a fake nvcc script, wheel trees with their metadata, MPI
wrappers) with every search root pointed into tmp_path. The real builds skip, naming what is missing
and how to get it, where nvcc or a wheel is absent; the generated programs of every protocol build in
parallel inside one fixture (2 workers), each (protocol, world, backend) reported as its own test."""

from __future__ import annotations

import concurrent.futures
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from clockworks_dist.calibrate import runner as probe
from clockworks_dist.codegen import build
from clockworks_dist.codegen.build import BuildError, Missing, Toolchain, ToolchainMissing

ROOT = Path(__file__).resolve().parent.parent
PROTOCOLS = sorted((ROOT / "protocols").glob("*.py"))
WORLDS = (2, 4)
ENV_VARS = ("CUDA_HOME", "CUDA_PATH", "CLOCKWORKS_NCCL_HOME", "CLOCKWORKS_NVSHMEM_HOME", "CLOCKWORKS_CUDA_ARCH")


# ----------------------------------------------------------------------------- fake layouts


def _script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def _fake_cuda(root: Path, version: str = "13.0.88") -> Path:
    """A toolkit folder whose bin/nvcc answers --version and --dryrun like the real one."""
    inc = root / "targets" / "x86_64-linux" / "include"
    inc.mkdir(parents=True, exist_ok=True)
    (inc / "cuda.h").write_text("/* fake */\n")
    top = root / "bin" / ".."
    major, minor = version.split(".")[:2]
    return _script(root / "bin" / "nvcc", f"""case "$*" in
  *--version*) echo "Cuda compilation tools, release {major}.{minor}, V{version}" ;;
  *--dryrun*)
    echo '#$ TOP={top}' >&2
    echo '#$ INCLUDES="-I{top}/targets/x86_64-linux/include"  ' >&2
    echo '#$ LIBRARIES=  "-L{top}/targets/x86_64-linux/lib/stubs" "-L{top}/targets/x86_64-linux/lib"' >&2 ;;
  *) exit 1 ;;
esac
""")


def _nccl_tree(home: Path, version: str = "2.28.9") -> Path:
    major, minor, patch = version.split(".")
    (home / "include").mkdir(parents=True, exist_ok=True)
    (home / "include" / "nccl.h").write_text(
        f"#define NCCL_MAJOR {major}\n#define NCCL_MINOR {minor}\n#define NCCL_PATCH {patch}\n")
    (home / "lib").mkdir(parents=True, exist_ok=True)
    (home / "lib" / "libnccl.so.2").write_bytes(b"")
    return home


def _nvshmem_tree(home: Path, version: str = "3.4.5", unversioned: bool = False) -> Path:
    major, minor, patch = version.split(".")
    (home / "include" / "non_abi").mkdir(parents=True, exist_ok=True)
    (home / "include" / "nvshmem.h").write_text('#include "non_abi/nvshmem_version.h"\n')
    (home / "include" / "non_abi" / "nvshmem_version.h").write_text(
        f"#define NVSHMEM_VENDOR_MAJOR_VERSION {major}\n#define NVSHMEM_VENDOR_MINOR_VERSION {minor}\n"
        f"#define NVSHMEM_VENDOR_PATCH_VERSION {patch}\n")
    (home / "lib").mkdir(parents=True, exist_ok=True)
    (home / "lib" / "libnvshmem_host.so.3").write_bytes(b"")
    (home / "lib" / "libnvshmem_device.a").write_bytes(b"")
    if unversioned:
        (home / "lib" / "libnvshmem_host.so").symlink_to("libnvshmem_host.so.3")
    return home


def _wheel(site: Path, sub: str, cuda: int, version: str, pkg: str | None = None) -> Path:
    """nvidia-<sub>-cu<cuda> installed in `site`: its tree under `pkg` and its dist-info."""
    pkg = pkg or f"nvidia/{sub}"
    home = site / pkg
    (_nccl_tree if sub == "nccl" else _nvshmem_tree)(home, version)
    header = "nccl.h" if sub == "nccl" else "nvshmem.h"
    info = site / f"nvidia_{sub}_cu{cuda}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: nvidia-{sub}-cu{cuda}\nVersion: {version}\n")
    (info / "RECORD").write_text(f"{pkg}/include/{header},,\n{info.name}/METADATA,,\n")
    return home


@pytest.fixture
def fake(monkeypatch, tmp_path):
    """Every search root of the finder pointed into tmp_path, all of it empty."""
    for var in ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    ns = SimpleNamespace(root=tmp_path, bin=tmp_path / "bin", site=tmp_path / "site", pybin=tmp_path / "pybin")
    for d in (ns.bin, ns.site, ns.pybin):
        d.mkdir()
    monkeypatch.setenv("PATH", str(ns.bin))
    monkeypatch.syspath_prepend(str(ns.site))          # so importlib.metadata sees fake wheels' dist-info
    monkeypatch.setattr(probe, "candidate_site_dirs", lambda: [ns.site])
    monkeypatch.setattr(probe, "FALLBACK_NVCC", [])
    monkeypatch.setattr(probe, "FALLBACK_MPI_INCLUDES", [])
    monkeypatch.setattr(build, "_SYSTEM_NCCL", [])
    monkeypatch.setattr(build, "_SYSTEM_NVSHMEM", [])
    monkeypatch.setattr(build, "_DEFAULT_INCLUDES", [])
    monkeypatch.setattr(build, "_python_bin_dir", lambda: ns.pybin)
    monkeypatch.setattr(build, "_python_prefixes", lambda: [])
    monkeypatch.setattr(build, "_mpi4py_config", lambda: {"_absent": True})
    return ns


def _mpich(ns, name: str = "mpich") -> tuple[Path, Path]:
    """An MPICH-like install with its wrapper in ns.bin: (include, lib)."""
    inc, lib = ns.root / name / "include", ns.root / name / "lib"
    inc.mkdir(parents=True)
    lib.mkdir(parents=True)
    (inc / "mpi.h").write_text("")
    (lib / "libmpi.so.12").write_bytes(b"")
    _script(ns.bin / "mpicc", f"""case "$1" in
  -show) echo "gcc -I{inc} -L{lib} -Wl,-rpath -Wl,{lib} -Wl,--enable-new-dtags -lmpi" ;;
  *) exit 1 ;;
esac
""")
    return inc, lib


def _complete(ns, version: str = "13.0.88", cuda: int = 13) -> None:
    """nvcc on PATH, both wheels, MPICH: everything found."""
    nvcc = _fake_cuda(ns.root / "cuda", version)
    (ns.bin / "nvcc").symlink_to(nvcc)
    _wheel(ns.site, "nccl", cuda, "2.28.9")
    _wheel(ns.site, "nvshmem", cuda, "3.4.5")
    _mpich(ns)


# ----------------------------------------------------------------------------- the finder


def test_finds_cu13_wheels_mpich_and_the_toolkit(fake):
    _complete(fake)
    tc = build.find_toolchain()
    assert tc.ok and tc.missing == [] and tc.notes == ()
    assert tc.nvcc == str(fake.bin / "nvcc") and tc.nvcc_version == "13.0.88" and tc.cuda_major == 13
    assert tc.cuda_root == fake.root / "cuda"
    assert tc.cuda_include == fake.root / "cuda" / "targets" / "x86_64-linux" / "include"
    assert tc.nccl_include == fake.site / "nvidia" / "nccl" / "include"
    assert tc.nccl_lib == fake.site / "nvidia" / "nccl" / "lib"
    assert (tc.nccl_version, tc.nccl_source) == ("2.28.9", "wheel nvidia-nccl-cu13 2.28.9")
    assert (tc.nvshmem_version, tc.nvshmem_source) == ("3.4.5", "wheel nvidia-nvshmem-cu13 3.4.5")
    assert tc.nvshmem_lib == fake.site / "nvidia" / "nvshmem" / "lib"
    assert tc.mpi_header == fake.root / "mpich" / "include" / "mpi.h"
    assert tc.mpi_compile == (f"-I{fake.root / 'mpich' / 'include'}",)
    assert "-lmpi" in tc.mpi_link and "-show" in tc.mpi_source
    assert tc.arch == "sm_90"
    text = build.describe(tc)
    assert "ready" in text and "2.28.9" in text and "3.4.5" in text and "MISSING" not in text
    assert "libcuda" not in text


def test_finds_cu12_wheels_and_notes_a_cuda_mismatch(fake):
    nvcc = _fake_cuda(fake.root / "cuda", "13.0.88")
    _wheel(fake.site, "nccl", 12, "2.21.5")
    _wheel(fake.site, "nvshmem", 12, "3.2.5")
    _mpich(fake)
    tc = build.find_toolchain(nvcc=str(nvcc))
    assert tc.ok
    assert tc.nccl_source == "wheel nvidia-nccl-cu12 2.21.5" and tc.nccl_version == "2.21.5"
    assert tc.nvshmem_source == "wheel nvidia-nvshmem-cu12 3.2.5"
    assert len(tc.notes) == 2 and all("CUDA 12 but nvcc is CUDA 13" in n and "cu13" in n for n in tc.notes)
    assert "notes:" in build.describe(tc)
    nvcc12 = _fake_cuda(fake.root / "cuda12", "12.4.131")
    tc = build.find_toolchain(nvcc=str(nvcc12))
    assert tc.ok and tc.nvcc_version == "12.4.131" and tc.notes == ()


def test_finds_a_wheel_under_the_cuda_major_namespace(fake):
    _complete(fake)
    shutil.rmtree(fake.site / "nvidia" / "nccl")
    _wheel(fake.site, "nccl", 13, "2.29.1", pkg="nvidia/cu13")
    tc = build.find_toolchain("nccl")
    assert tc.ok and tc.nccl_include == fake.site / "nvidia" / "cu13" / "include"
    assert tc.nccl_source == "wheel nvidia-nccl-cu13 2.29.1"


def test_a_tree_no_wheel_owns_is_still_used(fake):
    _complete(fake)
    shutil.rmtree(fake.site / "nvidia" / "nccl")
    _nccl_tree(fake.site / "nvidia" / "nccl", "2.27.3")          # copied in by hand, no dist-info
    tc = build.find_toolchain("nccl")
    assert tc.ok and tc.nccl_version == "2.27.3" and "wheel" in tc.nccl_source


def test_home_variables_win_over_the_wheels(fake, monkeypatch):
    _complete(fake)
    monkeypatch.setenv("CLOCKWORKS_NCCL_HOME", str(_nccl_tree(fake.root / "my-nccl", "2.30.0")))
    monkeypatch.setenv("CLOCKWORKS_NVSHMEM_HOME", str(_nvshmem_tree(fake.root / "my-nvshmem", "3.5.0")))
    tc = build.find_toolchain()
    assert tc.ok
    assert (tc.nccl_include, tc.nccl_version, tc.nccl_source) == (
        fake.root / "my-nccl" / "include", "2.30.0", "$CLOCKWORKS_NCCL_HOME")
    assert (tc.nvshmem_lib, tc.nvshmem_version, tc.nvshmem_source) == (
        fake.root / "my-nvshmem" / "lib", "3.5.0", "$CLOCKWORKS_NVSHMEM_HOME")


def test_a_wrong_home_variable_is_reported_not_skipped(fake, monkeypatch):
    _complete(fake)                                   # the wheels are there, but the variable says otherwise
    monkeypatch.setenv("CLOCKWORKS_NCCL_HOME", str(fake.root / "nowhere"))
    tc = build.find_toolchain("nccl")
    [m] = tc.missing
    assert m.what.startswith("NCCL") and "CLOCKWORKS_NCCL_HOME" in m.looked and "unset it" in m.looked
    assert "pip install nvidia-nccl-cu13" in m.fix


def test_cuda_home_nvcc_wins_over_path(fake, monkeypatch):
    _complete(fake)                                   # nvcc 13 on PATH
    _fake_cuda(fake.root / "cuda12", "12.8.61")
    monkeypatch.setenv("CUDA_HOME", str(fake.root / "cuda12"))
    tc = build.find_toolchain()
    assert tc.nvcc == str(fake.root / "cuda12" / "bin" / "nvcc") and tc.nvcc_version == "12.8.61"


def test_nothing_found_names_each_fix(fake, tmp_path):
    tc = build.find_toolchain()
    assert not tc.ok
    by_what = {m.what.split()[0]: m for m in tc.missing}
    assert set(by_what) == {"nvcc", "NCCL", "NVSHMEM", "MPI"}
    assert "CUDA toolkit (nvcc) 12.x or 13.x" in by_what["nvcc"].fix and "PATH" in by_what["nvcc"].fix
    assert "pip install nvidia-nccl-cu13" in by_what["NCCL"].fix and "nvidia-nccl-cu12" in by_what["NCCL"].fix
    assert "CLOCKWORKS_NCCL_HOME" in by_what["NCCL"].fix
    assert "pip install nvidia-nvshmem-cu13" in by_what["NVSHMEM"].fix
    assert "CLOCKWORKS_NVSHMEM_HOME" in by_what["NVSHMEM"].fix
    assert "pip install mpich mpi4py" in by_what["MPI"].fix and "libopenmpi-dev" in by_what["MPI"].fix
    assert all(m.looked for m in tc.missing)      # each says where it looked
    text = build.describe(tc)
    assert "4 thing(s) missing" in text and text.count("MISSING") == 4
    for m in tc.missing:
        assert m.fix in text
    cu = tmp_path / "prog.cu"
    cu.write_text("int main() { return 0; }\n")
    with pytest.raises(ToolchainMissing) as exc:
        build.compile_program(cu, "nvshmem", tmp_path / "out", tc)
    assert {m.what.split()[0] for m in exc.value.missing} == {"nvcc", "NVSHMEM", "MPI"}
    assert "pip install nvidia-nvshmem-cu13" in str(exc.value) and not (tmp_path / "out").exists()


def test_the_backend_decides_what_is_missing(fake):
    nvcc = _fake_cuda(fake.root / "cuda")
    (fake.bin / "nvcc").symlink_to(nvcc)
    _wheel(fake.site, "nccl", 13, "2.28.9")
    _mpich(fake)
    assert build.find_toolchain("nccl").ok
    tc = build.find_toolchain("nvshmem")
    assert [m.what.split()[0] for m in tc.missing] == ["NVSHMEM"]
    assert tc.missing_for("nccl") == [] and len(tc.missing_for("nvshmem")) == 1 == len(tc.missing_for(None))
    assert "(not needed here)" in build.describe(build.find_toolchain("nccl"))
    with pytest.raises(BuildError, match="unknown backend 'mscclpp'"):
        build.find_toolchain("mscclpp")


def test_an_old_nvcc_is_missing(fake):
    _complete(fake)
    nvcc = _fake_cuda(fake.root / "cuda11", "11.8.89")
    tc = build.find_toolchain(nvcc=str(nvcc))
    [m] = tc.missing
    assert m.what == "nvcc" and "CUDA 11.8.89; 12.x or 13.x is needed" in m.looked


def test_the_arch_is_given_else_from_the_environment_else_the_gpu_else_sm_90(fake, monkeypatch):
    _complete(fake)
    assert build.find_toolchain().arch == "sm_90"
    _script(fake.bin / "nvidia-smi", 'echo "10.0"\necho "10.0"\n')
    tc = build.find_toolchain()
    assert tc.arch == "sm_100" and "10.0" in tc.arch_source
    monkeypatch.setenv("CLOCKWORKS_CUDA_ARCH", "sm_90a")
    assert build.find_toolchain().arch == "sm_90a"
    given = build.find_toolchain(arch="sm_80")
    assert (given.arch, given.arch_source) == ("sm_80", "given")
    with pytest.raises(BuildError, match="not a CUDA architecture"):
        build.find_toolchain(arch="hopper")
    monkeypatch.setenv("CLOCKWORKS_CUDA_ARCH", "90")
    with pytest.raises(BuildError, match="CLOCKWORKS_CUDA_ARCH"):
        build.find_toolchain()


def test_mpi_from_an_open_mpi_wrapper(fake):
    inc = fake.root / "ompi" / "include"
    inc.mkdir(parents=True)
    (inc / "mpi.h").write_text("")
    _script(fake.bin / "mpicc", f"""case "$1" in
  --showme:compile) echo "-I{inc} -pthread" ;;
  --showme:link) echo "-pthread -L/ompi/lib -Wl,-rpath -Wl,/ompi/lib -lmpi" ;;
  *) exit 1 ;;
esac
""")
    tc = build.find_toolchain()
    assert tc.mpi_compile == (f"-I{inc}",) and tc.mpi_header == inc / "mpi.h"
    assert tc.mpi_link == ("-Xcompiler", "-pthread", "-L/ompi/lib", "-Xlinker", "-rpath", "-Xlinker", "/ompi/lib",
                           "-lmpi")
    assert tc.mpi_source.endswith("--showme")


def test_mpi_wrapper_next_to_python_when_not_on_path(fake):
    inc, _ = _mpich(fake)
    (fake.bin / "mpicc").rename(fake.pybin / "mpicc")
    tc = build.find_toolchain()
    assert tc.mpi_header == inc / "mpi.h" and tc.mpi_source == f"{fake.pybin / 'mpicc'} -show"


def test_mpi_from_mpi4py_config(fake, monkeypatch):
    inc, lib = fake.root / "mpi" / "include", fake.root / "mpi" / "lib"
    inc.mkdir(parents=True)
    (inc / "mpi.h").write_text("")
    monkeypatch.setattr(build, "_mpi4py_config",
                        lambda: {"include_dirs": [str(inc)], "library_dirs": [str(lib)], "libraries": ["mpi"]})
    tc = build.find_toolchain()
    assert tc.mpi_source == "mpi4py.get_config()" and tc.mpi_header == inc / "mpi.h"
    assert tc.mpi_compile == (f"-I{inc}",)
    assert tc.mpi_link == (f"-L{lib}", "-Xlinker", f"-rpath={lib}", "-lmpi")


def test_mpi_from_mpi4py_configs_wrapper(fake, monkeypatch):
    inc, _ = _mpich(fake)
    wrapper = (fake.bin / "mpicc").rename(fake.root / "mpich" / "mpicc")
    monkeypatch.setattr(build, "_mpi4py_config", lambda: {"mpicc": str(wrapper)})
    tc = build.find_toolchain()
    assert tc.mpi_header == inc / "mpi.h" and tc.mpi_source == f"{wrapper} -show"


def test_mpi_from_a_wheel_in_the_python_prefix(fake, monkeypatch):
    prefix = fake.root / "venv"
    (prefix / "include").mkdir(parents=True)
    (prefix / "include" / "mpi.h").write_text("")
    (prefix / "lib").mkdir()
    (prefix / "lib" / "libmpi.so.12").write_bytes(b"")
    monkeypatch.setattr(build, "_python_prefixes", lambda: [prefix])
    tc = build.find_toolchain()
    assert tc.mpi_header == prefix / "include" / "mpi.h" and "wheel" in tc.mpi_source
    assert f"-rpath={prefix / 'lib'}" in tc.mpi_link and tc.mpi_link[-1] == "-lmpi"


def test_real_mpi4py_config_is_read_without_starting_mpi():
    cfg = build._mpi4py_config()
    assert isinstance(cfg, dict)
    assert set(cfg) <= {"_absent", "mpicc", "include_dirs", "library_dirs", "libraries"}


# ----------------------------------------------------------------------------- the command lines


def _toolchain(tmp_path: Path, **kw) -> Toolchain:
    base = dict(backend=None, nvcc="/cuda/bin/nvcc", nvcc_version="13.0.88", cuda_include=Path("/cuda/include"),
                arch="sm_90", nccl_include=Path("/w/nccl/include"), nccl_lib=Path("/w/nccl/lib"),
                nvshmem_include=tmp_path / "nvshmem" / "include", nvshmem_lib=tmp_path / "nvshmem" / "lib",
                mpi_compile=("-I/mpi/include",), mpi_link=("-L/mpi/lib", "-Xlinker", "-rpath", "-Xlinker", "/mpi/lib",
                                                           "-lmpi"),
                mpi_header=Path("/mpi/include/mpi.h"))
    base.update(kw)
    return Toolchain(**base)


def _rpaths(cmd: list[str]) -> list[str]:
    """Every folder the command puts in the program's rpath."""
    out = []
    for i, tok in enumerate(cmd):
        if tok.startswith("-rpath="):
            out.append(tok[len("-rpath="):])
        elif tok == "-rpath" and i + 2 < len(cmd) and cmd[i + 1] == "-Xlinker":
            out.append(cmd[i + 2])
    return out


def test_nccl_command(tmp_path):
    tc = _toolchain(tmp_path)
    out = tmp_path / "ring"
    cmd = build.compile_command(Path("ring.cu"), "nccl", tc, out)
    assert cmd[:4] == ["/cuda/bin/nvcc", "-O2", "-std=c++17", "-arch=sm_90"]
    assert "-I/w/nccl/include" in cmd and "-I/mpi/include" in cmd
    assert cmd.index("-I/w/nccl/include") < cmd.index("ring.cu")
    assert cmd[cmd.index("ring.cu") + 1:cmd.index("ring.cu") + 3] == ["-o", str(out)]
    assert cmd[cmd.index(str(out)) + 1:] == ["-L/w/nccl/lib", "-l:libnccl.so.2", "-Xlinker", "-rpath=/w/nccl/lib",
                                             *tc.mpi_link]
    assert _rpaths(cmd) == ["/w/nccl/lib", "/mpi/lib"]
    assert "-rdc=true" not in cmd and not any("nvshmem" in t for t in cmd)


def test_nvshmem_command(tmp_path):
    tc = _toolchain(tmp_path, arch="sm_100")
    out = tmp_path / "oneshot"
    cmd = build.compile_command(Path("oneshot.cu"), "nvshmem", tc, out, link_dir=tmp_path / "lk")
    assert "-arch=sm_100" in cmd and "-rdc=true" in cmd and "-std=c++17" in cmd
    assert f"-I{tmp_path / 'nvshmem' / 'include'}" in cmd and "-I/mpi/include" in cmd
    i = cmd.index(f"-L{tmp_path / 'lk' / 'nvl'}")
    assert cmd[i:] == [f"-L{tmp_path / 'lk' / 'nvl'}", "-lnvshmem_host", "-lnvshmem_device",
                       "-Xlinker", f"-rpath={tmp_path / 'nvshmem' / 'lib'}", *tc.mpi_link]
    assert _rpaths(cmd) == [str(tmp_path / "nvshmem" / "lib"), "/mpi/lib"]
    assert not any("nccl" in t for t in cmd)


def test_a_system_nvshmem_with_plain_names_is_linked_directly(tmp_path):
    lib = _nvshmem_tree(tmp_path / "sys", unversioned=True) / "lib"
    tc = _toolchain(tmp_path, nvshmem_include=lib.parent / "include", nvshmem_lib=lib)
    cmd = build.compile_command(Path("p.cu"), "nvshmem", tc, tmp_path / "p", link_dir=tmp_path / "lk")
    assert cmd[cmd.index(f"-L{lib}") + 1] == "-lnvshmem_host"
    build.prepare_link_dir("nvshmem", _toolchain(tmp_path, nvshmem_lib=lib), tmp_path / "lk")
    assert not (tmp_path / "lk" / "nvl").exists()


def test_prepare_link_dir_links_the_wheels_plain_names(tmp_path):
    home = _nvshmem_tree(tmp_path / "nvshmem")
    build.prepare_link_dir("nvshmem", _toolchain(tmp_path), tmp_path / "lk")
    nvl = tmp_path / "lk" / "nvl"
    assert (nvl / "libnvshmem_host.so").resolve() == (home / "lib" / "libnvshmem_host.so.3").resolve()
    assert (nvl / "libnvshmem_device.a").resolve() == (home / "lib" / "libnvshmem_device.a").resolve()


def test_command_refuses_a_backend_it_cannot_build(tmp_path):
    tc = _toolchain(tmp_path, nccl_include=None, nccl_lib=None,
                    problems=(Missing("NCCL (nccl.h, libnccl.so.2)", build.NCCL_FIX, backends=("nccl",)),))
    with pytest.raises(ToolchainMissing, match="pip install nvidia-nccl-cu13"):
        build.compile_command(Path("p.cu"), "nccl", tc, tmp_path / "p")
    with pytest.raises(BuildError, match="unknown backend"):
        build.compile_command(Path("p.cu"), "gloo", tc, tmp_path / "p")


def test_first_errors_keeps_the_compiler_and_linker_errors():
    out = "\n".join(["prog.cu(3): warning #177-D: variable declared but never referenced",
                     "prog.cu(7): error: identifier \"undefined_name\" is undefined",
                     "", "1 error detected in the compilation of \"prog.cu\"."]
                    + [f"/usr/bin/ld: prog.o: undefined reference to `f{i}'" for i in range(20)])
    text = build._first_errors(out)
    assert text.splitlines()[0].strip().startswith('prog.cu(7): error: identifier "undefined_name"')
    assert "warning" not in text and "and 10 more line(s)" in text
    assert build._first_errors("") == "  (no output)"


# ----------------------------------------------------------------------------- real builds


def _ready(backend: str) -> Toolchain:
    """The machine's toolchain, or a skip naming what is missing and how to get it."""
    tc = build.find_toolchain(backend)
    if not tc.ok:
        pytest.skip(f"cannot build {backend} programs here: " + "; ".join(str(m) for m in tc.missing))
    return tc


def _dynamic(path: Path) -> tuple[list[str], list[str]]:
    """(needed libraries, rpath folders) of a linked program, from readelf."""
    if not shutil.which("readelf"):
        pytest.skip("readelf not found (binutils): cannot read the program's dynamic section")
    text = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, timeout=60).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", text)
    paths = [p for m in re.findall(r"\((?:RUNPATH|RPATH)\)\s+Library r\w*path: \[([^\]]+)\]", text)
             for p in m.split(":")]
    return needed, paths


# How the generated programs reach cuStreamWriteValue32: through the runtime, with cuda.h's types only.
WRITE_VALUE32 = r"""
typedef CUresult (*WriteValue32)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

static WriteValue32 find_write_value32() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found;
#if CUDART_VERSION >= 12050
  cudaError_t e = cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &fn, 12000, cudaEnableDefault, &found);
#else
  cudaError_t e = cudaGetDriverEntryPoint("cuStreamWriteValue32", &fn, cudaEnableDefault, &found);
#endif
  return e == cudaSuccess && found == cudaDriverEntryPointSuccess ? (WriteValue32)fn : nullptr;
}
"""

NCCL_PROGRAM = r"""
#include <cstdio>
#include <cuda.h>
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
""" + WRITE_VALUE32 + r"""
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int version = 0;
  ncclGetVersion(&version);
  if (argc > 99) {  // linked, never run here
    cudaStream_t stream = nullptr;
    WriteValue32 write = find_write_value32();
    if (write) write((CUstream)stream, (CUdeviceptr)0, 1u, CU_STREAM_WRITE_VALUE_DEFAULT);
  }
  std::printf("nccl %d\n", version);
  MPI_Finalize();
  return 0;
}
"""

NVSHMEM_PROGRAM = r"""
#include <cstdio>
#include <cuda.h>
#include <cuda_runtime.h>
#include <mpi.h>
#include <nvshmem.h>
#include <nvshmemx.h>
""" + WRITE_VALUE32 + r"""
__global__ void who(int* out) { *out = nvshmem_my_pe(); }

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  if (argc > 99) {  // linked, never run here
    nvshmemx_uniqueid_t id = NVSHMEMX_UNIQUEID_INITIALIZER;
    nvshmemx_get_uniqueid(&id);
    int* out = (int*)nvshmem_malloc(sizeof(int));
    who<<<1, 1>>>(out);
    WriteValue32 write = find_write_value32();
    if (write) write(nullptr, (CUdeviceptr)out, 1u, CU_STREAM_WRITE_VALUE_DEFAULT);
    nvshmem_free(out);
  }
  MPI_Finalize();
  return 0;
}
"""


def test_an_nccl_program_compiles_and_links(tmp_path):
    tc = _ready("nccl")
    cu = tmp_path / "nccl_probe.cu"
    cu.write_text(NCCL_PROGRAM)
    exe = build.compile_program(cu, "nccl", tmp_path / "out", tc)
    assert exe == tmp_path / "out" / "nccl_probe" and os.access(exe, os.X_OK)
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["nccl_probe"]   # the link folder is gone
    needed, rpath = _dynamic(exe)
    assert "libnccl.so.2" in needed and not any("nvshmem" in n for n in needed)
    assert not any(n.startswith("libcuda.so") for n in needed)
    assert str(tc.nccl_lib) in rpath and all(".link" not in p for p in rpath)


def test_an_nvshmem_program_compiles_and_links(tmp_path):
    tc = _ready("nvshmem")
    cu = tmp_path / "nvshmem_probe.cu"
    cu.write_text(NVSHMEM_PROGRAM)
    exe = build.compile_program(cu, "nvshmem", tmp_path / "out", tc)
    assert os.access(exe, os.X_OK)
    needed, rpath = _dynamic(exe)
    assert any(n.startswith("libnvshmem_host.so") for n in needed)
    assert not any(n.startswith("libcuda.so") for n in needed)
    assert "libnccl.so.2" not in needed
    assert str(tc.nvshmem_lib) in rpath and all(".link" not in p for p in rpath)


def test_a_compile_error_shows_nvccs_lines_and_the_command(tmp_path):
    tc = _ready("nccl")
    cu = tmp_path / "broken.cu"
    cu.write_text("#include <nccl.h>\nint main() {\n  return undefined_name;\n}\n")
    with pytest.raises(BuildError) as exc:
        build.compile_program(cu, "nccl", tmp_path / "out", tc)
    text = str(exc.value)
    assert "broken.cu: the nccl build failed" in text
    assert "broken.cu(3): error" in text and "undefined_name" in text
    assert "command: " in text and "-l:libnccl.so.2" in text and tc.nvcc in text
    assert "-lcuda" not in text and "libcuda" not in text


def test_a_failed_nvshmem_build_keeps_the_link_folder_its_command_names(tmp_path):
    tc = _ready("nvshmem")
    cu = tmp_path / "broken.cu"
    cu.write_text("#include <nvshmem.h>\nint main() {\n  return undefined_name;\n}\n")
    with pytest.raises(BuildError) as exc:
        build.compile_program(cu, "nvshmem", tmp_path / "out", tc)
    text = str(exc.value)
    assert "broken.cu: the nvshmem build failed" in text and "broken.cu(3): error" in text
    # the link folder the command names is kept, so the command runs again as printed
    link = build.link_dir_for(tmp_path / "out" / "broken")
    if build._nvshmem_link_folder(tc.nvshmem_lib, link) == tc.nvshmem_lib:
        pytest.skip(f"NVSHMEM in {tc.nvshmem_lib} has its plain names: the command needs no link folder")
    assert f"-L{link / 'nvl'}" in text and (link / "nvl" / "libnvshmem_host.so").exists()


def test_a_link_error_names_the_symbol(tmp_path):
    tc = _ready("nccl")
    cu = tmp_path / "unlinked.cu"
    cu.write_text('extern "C" void cw_defined_nowhere();\nint main() { cw_defined_nowhere(); return 0; }\n')
    with pytest.raises(BuildError, match="undefined reference to `cw_defined_nowhere'"):
        build.compile_program(cu, "nccl", tmp_path / "out", tc)


def test_a_build_past_its_timeout_is_stopped(tmp_path):
    tc = _ready("nvshmem")
    cu = tmp_path / "slow.cu"
    cu.write_text(NVSHMEM_PROGRAM)
    t0 = time.monotonic()
    with pytest.raises(BuildError, match=r"did not finish in 0\.5 s"):
        build.compile_program(cu, "nvshmem", tmp_path / "out", tc, timeout=0.5)
    assert time.monotonic() - t0 < 30


def test_a_missing_source_is_a_clear_error(tmp_path):
    with pytest.raises(BuildError, match="no such file"):
        build.compile_program(tmp_path / "nope.cu", "nccl", tmp_path / "out")


# ----------------------------------------------------------------------------- every protocol's program


def _applicable_cases() -> list[tuple[str, int, str]]:
    """(protocol, world, backend) for every protocol at every world it declares (of WORLDS) and every
    backend that can generate it; the others are not cases here (tests/test_codegen.py checks that
    generating them names the op and the backend that can)."""
    from clockworks_dist.codegen import program
    from clockworks_dist.dsl import load_file

    cases = []
    for path in PROTOCOLS:
        for world in WORLDS:
            scheds = [defn.trace(world) for defn in load_file(str(path)) if not defn.ranks or world in defn.ranks]
            for backend in build.BACKENDS:
                if scheds and not any(program.unsupported(sched, backend) for sched in scheds):
                    cases.append((path.stem, world, backend))
    return cases


CASES = _applicable_cases()


def _selected_cases(request) -> list[tuple[str, int, str]]:
    """The cases this session runs (all of them, or those -k / node ids picked)."""
    picked = [item.callspec.params["case"] for item in request.session.items
              if getattr(item, "originalname", "") == "test_generated_program_compiles"
              and hasattr(item, "callspec")]
    return picked or CASES


def _prepare(case: tuple[str, int, str], program, out: Path):
    """(status, detail): ("build", [.cu files]), or ("error", why) when none of the file's schedules
    was generated (every case is one its backend applies to: `_applicable_cases`)."""
    from clockworks_dist.dsl import load_file

    stem, world, backend = case
    defs = load_file(str(ROOT / "protocols" / f"{stem}.py"))
    sources, reasons = [], []
    for defn in defs:
        if defn.ranks and world not in defn.ranks:
            reasons.append(f"{defn.name} does not declare {world} ranks")
            continue
        sched = defn.trace(world)
        text = program.generate(sched, backend)
        cu = out / f"{stem}_{defn.name}_{world}_{backend}.cu"
        cu.write_text(text)
        sources.append(cu)
    if not sources:
        return "error", "; ".join(reasons) or "no schedule in the file"
    return "build", sources


@pytest.fixture(scope="module")
def generated_builds(request, tmp_path_factory):
    """Generate and build every selected case, 2 compiles at a time; {case: (status, detail, seconds)}."""
    from clockworks_dist.codegen import program

    toolchain = build.find_toolchain()
    root = tmp_path_factory.mktemp("generated")
    results: dict = {}
    jobs = []
    for case in _selected_cases(request):
        stem, world, backend = case
        lacking = toolchain.missing_for(backend)
        if lacking:
            results[case] = ("skip", f"cannot build {backend} programs here: "
                                     + "; ".join(str(m) for m in lacking), 0.0)
            continue
        out = root / f"{stem}_{world}_{backend}"
        out.mkdir()
        try:
            status, detail = _prepare(case, program, out)
        except Exception as exc:   # noqa: BLE001 (reported by the case's own test)
            results[case] = ("error", f"generating failed: {type(exc).__name__}: {exc}", 0.0)
            continue
        if status == "skip":
            results[case] = ("skip", detail, 0.0)
        else:
            jobs += [(case, cu, out) for cu in detail]

    def one(job):
        case, cu, out = job
        t0 = time.monotonic()
        try:
            build.compile_program(cu, case[2], out, toolchain)
            return job, None, time.monotonic() - t0
        except BuildError as exc:
            return job, str(exc), time.monotonic() - t0

    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for (case, cu, _), error, seconds in pool.map(one, jobs):
            status, detail, spent = results.get(case, ("ok", "", 0.0))
            if error is not None:
                status, detail = "error", (detail + "\n" if detail else "") + error
            results[case] = (status, detail, spent + seconds)
    results["_wall_seconds"] = time.monotonic() - t0
    return results


@pytest.mark.parametrize("case", CASES, ids=[f"{s}-{w}-{b}" for s, w, b in CASES])
def test_generated_program_compiles(case, generated_builds):
    status, detail, _ = generated_builds[case]
    if status == "skip":
        pytest.skip(detail)
    assert status == "ok", detail
