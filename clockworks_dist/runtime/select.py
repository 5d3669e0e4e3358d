"""Which executor runs a schedule: a backend by name, whether its table has every op of the
schedule, and the GPUs it needs (`clockworks run` and `clockworks validate --backend cupy`)."""

from __future__ import annotations

import os

from .. import ir
from ..errors import ClockworksError

BACKENDS = ("mpi-cpu", "cupy")


class BackendError(ClockworksError):
    """An unknown backend, or an op the backend cannot run."""


def backend(name: str):
    if name not in BACKENDS:
        raise BackendError(f"unknown backend {name!r}; clockworks run knows {', '.join(BACKENDS)}")
    if name == "cupy":
        from .cupy_nccl import CUPY

        return CUPY
    from .mpi_cpu import MPI_CPU

    return MPI_CPU


def gpu_shortage(ranks: int, visible: int) -> str | None:
    """Why `ranks` ranks cannot run on `visible` GPUs (the cupy backend: one GPU per rank), or None."""
    if ranks <= visible:
        return None
    shown = os.environ.get("CUDA_VISIBLE_DEVICES")
    where = f" (CUDA_VISIBLE_DEVICES={shown})" if shown is not None else ""
    if visible == 0:
        return (f"the cupy backend runs one rank per GPU, and no GPU is visible here{where}: run on a machine "
                f"with {ranks} GPUs, or use --backend mpi-cpu")
    return (f"--np {ranks}: the cupy backend runs one rank per GPU, but {visible} GPU(s) are visible here{where}: "
            f"run with --np {visible} or fewer, or use --backend mpi-cpu")


def require_gpus(ranks: int) -> None:
    """The cupy backend's dependencies, and a GPU for each rank (counted in this process)."""
    from . import cupy_nccl

    cupy_nccl.require_cupy()
    problem = gpu_shortage(ranks, cupy_nccl.visible_gpus())
    if problem:
        raise BackendError(problem)


def supported(backend, sched: ir.Schedule) -> None:
    """Every op of `sched` is in the backend's table, else `BackendError` with the op and reason."""
    from ..semantics.backends import Unsupported

    for program in sched.programs:
        if program.threads and not getattr(backend, "threads", False):
            thread = program.threads[0]
            raise BackendError(f"{thread.loc}: rank {program.rank} runs threads ({thread.kind} {thread.name} ...): the "
                               f"{backend.name} executor runs one program per rank and does not run threads; "
                               "the mpi-cpu executor does")
    for program in sched.programs:
        for thread in program.threads:
            for op in thread.ops:
                for each in ((op, *op.ops) if op.kind == "group" else (op,)):  # a group's own limits too
                    try:
                        backend.lookup(each)
                    except Unsupported as exc:
                        raise BackendError(f"{exc} (rank {program.rank} {thread.kind} {thread.name})") from None
    for program in sched.programs:
        for op in program.ops:
            for each in ((op, *op.ops) if op.kind == "group" else (op,)):
                try:
                    backend.lookup(each)
                except Unsupported as exc:
                    raise BackendError(f"{exc} (rank {program.rank})") from None
