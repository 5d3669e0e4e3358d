"""An emitted library and the module's shim as one shared object, built with nvcc and cached.

    info = read_library("results/h200x2/tune_all/dispatch")
    so = shared_object(info)            # builds once, then found in the cache by its content hash

The command is `codegen.build`'s NVSHMEM line (the same toolchain finder, relocatable device code,
NVSHMEM's unversioned link names) with what a shared object adds: `-shared -Xcompiler -fPIC`, the
shim beside the library, and `-Bsymbolic`, so the object's calls into NVSHMEM's device library
(its init, which fills in this object's device state) bind inside the object even when another
library in the process (PyTorch's own NVSHMEM extension) exports the same names. nvcc links the
device code (NVSHMEM's libnvshmem_device.a included) into the object itself. No MPI: NVSHMEM starts
from a unique id the caller carries.

The cache key hashes the library's .h and .cu, the shim, nvcc's version, the GPU architecture and
the NVSHMEM it links; a build goes to a private folder and is moved into place, under a lock, so
the ranks of one node started together build it once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import os
import shutil
import tempfile
import time
from pathlib import Path

from .. import hygiene
from ..codegen import build
from .describe import LibraryInfo, TorchLibraryError

SHIM = Path(__file__).with_name("shim.cu")
CACHE_ENV = "CLOCKWORKS_CACHE"
BUILD_TIMEOUT_S = 900.0
LOCK_TIMEOUT_S = 1200.0


def missing(toolchain: build.Toolchain) -> list[build.Missing]:
    """What building the shared object lacks: nvcc, CUDA's headers, NVSHMEM (MPI is not needed)."""
    return [m for m in toolchain.missing_for("nvshmem") if not m.what.startswith("MPI")]


def cache_root() -> Path:
    """`$CLOCKWORKS_CACHE/torch`, else `$XDG_CACHE_HOME/clockworks-dist/torch`, else ~/.cache/..."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]) / "torch"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "clockworks-dist" / "torch"


def shared_object_command(info: LibraryInfo, toolchain: build.Toolchain, folder: Path, out_path: Path,
                          link_dir: Path) -> list[str]:
    """nvcc's line that builds `folder/<name>.cu` and `folder/shim.cu` (copies) into `out_path`."""
    lacking = missing(toolchain)
    if lacking:
        raise build.ToolchainMissing("nvshmem", lacking)
    no_mpi = dataclasses.replace(toolchain, mpi_compile=(), mpi_link=())
    source = folder / f"{info.name}.cu"
    cmd = build.compile_command(source, "nvshmem", no_mpi, out_path, link_dir)
    at = cmd.index("-rdc=true") + 1
    cmd[at:at] = ["-shared", "-Xcompiler", "-fPIC"]
    at = cmd.index(str(source)) + 1
    cmd[at:at] = [str(folder / SHIM.name)]
    return cmd + ["-Xlinker", "-Bsymbolic"]


def cache_key(info: LibraryInfo, toolchain: build.Toolchain) -> str:
    """The first 16 hex digits of a sha256 over what the object is built from."""
    h = hashlib.sha256()
    for part in (info.header.read_bytes(), info.source.read_bytes(), _shim_text().encode(),
                 str(toolchain.nvcc_version).encode(), toolchain.arch.encode(),
                 str(toolchain.nvshmem_version).encode(), str(toolchain.nvshmem_lib).encode(),
                 str(toolchain.nvshmem_include).encode()):
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()[:16]


def shared_object(info: LibraryInfo, toolchain: build.Toolchain | None = None, cache: Path | None = None,
                  timeout: float = BUILD_TIMEOUT_S) -> Path:
    """The shared object of `info` and the shim, built now or found in the cache; its path.

    Raises `ToolchainMissing` (each fix) when nvcc or NVSHMEM is missing, `BuildError` with nvcc's
    first error lines and the command when the build fails or runs past `timeout` seconds."""
    toolchain = toolchain or build.find_toolchain("nvshmem")
    lacking = missing(toolchain)
    if lacking:
        raise build.ToolchainMissing("nvshmem", lacking)
    _shim_text()
    cache = Path(cache) if cache is not None else cache_root()
    folder = cache / f"{info.name}-{cache_key(info, toolchain)}"
    target = folder / f"{info.name}_torch.so"
    if target.is_file():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    with _locked(folder / ".lock", LOCK_TIMEOUT_S):
        if target.is_file():      # another rank built it while this one waited
            return target
        built = _build(info, toolchain, timeout)
        try:
            shutil.move(str(built), str(target.with_suffix(".so.part")))
            os.replace(target.with_suffix(".so.part"), target)
        finally:
            shutil.rmtree(built.parent, ignore_errors=True)
    return target


def _shim_text() -> str:
    if not SHIM.is_file():
        raise TorchLibraryError(f"{SHIM} is missing from the installed package: reinstall clockworks-dist "
                                "(pip install -e . from a checkout ships it)")
    return SHIM.read_text(encoding="utf-8")


def _safe_tmp() -> str:
    for base in (tempfile.gettempdir(), "/tmp", "/var/tmp"):
        if hygiene.shell_safe(base) and os.path.isdir(base) and os.access(base, os.W_OK | os.X_OK):
            return base
    raise TorchLibraryError("no temporary folder with a plain path to build in: set TMPDIR to a folder of "
                            "letters, digits and ._-/+ only")


def _build(info: LibraryInfo, toolchain: build.Toolchain, timeout: float) -> Path:
    """Build in a private folder of a shell-safe name (nvcc passes its arguments through a shell);
    the object's path there."""
    work = Path(tempfile.mkdtemp(prefix="cw_torch_", dir=_safe_tmp()))
    for path in (info.header, info.source):
        shutil.copyfile(path, work / path.name)
    shutil.copyfile(SHIM, work / SHIM.name)
    out = work / f"{info.name}_torch.so"
    link = work / "link"
    build.prepare_link_dir("nvshmem", toolchain, link)
    cmd = shared_object_command(info, toolchain, work, out, link)
    build._shell_safe_command(cmd)
    rc, output = build._run_with_deadline(cmd, timeout)
    if rc is None or rc != 0 or not out.is_file():
        shutil.rmtree(work, ignore_errors=True)
        what = f"did not finish in {timeout:g} s (stopped)" if rc is None else f"failed (nvcc exit {rc})"
        raise build.BuildError(f"{info.name}: the shared object for PyTorch {what}:\n"
                               f"{build._first_errors(output or '')}\ncommand: {' '.join(cmd)}")
    return out


@contextlib.contextmanager
def _locked(path: Path, timeout: float):
    """An exclusive lock on `path` (flock), waited for at most `timeout` seconds."""
    with open(path, "a+") as handle:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TorchLibraryError(f"{path}: another process has held the build lock for {timeout:g} s "
                                            "(a build still running, or a stuck one: remove the folder and retry)")
                time.sleep(0.5)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


__all__ = ["CACHE_ENV", "SHIM", "cache_key", "cache_root", "missing", "shared_object", "shared_object_command"]
