"""A timed run of a generated program, as `clockworks validate` measures it.

`clockworks predict` times a schedule's own ops, run back to back (a library call). The program
that `clockworks codegen` writes times one run between two CUDA events, and that run has costs of
its own: the graph launch (or the host's first issue) before the first op, a progress word before
each op of a host-driven program (NCCL), an NVSHMEM program's one kernel and its closing quiet and
barrier, and stand-in kernels for compute ops (the generated code hashes what a compute op reads
and writes what it writes; it does not run the user's kernel). Eagerly, the run is one pass of
the host issuing every launch while the GPU runs what it has been given, not a steady state.
`RunConditions.program` (the schedule's `lowering.Lowered`) turns these on in the simulator; the
constants are `program_*`.
"""

from __future__ import annotations

from ..lowering import Lowered
from ..topology.model import Constants
from .costs import RunConditions
from .network import from_topology
from .simulate import Simulator

BACKENDS = ("nccl", "nvshmem")


def program_conditions(lowered: Lowered) -> RunConditions:
    """How the simulator runs `lowered.sched` as its generated program (`lowering.Lowered`)."""
    if lowered.build.backend not in BACKENDS:
        raise ValueError(f"unknown backend {lowered.build.backend!r}: one of {', '.join(BACKENDS)}")
    return RunConditions(program=lowered)


def program_us(lowered: Lowered, topo, mode: str, consts: Constants | None = None, calls: int = 1) -> float:
    """The predicted time of one timed run of the generated program of `lowered` (`lowering.lower`)
    in `mode` (graph or eager), divided by `calls` (pass `lowered.build.calls` for the time per call
    of a run of back-to-back calls)."""
    conditions = program_conditions(lowered)
    consts = consts or topo.constants
    if consts.hbm_efficiency != topo.constants.hbm_efficiency:  # the network reads it from the topology
        topo = topo.model_copy(update={"constants": consts})
    sched = lowered.sched
    network = from_topology(topo, sched.world)
    timeline = Simulator(sched, network, consts, mode, conditions=conditions).run()
    return timeline.total_us / calls
