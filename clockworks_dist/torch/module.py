"""The library in a PyTorch process: load, initialise beside torch.distributed, run on tensors.

    lib = load("results/h200x2/tune_all/dispatch")   # builds the shared object once (cached)
    lib.init()                                       # after init_process_group: NVSHMEM, the library
    lib.all_reduce(t)                                # in place, on the current stream, like dist.all_reduce
    x, out = lib.input_tensor(t.nbytes), lib.output_tensor(t.nbytes)
    lib.all_reduce(x, out=out)                       # zero-copy: the library's own symmetric buffers
    lib.close()

Each call is one native call (the shim's `cwt_all_reduce`): the library runs on a stream of its own
(`lib.stream`), joined to the caller's current stream by two events, so to the caller it is ordered
on its current stream, and inside a `torch.cuda.graph` capture the library's stream is forked into
the capture and joined back (the library asks that every call, captured or not, be on one stream).
Run on `lib.stream` itself (`with torch.cuda.stream(lib.stream)`) and the events are skipped.

torch is imported here, when a `Library` is made: it is not a dependency of clockworks-dist.
"""

from __future__ import annotations

import ctypes
import os
import re
import time
from datetime import timedelta
from pathlib import Path

from ..errors import MissingDependency
from .describe import DTYPES, Buffer, LibraryInfo, TorchLibraryError, read_library, size_text
from .sharedlib import shared_object

TORCH_HINT = "pip install torch (a CUDA build), and start the ranks with torchrun"
STORE_PREFIX = "clockworks_dist.torch"
INIT_TIMEOUT = timedelta(seconds=300)
_generation = {}   # per library name: how many inits this process has made (the store keys' suffix)


def _torch():
    try:
        import torch
        import torch.distributed  # noqa: F401
    except ImportError as exc:
        raise MissingDependency(f"clockworks_dist.torch needs PyTorch, which is not importable ({exc}): "
                                f"{TORCH_HINT}") from None
    return torch


class _CudaArray:
    """Device memory the library owns, seen by torch through __cuda_array_interface__ (no copy)."""

    def __init__(self, ptr: int, count: int, typestr: str):
        self.__cuda_array_interface__ = {"shape": (count,), "typestr": typestr, "data": (ptr, False),
                                         "version": 2, "strides": None}


def load(library_dir, cache=None, toolchain=None) -> Library:
    """The library emitted into `library_dir`, built with the shim into a shared object (or found in
    the cache) and loaded; call `init()` next, on every rank."""
    info = read_library(library_dir)
    return Library(info, shared_object(info, toolchain=toolchain, cache=cache))


