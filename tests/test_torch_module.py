"""clockworks_dist.torch: the emitted library from PyTorch.

Without a GPU (CI): the committed library's header is read exactly, edited or mismatched files are
refused with what is wrong, and the shared object really builds with nvcc and NVSHMEM's wheel, is
cached by content, exports the C API and the shim, loads into this process and answers through
ctypes (the library refuses to start without NVSHMEM, with its message). torch is not a
dependency: without it, `load` says how to get it.

With torch and 2 GPUs: this file is also the worker that `torchrun` starts (`python -m
torch.distributed.run --nproc_per_node=2 tests/test_torch_module.py worker ...`): NVSHMEM started
through torch.distributed's store, every small size called in place more than 2 K times with new
inputs, sizes interleaved, the library's own buffers, CUDA graphs captured on torch's capture stream
and on the library's stream and replayed with new inputs, every output compared bit for bit; the
errors a user meets (a size not tuned, a dtype, a device, a world size).
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from clockworks_dist.codegen import build  # noqa: E402
from clockworks_dist.errors import ClockworksError, MissingDependency  # noqa: E402
from clockworks_dist.torch import TorchLibraryError, read_library, shared_object  # noqa: E402
from clockworks_dist.torch import sharedlib  # noqa: E402

COMMITTED = ROOT / "results" / "h200x2" / "tune_all" / "dispatch"
NAME = "cw_nvshmem_allreduce_family"
SMALL = (1024, 8192, 65536, 262144, 1048576)


# ------------------------------------------------------------------------------ reading the library

def test_the_committed_librarys_header_is_read_exactly():
    info = read_library(COMMITTED)
    assert info.name == NAME and info.world == 2 and info.reset_every == 32
    assert info.sizes == (1024, 8192, 65536, 262144, 1048576, 16777216, 268435456, 1073741824)
    assert info.heap_bytes == 3292528640
    assert [(b.index, b.name, b.role, b.dtype) for b in info.buffers] == [(0, "out", "output", "float32"),
                                                                          (1, "x", "input", "float32")]
    assert info.symbol("run") == f"{NAME}_run"
    with pytest.raises(TorchLibraryError, match="not an entry"):
        info.symbol("run; system")


def _copy(tmp_path: Path) -> Path:
    out = tmp_path / "lib"
    shutil.copytree(COMMITTED, out)
    return out


def test_a_folder_without_one_library_is_refused_with_the_fix(tmp_path):
    with pytest.raises(TorchLibraryError, match="no such folder"):
        read_library(tmp_path / "nowhere")
    with pytest.raises(TorchLibraryError, match=r"expected one emitted library header cw_<name>.h, found none"):
        read_library(tmp_path)
    lib = _copy(tmp_path)
    (lib / f"{NAME}.json").unlink()
    with pytest.raises(TorchLibraryError, match=rf"{NAME}.json is missing beside {NAME}.h .*--emit"):
        read_library(lib)


def test_an_edited_header_or_a_json_of_another_emit_is_refused(tmp_path):
    lib = _copy(tmp_path)
    header = lib / f"{NAME}.h"
    text = header.read_text()
    header.write_text(text.replace("/* input, float32 */", "/* input, complex64 */"))
    with pytest.raises(TorchLibraryError, match=r"buffer line .*BUF_X = 1.* is not one the module can bind"):
        read_library(lib)
    header.write_text(text.replace("1073741824ULL}", "1073741824ULL, 1024ULL}"))
    with pytest.raises(TorchLibraryError, match="is not 8 ascending sizes"):
        read_library(lib)
    header.write_text(text)
    described = json.loads((lib / f"{NAME}.json").read_text())
    described["world"] = 4
    (lib / f"{NAME}.json").write_text(json.dumps(described))
    with pytest.raises(TorchLibraryError, match=r"at 4 PEs.*declares .* at 2 PEs.*different emits"):
        read_library(lib)


def test_a_library_name_that_is_not_a_safe_identifier_never_reaches_c(tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    for suffix in (".h", ".cu", ".json"):
        (lib / f"cw__x{suffix}").write_text("")
    with pytest.raises(TorchLibraryError, match=r"'cw__x' cannot name a library's symbols"):
        read_library(lib)
    assert issubclass(TorchLibraryError, ClockworksError)


# ------------------------------------------------------------------------------ the shared object

@pytest.fixture(scope="session")
def torch_toolchain():
    """nvcc and NVSHMEM (no MPI: the shared object does not need it); skipped, saying what is missing,
    where they are not installed (CI installs them: the `cuda-build` extra)."""
    tc = build.find_toolchain("nvshmem")
    lacking = sharedlib.missing(tc)
    if lacking:
        pytest.skip("cannot build the shared object here: " + "; ".join(str(m) for m in lacking))
    return tc


@pytest.fixture(scope="session")
def built(torch_toolchain, tmp_path_factory):
    # $CLOCKWORKS_CACHE (the GPU script's, already built) when set, else a fresh folder: built here
    cache = sharedlib.cache_root() if os.environ.get(sharedlib.CACHE_ENV) else tmp_path_factory.mktemp("cache")
    info = read_library(COMMITTED)
    return info, shared_object(info, toolchain=torch_toolchain, cache=cache), cache


def test_the_command_is_a_shared_object_with_the_shim_and_no_mpi(torch_toolchain, tmp_path):
    info = read_library(COMMITTED)
    cmd = sharedlib.shared_object_command(info, torch_toolchain, tmp_path, tmp_path / "x.so", tmp_path / "link")
    for flag in ("-rdc=true", "-shared", "-fPIC", "-lnvshmem_host", "-lnvshmem_device", "-Bsymbolic"):
        assert flag in cmd, flag
    assert str(tmp_path / "shim.cu") in cmd and str(tmp_path / f"{NAME}.cu") in cmd
    mpi_paths = {a for a in torch_toolchain.mpi_compile + torch_toolchain.mpi_link if a.startswith(("-I", "-L"))}
    assert not mpi_paths & set(cmd)
    assert not [arg for arg in cmd if arg.startswith(("-lmpi", "-l:libmpi"))]


def test_the_shared_object_builds_exports_the_api_and_is_cached(built, torch_toolchain):
    info, so, cache = built
    assert so.is_file() and so.parent.parent == cache
    stamp = so.stat().st_mtime_ns
    assert shared_object(info, toolchain=torch_toolchain, cache=cache) == so   # found, not built again
    assert so.stat().st_mtime_ns == stamp
    nm = shutil.which("nm")
    if nm:
        exported = subprocess.run([nm, "-D", "--defined-only", str(so)], capture_output=True, text=True).stdout
        for entry in ("init", "buffer", "count", "run", "finalize", "last_error"):
            assert f" T {NAME}_{entry}\n" in exported, entry
        for entry in ("cwt_init", "cwt_get_uniqueid", "cwt_all_reduce", "cwt_finalize"):
            assert f" T {entry}\n" in exported, entry


def test_the_cache_key_follows_the_librarys_text(built, torch_toolchain, tmp_path):
    info, _so, _cache = built
    lib = _copy(tmp_path)
    assert sharedlib.cache_key(read_library(lib), torch_toolchain) == sharedlib.cache_key(info, torch_toolchain)
    with open(lib / f"{NAME}.cu", "a") as f:
        f.write("// edited\n")
    assert sharedlib.cache_key(read_library(lib), torch_toolchain) != sharedlib.cache_key(info, torch_toolchain)


def test_the_shared_object_loads_and_refuses_to_start_without_nvshmem(built, torch_toolchain):
    """No GPU needed: nothing here starts CUDA; the library's own checks answer through ctypes."""
    info, so, _cache = built
    lib = ctypes.CDLL(str(so))
    lib.cwt_uniqueid_bytes.restype = ctypes.c_int
    assert lib.cwt_uniqueid_bytes() == 128
    version = lib.cwt_nvshmem_version()
    assert f"{version // 10000}.{version // 100 % 100}.{version % 100}" == torch_toolchain.nvshmem_version
    assert lib.cwt_init_status() < lib.cwt_initialised_status()
    init = getattr(lib, f"{NAME}_init")
    last_error = getattr(lib, f"{NAME}_last_error")
    last_error.restype = ctypes.c_char_p
    assert init() == 2   # ERR_NVSHMEM
    assert b"NVSHMEM is not initialised: initialise it first" in last_error()
    run = getattr(lib, f"{NAME}_run")
    run.argtypes = [ctypes.c_size_t, ctypes.c_void_p]
    assert run(1024, None) == 4   # ERR_STATE: before init
    lib.cwt_all_reduce.restype = ctypes.c_int
    lib.cwt_last_error.restype = ctypes.c_char_p
    assert lib.cwt_all_reduce(*([None] * 10)) == -1
    assert b"not initialised (cwt_init first)" in lib.cwt_last_error()


