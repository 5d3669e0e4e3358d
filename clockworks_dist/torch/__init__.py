"""An emitted library (`clockworks tune --emit DIR`) called from PyTorch: build, load, run on tensors.

    import clockworks_dist.torch as cwt
    lib = cwt.load("results/h200x2/tune_all/dispatch")   # nvcc: the library + a shim, one shared object
    lib.init()                                           # after torch.distributed.init_process_group
    lib.all_reduce(t)                                    # in place, on the current stream; CUDA graphs too

- `describe`: what the emitted files declare (the header is the contract), checked names only;
- `sharedlib`: the shared object (relocatable device code, NVSHMEM's device library linked in),
  cached by content hash;
- `shim.cu`: NVSHMEM from a unique id, and one native call per collective;
- `module`: the ctypes binding and the torch side (imported lazily: torch is not a dependency).
"""

from __future__ import annotations

from .describe import Buffer, LibraryInfo, TorchLibraryError, read_library
from .sharedlib import shared_object


def load(library_dir, cache=None, toolchain=None):
    """The library emitted into `library_dir`, built into a shared object (or found in the cache) and
    loaded into this process (needs torch); call `.init()` next on every rank."""
    from .module import load as _load

    return _load(library_dir, cache=cache, toolchain=toolchain)


__all__ = ["Buffer", "LibraryInfo", "TorchLibraryError", "load", "read_library", "shared_object"]
