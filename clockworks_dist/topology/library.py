"""What the libraries cost, apart from the machine: the constants fitted once across machines.

A topology file holds two kinds of numbers. Its devices and links are the machine: GPUs, NVLink and
PCIe rates, switches, NICs (a datasheet, or `topology detect` on the node). Its `constants` are
what NCCL, NVSHMEM and CUDA launches cost on top of the hardware: base and per-step latencies, the
rate of a channel, the share of a link each protocol reaches, the work on a ring rank's own chunk.
Those depend on the library version and the GPU generation, not on which box the GPUs sit in, so
`clockworks calibrate --across` fits them once over every measured machine, and they ship here
(data/library/nccl.yaml), with the machines they were fitted on and the error to expect on a
machine the fit never saw (leave one machine out: scripts/bench_transfer.py).

A file `clockworks calibrate` did not write (a datasheet file, a detected one, a user's own) takes
these constants under its own: any constant it sets itself wins. A calibrated file keeps exactly
its own constants.
"""

from __future__ import annotations

import functools
from pathlib import Path

import yaml

LIBRARY_FILE = Path(__file__).resolve().parent / "data" / "library" / "nccl.yaml"
CALIBRATED_BY = "clockworks calibrate"  # how the provenance method of a calibrated file begins
# ... and of a file whose constants were fitted on other machines (`calibrate --across`): its own
# constants are complete, but the machine itself was never measured.
ACROSS_BY = "clockworks calibrate --across"


@functools.lru_cache(maxsize=1)
def library() -> dict:
    """The shipped library file as a dict ({} when it is missing: the model's own defaults apply)."""
    try:
        data = yaml.safe_load(LIBRARY_FILE.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    return data if isinstance(data, dict) else {}


def constants() -> dict:
    """The library's constants (a fresh copy: callers may change it)."""
    return _copy(library().get("constants") or {})


def is_calibrated_document(data: dict) -> bool:
    """Whether a topology file's contents say `clockworks calibrate` wrote them."""
    provenance = data.get("provenance")
    method = provenance.get("method") if isinstance(provenance, dict) else None
    return isinstance(method, str) and method.startswith(CALIBRATED_BY)


def with_library(data: dict) -> dict:
    """A topology file's contents with the library's constants under its own (the module docstring):
    unchanged when calibrate wrote it, when the library is missing, or when `constants` is not a
    mapping (validation reports that)."""
    own = data.get("constants")
    if is_calibrated_document(data) or not library() or (own is not None and not isinstance(own, dict)):
        return data
    return dict(data, constants=_merge(constants(), own or {}))


def expected_error() -> dict:
    """The leave-one-machine-out error the library file states ({} if none)."""
    return dict(library().get("expected_error") or {})


def fitted_gpus() -> set[str]:
    """The GPU names (as NVML gives them: `NVIDIA H200`) of the machines the constants were fitted on."""
    return {m.get("gpu") for m in library().get("fitted_on") or [] if isinstance(m, dict) and m.get("gpu")}


def same_gpu(nvml_name: str, model: str) -> bool:
    """Whether a GPU as NVML names it (`NVIDIA H200`) is a topology's GPU model (`H200-141GB`, `H200`):
    the product name's first word."""
    product = nvml_name.replace("NVIDIA", "").split()
    return bool(product) and model.upper().startswith(product[0].upper())


def _merge(base: dict, own: dict) -> dict:
    out = dict(base)
    for key, value in own.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _copy(value):
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    return list(map(_copy, value)) if isinstance(value, list) else value