def test_without_torch_load_names_the_install(built):
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("torch is installed here: the message for its absence cannot show")
    from clockworks_dist.torch import module

    info, so, _cache = built
    with pytest.raises(MissingDependency, match=r"needs PyTorch.*pip install torch"):
        module.Library(info, so)


# ------------------------------------------------------------------------------ on GPUs, under torchrun

def _gpus() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _torchrun(nproc: int, mode: str, cache: Path, timeout: float = 240) -> tuple[int, list[dict], str]:
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", NVSHMEM_DISABLE_NVLS="1", TORCH_SYMM_MEM_DISABLE_MULTICAST="1",
               PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           str(Path(__file__).resolve()), "worker", mode, str(COMMITTED), str(cache)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                              start_new_session=True)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"torchrun did not finish in {timeout} s: {str(exc.stdout)[-2000:]} {str(exc.stderr)[-2000:]}")
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith('{"rank"')]
    return done.returncode, lines, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.fixture(scope="session")
def gpu_cache(built):
    if _gpus() < 2:
        pytest.skip("needs torch with 2 CUDA GPUs (the library was made for 2 PEs)")
    return built[2]


def test_on_two_gpus_every_way_of_calling_is_bit_exact(gpu_cache):
    rc, lines, tail = _torchrun(2, "calls", gpu_cache)
    assert rc == 0 and len(lines) == 2, tail
    for line in lines:
        assert line["mismatches"] == {}, line
        assert line["checked"] > 1_000_000, line
        assert set(line["ways"]) == {"in place", "interleaved", "library buffers", "out of place", "graph",
                                     "graph on lib.stream", "after the graphs"}, line
        errors = line["errors"]
        assert "100 bytes per rank was not tuned; the library has kernels for 1024 (1 KiB), 8192 (8 KiB)" in \
            errors["size"]
        assert "is torch.float64, but the library's buffer x is torch.float32" in errors["dtype"]
        assert "is on cpu, but this rank's library runs on cuda:" in errors["device"]
        assert "init() was called twice" in errors["twice"]