class Library:
    """An emitted library loaded into this process (`load`); `init()` starts it on every rank."""

    def __init__(self, info: LibraryInfo, so_path: Path):
        self.torch = _torch()
        self.info, self.path = info, Path(so_path)
        try:
            self._so = ctypes.CDLL(str(self.path))
        except OSError as exc:
            raise TorchLibraryError(f"{self.path}: cannot load the shared object ({exc}); if "
                                    "libnvshmem_host.so.3 is not found, install the NVSHMEM wheel it was built "
                                    "with (nvidia-nvshmem-cu13) or remove the cache folder to build again") from None
        self._bind()
        self.group = self.rank = self.stream = None
        self.device = None
        self._ready = False
        self._views: dict[tuple[str, int], object] = {}

    def _bind(self) -> None:
        c = ctypes
        so, info = self._so, self.info
        self._api = {}
        for entry, args in (("init", []), ("buffer", [c.c_int, c.POINTER(c.c_void_p), c.POINTER(c.c_size_t)]),
                            ("count", [c.c_size_t, c.c_int, c.POINTER(c.c_size_t)]),
                            ("run", [c.c_size_t, c.c_void_p]), ("finalize", []), ("last_error", [])):
            fn = getattr(so, info.symbol(entry))
            fn.argtypes = args
            fn.restype = c.c_char_p if entry == "last_error" else c.c_int
            self._api[entry] = fn
        self._run_address = c.cast(self._api["run"], c.c_void_p).value
        for name, args, res in (("cwt_last_error", [], c.c_char_p), ("cwt_uniqueid_bytes", [], c.c_int),
                                ("cwt_nvshmem_version", [], c.c_int), ("cwt_init_status", [], c.c_int),
                                ("cwt_initialised_status", [], c.c_int),
                                ("cwt_get_uniqueid", [c.c_void_p, c.c_size_t], c.c_int),
                                ("cwt_init", [c.c_int, c.c_int, c.c_char_p, c.c_size_t, c.c_ulonglong, c.c_int],
                                 c.c_int),
                                ("cwt_my_pe", [], c.c_int), ("cwt_n_pes", [], c.c_int), ("cwt_finalize", [], c.c_int),
                                ("cwt_all_reduce", [c.c_void_p, c.c_size_t, c.c_void_p, c.c_void_p, c.c_void_p,
                                                    c.c_void_p, c.c_size_t, c.c_void_p, c.c_void_p, c.c_size_t],
                                 c.c_int)):
            fn = getattr(so, name)
            fn.argtypes, fn.restype = args, res
        self._all_reduce_native = so.cwt_all_reduce

    # ------------------------------------------------------------------ start and stop

    def init(self, group=None, timeout: timedelta = INIT_TIMEOUT) -> Library:
        """Start NVSHMEM on this rank's GPU and the library (every rank of `group`, like a collective).

        The GPU is `LOCAL_RANK`'s (torchrun sets it), else the current one. Rank 0 of `group` (default:
        the world) makes NVSHMEM's unique id and hands it to the others through torch.distributed's
        store; every rank then waits, at most `timeout`, for all to arrive before NVSHMEM starts, so a
        missing rank is an error naming it, not a hang. NVSHMEM's heap is the library's
        `HEAP_BYTES` unless NVSHMEM_SYMMETRIC_SIZE says more; NVLink multicast is left off
        (NVSHMEM_DISABLE_NVLS=1) unless the environment says otherwise."""
        torch = self.torch
        dist = torch.distributed
        if self._ready:
            raise TorchLibraryError(f"{self.info.name}: init() was called twice (close() first)")
        if not dist.is_available() or not dist.is_initialized():
            raise TorchLibraryError(f"{self.info.name}: torch.distributed is not initialised: call "
                                    "torch.distributed.init_process_group() first (start the ranks with torchrun "
                                    f"--nproc_per_node={self.info.world})")
        if not torch.cuda.is_available():
            raise TorchLibraryError(f"{self.info.name}: torch sees no CUDA GPU (torch.cuda.is_available() is False); "
                                    "the library runs on NVIDIA GPUs")
        group = group if group is not None else dist.group.WORLD
        world, rank = dist.get_world_size(group), dist.get_rank(group)
        if world != self.info.world:
            raise TorchLibraryError(f"{self.info.name} was made for {self.info.world} PEs, but the process group has "
                                    f"{world} ranks: start {self.info.world} ranks (torchrun --nproc_per_node="
                                    f"{self.info.world}) or pass init(group=...) a group of {self.info.world}")
        self._check_heap()
        os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")
        local = os.environ.get("LOCAL_RANK")
        if local is not None:
            if not local.isdigit() or int(local) >= torch.cuda.device_count():
                raise TorchLibraryError(f"LOCAL_RANK={local!r}, but this process sees {torch.cuda.device_count()} "
                                        "GPU(s): one GPU per rank (check CUDA_VISIBLE_DEVICES and --nproc_per_node)")
            torch.cuda.set_device(int(local))
        self.device = torch.cuda.current_device()
        uid = self._exchange_uniqueid(dist, group, rank, world, timeout)
        status = self._so.cwt_init(rank, world, uid, len(uid), self.info.heap_bytes, self.device)
        if status != 0:
            raise TorchLibraryError(f"rank {rank}: NVSHMEM did not start: {self._shim_error()}")
        if (self._so.cwt_my_pe(), self._so.cwt_n_pes()) != (rank, world):
            raise TorchLibraryError(f"rank {rank}: NVSHMEM made this process PE {self._so.cwt_my_pe()} of "
                                    f"{self._so.cwt_n_pes()}, not {rank} of {world}")
        self._check(self._api["init"](), "init")
        self.group, self.rank = group, rank
        self.stream = torch.cuda.Stream(device=self.device)
        self._ready = True
        return self

    def _check_heap(self) -> None:
        given = os.environ.get("NVSHMEM_SYMMETRIC_SIZE")
        if given is None:
            return
        m = re.fullmatch(r"\s*(\d+)\s*([kKmMgGtT]?)[bB]?\s*", given)
        if m is None:
            raise TorchLibraryError(f"NVSHMEM_SYMMETRIC_SIZE={given!r} is not a size (bytes, or with K, M, G); "
                                    f"{self.info.name} needs at least {self.info.heap_bytes}")
        scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[m.group(2).lower()]
        if int(m.group(1)) * scale < self.info.heap_bytes:
            raise TorchLibraryError(f"NVSHMEM_SYMMETRIC_SIZE={given} is smaller than the {self.info.heap_bytes} bytes "
                                    f"{self.info.name} needs ({self.info.name.upper()}_HEAP_BYTES): unset it or "
                                    "set it at least that large")

    def _exchange_uniqueid(self, dist, group, rank: int, world: int, timeout: timedelta) -> bytes:
        """Rank 0's NVSHMEM unique id on every rank, through the default store; then every rank waits
        for all `world` to have it (NVSHMEM's start waits for every PE, with no timeout of its own)."""
        store = dist.distributed_c10d._get_default_store()
        ranks = dist.get_process_group_ranks(group)
        n = _generation.get(self.info.name, 0)
        _generation[self.info.name] = n + 1
        key = f"{STORE_PREFIX}/{self.info.name}/{'-'.join(map(str, ranks))}/{n}"
        size = self._so.cwt_uniqueid_bytes()
        if rank == 0:
            buf = ctypes.create_string_buffer(size)
            if self._so.cwt_get_uniqueid(buf, size) != 0:
                raise TorchLibraryError(f"rank 0: no NVSHMEM unique id: {self._shim_error()}")
            store.set(f"{key}/uid", buf.raw.hex())
        try:
            store.wait([f"{key}/uid"], timeout)
        except Exception as exc:  # noqa: BLE001 (the store's timeout type varies between torch versions)
            raise TorchLibraryError(f"rank {rank}: rank 0 gave no NVSHMEM unique id within {timeout} "
                                    f"({type(exc).__name__}): did every rank call init()?") from None
        uid = bytes.fromhex(bytes(store.get(f"{key}/uid")).decode("ascii"))
        if len(uid) != size:
            raise TorchLibraryError(f"rank {rank}: the unique id in the store has {len(uid)} bytes, not {size}: "
                                    "the ranks were built against different NVSHMEM versions")
        store.add(f"{key}/arrived", 1)
        deadline = time.monotonic() + timeout.total_seconds()
        while True:
            arrived = store.add(f"{key}/arrived", 0)
            if arrived >= world:
                break
            if time.monotonic() > deadline:
                raise TorchLibraryError(f"rank {rank}: {arrived} of {world} ranks reached init() within {timeout}: "
                                        "every rank of the group must call it")
            time.sleep(0.01)
        return uid

    def close(self) -> None:
        """Free the library and stop NVSHMEM (every rank; the GPU's work is waited for first)."""
        if not self._ready:
            return
        self._ready = False
        self._views.clear()
        self.torch.cuda.synchronize(self.device)
        self._check(self._api["finalize"](), "finalize")
        if self._so.cwt_finalize() != 0:
            raise TorchLibraryError(f"rank {self.rank}: NVSHMEM's finalize: {self._shim_error()}")

    def __enter__(self) -> Library:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ buffers

    def _require_ready(self, what: str) -> None:
        if not self._ready:
            raise TorchLibraryError(f"{self.info.name}.{what}: call init() first (after "
                                    "torch.distributed.init_process_group, on every rank)")

    def _size(self, nbytes: int) -> int:
        if nbytes not in self.info.sizes:
            raise TorchLibraryError(f"{self.info.name}: {nbytes} bytes per rank was not tuned; the library has kernels "
                                    f"for {self.info.sizes_text()} only (pad to one of them, or tune that size and "
                                    "emit again)")
        return nbytes

    def count(self, nbytes: int, buffer: str) -> int:
        """How many elements of `buffer` a call at `nbytes` reads or writes on this rank."""
        self._require_ready("count")
        b = self.info.buffer(buffer)
        n = ctypes.c_size_t()
        self._check(self._api["count"](self._size(nbytes), b.index, ctypes.byref(n)), "count")
        return n.value

    def tensor(self, buffer: str, nbytes: int):
        """The library's symmetric `buffer` as a 1-D tensor of the elements a call at `nbytes` touches
        (no copy: the library's memory, valid until close())."""
        self._require_ready("tensor")
        key = (buffer, nbytes)
        if key not in self._views:
            b = self.info.buffer(buffer)
            count = self.count(nbytes, buffer)
            ptr, cap = ctypes.c_void_p(), ctypes.c_size_t()
            self._check(self._api["buffer"](b.index, ctypes.byref(ptr), ctypes.byref(cap)), "buffer")
            view = self.torch.as_tensor(_CudaArray(ptr.value, count, DTYPES[b.dtype][1]),
                                        device=f"cuda:{self.device}")
            if b.dtype == "bfloat16":
                view = view.view(self.torch.bfloat16)
            self._views[key] = view
        return self._views[key]

    def _one(self, role: tuple[str, ...]) -> Buffer:
        found = [b for b in self.info.buffers if b.role in role]
        if len(found) != 1:
            raise TorchLibraryError(f"{self.info.name} has {len(found)} caller buffers of role {'/'.join(role)} "
                                    f"({', '.join(b.name for b in found) or 'none'}): all_reduce() binds one input "
                                    "and one output; fill them with tensor(name, nbytes) and call run(nbytes)")
        return found[0]

    def input_tensor(self, nbytes: int):
        """The library's input buffer at `nbytes` per rank: fill it, then all_reduce(it, out=...) copies nothing in."""
        return self.tensor(self._one(("input", "inout")).name, nbytes)

    def output_tensor(self, nbytes: int):
        """The library's output buffer at `nbytes` per rank (what a call wrote; valid until the next call)."""
        return self.tensor(self._one(("output", "inout")).name, nbytes)

    # ------------------------------------------------------------------ calls

    def all_reduce(self, tensor, out=None):
        """The tuned all-reduce (sum) of `tensor` over the group's ranks, into `out` (default: `tensor`,
        in place, as torch.distributed.all_reduce); returns the result tensor. Ordered on the current
        stream; capturable into a CUDA graph. `tensor` may be `input_tensor(n)` and `out`
        `output_tensor(n)`: those are not copied. Every rank calls it with the same size."""
        self._require_ready("all_reduce")
        src_buf, dst_buf = self._one(("input", "inout")), self._one(("output", "inout"))
        nbytes = self._size(self._tensor_bytes(tensor, src_buf, "tensor"))
        out = tensor if out is None else out
        if self._tensor_bytes(out, dst_buf, "out") != nbytes:
            raise TorchLibraryError(f"out has {out.numel() * out.element_size()} bytes, tensor {nbytes}: give out "
                                    "the same shape")
        lib_in, lib_out = self.tensor(src_buf.name, nbytes), self.tensor(dst_buf.name, nbytes)
        for t, view, what, buf in ((tensor, lib_in, "tensor", src_buf), (out, lib_out, "out", dst_buf)):
            if t.numel() != view.numel():
                raise TorchLibraryError(f"{what} has {t.numel()} elements, but a call at {nbytes} bytes moves "
                                        f"{view.numel()} of buffer {buf.name}")
        caller = self.torch.cuda.current_stream(self.device).cuda_stream
        status = self._all_reduce_native(self._run_address, nbytes, caller, self.stream.cuda_stream,
                                         lib_in.data_ptr(), tensor.data_ptr(), nbytes,
                                         out.data_ptr(), lib_out.data_ptr(), lib_out.numel() * lib_out.element_size())
        if status != 0:
            self._raise(status, "all_reduce")
        return out

    def run(self, nbytes: int) -> None:
        """One call at `nbytes` on the library's own buffers (tensor(name, nbytes)), no copies, ordered
        on the current stream."""
        self._require_ready("run")
        caller = self.torch.cuda.current_stream(self.device).cuda_stream
        status = self._all_reduce_native(self._run_address, self._size(nbytes), caller, self.stream.cuda_stream,
                                         None, None, 0, None, None, 0)
        if status != 0:
            self._raise(status, "run")

    def _tensor_bytes(self, t, buf: Buffer, what: str) -> int:
        torch = self.torch
        if not isinstance(t, torch.Tensor):
            raise TorchLibraryError(f"{what} is a {type(t).__name__}, not a torch.Tensor")
        want = getattr(torch, DTYPES[buf.dtype][0])
        if t.dtype != want:
            raise TorchLibraryError(f"{what} is {t.dtype}, but the library's buffer {buf.name} is {want}: "
                                    f"convert it (t.to({want}))")
        if t.device.type != "cuda" or t.device.index != self.device:
            raise TorchLibraryError(f"{what} is on {t.device}, but this rank's library runs on cuda:{self.device}: "
                                    "move it there")
        if not t.is_contiguous():
            raise TorchLibraryError(f"{what} is not contiguous: pass t.contiguous()")
        return t.numel() * t.element_size()

    # ------------------------------------------------------------------ errors

    def _check(self, status: int, entry: str) -> None:
        if status != 0:
            self._raise(status, entry)

    def _raise(self, status: int, entry: str):
        if status < 0:
            raise TorchLibraryError(f"rank {self.rank}: {self.info.name}.{entry}: {self._shim_error()}")
        text = (self._api["last_error"]() or b"").decode("utf-8", "replace")
        raise TorchLibraryError(f"rank {self.rank}: {self.info.symbol(entry)} returned {status}: {text}")

    def _shim_error(self) -> str:
        return (self._so.cwt_last_error() or b"").decode("utf-8", "replace")

    def describe(self) -> str:
        """One line: the library, its sizes, the NVSHMEM it was built against, the shared object."""
        v = self._so.cwt_nvshmem_version()
        return (f"{self.info.name}: {self.info.world} PEs, sizes {', '.join(size_text(n) for n in self.info.sizes)}; "
                f"NVSHMEM {v // 10000}.{v // 100 % 100}.{v % 100}; {self.path.name}")


__all__ = ["Library", "load"]
