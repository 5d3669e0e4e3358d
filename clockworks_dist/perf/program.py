"""A timed run of a generated program, as `clockworks validate` measures it.

`clockworks predict` times a schedule's own ops, run back to back (a library call). The program
that `clockworks codegen` writes times one run between two CUDA events, and that run has costs of
its own: the graph launch (or the host's first issue) before the first op, a progress word before
each op of a host-driven program (NCCL), an NVSHMEM program's one kernel and its closing quiet and
barrier, and stand-in kernels for compute ops (the generated code hashes what a compute op reads
and writes what it writes; it does not run the user's kernel). Eagerly, the run is one pass of
the host issuing every launch while the GPU runs what it has been given, not a steady state.
`RunConditions.program` turns these on in the simulator; the constants are `program_*`.
"""

from __future__ import annotations

from .. import ir
from ..topology.model import Constants
from .costs import RunConditions
from .network import from_topology
from .simulate import Simulator

BACKENDS = ("nccl", "nvshmem")


def program_conditions(sched: ir.Schedule, backend: str, host_progress: bool = False, copy_engine: int = 0,
                       splits: dict[int, list[int]] | None = None, packets=None) -> RunConditions:
    """How the simulator runs `sched` as its generated `backend` program (`program_us`'s arguments;
    `packets`: the `codegen.packets.Lowered` whose schedule `sched` is)."""
    nvshmem = backend == "nvshmem"
    starts = tuple(tuple((splits or {}).get(rank, ())) for rank in range(sched.world)) if nvshmem and splits else ()
    sends = tuple(sorted(packets.sends)) if nvshmem and packets is not None else ()
    return RunConditions(program=backend, host_progress=host_progress, copy_engine=copy_engine if nvshmem else 0,
                         kernel_starts=starts, packet_sends=sends)


def program_us(sched: ir.Schedule, topo, mode: str, backend: str, consts: Constants | None = None,
               calls: int = 1, host_progress: bool = False, copy_engine: int = 0,
               splits: dict[int, list[int]] | None = None, packets=None) -> float:
    """The predicted time of one timed run of `sched`'s generated `backend` program in `mode`
    (graph or eager), per call when `sched` is `calls` back-to-back calls (`repeat.repeat`);
    `host_progress`: an NVSHMEM program built with host-mapped progress words
    (`RunConditions.host_progress`); `copy_engine`: its puts of at least that many bytes on the copy
    engine (`RunConditions.copy_engine`); `splits` (rank -> op indices, `repeat.call_starts`): an
    NVSHMEM program with a kernel per call, each beginning at those ops (`RunConditions.kernel_starts`);
    `packets`: the `codegen.packets.Lowered` whose schedule `sched` is (`RunConditions.packet_sends`)."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}: one of {', '.join(BACKENDS)}")
    consts = consts or topo.constants
    if consts.hbm_efficiency != topo.constants.hbm_efficiency:  # the network reads it from the topology
        topo = topo.model_copy(update={"constants": consts})
    network = from_topology(topo, sched.world)
    conditions = program_conditions(sched, backend, host_progress, copy_engine, splits, packets)
    timeline = Simulator(sched, network, consts, mode, conditions=conditions).run()
    return timeline.total_us / calls