@pytest.fixture(scope="session")
def one_gpu_cache(built):
    if _gpus() < 1:
        pytest.skip("needs torch with a CUDA GPU")
    return built[2]


def test_a_world_of_one_is_refused_naming_the_two_the_library_needs(one_gpu_cache):
    rc, lines, tail = _torchrun(1, "world", one_gpu_cache, timeout=180)
    assert rc == 0 and len(lines) == 1, tail
    assert ("was made for 2 PEs, but the process group has 1 ranks: start 2 ranks (torchrun --nproc_per_node=2)"
            in lines[0]["error"])
    # NVSHMEM itself started from inside the shared object in a torch process (one PE), and the
    # library's own check reads it: the kernels' device state is the object's
    assert "NVSHMEM has 1 PEs; these kernels were made for 2" in lines[0]["library"], lines[0]


# ------------------------------------------------------------------------------ the worker (torchrun)

def _worker(mode: str, library: str, cache: str) -> int:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    import clockworks_dist.torch as cwt

    local = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    rank, world = dist.get_rank(), dist.get_world_size()
    lib = cwt.load(library, cache=cache)
    if mode == "world":
        try:
            lib.init()
            error = "init() accepted the wrong world"
        except TorchLibraryError as exc:
            error = str(exc)
        # past the module's check: NVSHMEM at one PE, then the library's own init
        uid = lib._exchange_uniqueid(dist, dist.group.WORLD, rank, world, timedelta(seconds=60))
        failed = lib._so.cwt_init(rank, world, uid, len(uid), lib.info.heap_bytes, local)
        said = lib._shim_error() if failed else ""
        if not failed:
            status = lib._api["init"]()
            said = f"status {status}: " + (lib._api["last_error"]() or b"").decode()
            lib._so.cwt_finalize()
        print(json.dumps({"rank": rank, "error": error, "library": said}), flush=True)
        dist.destroy_process_group()
        return 0
    lib.init()
    checked, bad, ways = 0, {}, set()

    def values(n: int, r: int, key: int) -> torch.Tensor:
        i = torch.arange(n, device=device, dtype=torch.int64)
        return ((i * 3 + r * 11 + key * 7) % 4 + 1).to(torch.float32)

    def want(n: int, key: int) -> torch.Tensor:
        return sum(values(n, r, key) for r in range(world))

    def check(way: str, got, key: int) -> None:
        nonlocal checked
        ways.add(way)
        diff = int((got.view(torch.int32) != want(got.numel(), key).view(torch.int32)).sum().item())
        checked += got.numel()
        if diff:
            bad[way] = bad.get(way, 0) + diff

    errors = {}
    for what, call in (("size", lambda: lib.all_reduce(torch.zeros(25, device=device))),
                       ("dtype", lambda: lib.all_reduce(torch.zeros(128, device=device, dtype=torch.float64))),
                       ("device", lambda: lib.all_reduce(torch.zeros(256))),
                       ("twice", lambda: lib.init())):
        try:
            call()
            errors[what] = "no error"
        except TorchLibraryError as exc:
            errors[what] = str(exc)
    key = 0
    K = lib.info.reset_every
    for nbytes in SMALL:                     # in place, more than 2 K calls: resets crossed
        t = torch.empty(nbytes // 4, device=device)
        for _ in range(2 * K + 3):
            key += 1
            t.copy_(values(t.numel(), rank, key))
            lib.all_reduce(t)
            check("in place", t, key)
    for _ in range(2):                       # the size changes at every call: a reset before each
        for nbytes in SMALL:
            key += 1
            t = values(nbytes // 4, rank, key)
            check("interleaved", lib.all_reduce(t), key)
    for nbytes in (8192, 16777216):          # the library's buffers; and out of place into a tensor
        x, out = lib.input_tensor(nbytes), lib.output_tensor(nbytes)
        for _ in range(K + 1):
            key += 1
            x.copy_(values(x.numel(), rank, key))
            check("library buffers", lib.all_reduce(x, out=out), key)
            key += 1
            src, dst = values(x.numel(), rank, key), torch.empty_like(x)
            lib.all_reduce(src, out=dst)
            check("out of place", dst, key)
    for way, stream in (("graph", None), ("graph on lib.stream", lib.stream)):
        for nbytes in (1024, 65536, 1048576):
            n = nbytes // 4
            src, res = torch.empty(n, device=device), torch.empty(n, device=device)
            x, out = lib.input_tensor(nbytes), lib.output_tensor(nbytes)
            g = torch.cuda.CUDAGraph()
            src.copy_(values(n, rank, 0))
            torch.cuda.synchronize()
            with torch.cuda.graph(g, stream=stream):
                for _ in range(3):           # 3 calls a replay: new inputs before each one
                    x.copy_(src)
                    lib.all_reduce(x, out=out)
                    res.copy_(out)
                    src.add_(1)
            for _ in range(2 * K + 3):
                key += 1
                src.copy_(values(n, rank, key))
                g.replay()
                torch.cuda.synchronize()
                check(way, res - 2 * world, key)   # the third call's inputs were src + 2 on every rank
            del g
    for nbytes in SMALL:                     # eager again after the graphs (each begins with a reset)
        key += 1
        t = values(nbytes // 4, rank, key)
        check("after the graphs", lib.all_reduce(t), key)
    torch.cuda.synchronize()
    print(json.dumps({"rank": rank, "checked": checked, "mismatches": bad, "ways": sorted(ways),
                      "errors": errors}), flush=True)
    lib.close()
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "worker":
    sys.exit(_worker(sys.argv[2], sys.argv[3], sys.argv[4]))
