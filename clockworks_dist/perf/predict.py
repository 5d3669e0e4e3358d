"""Predictions: one schedule, one topology, a sweep of sizes (and of world sizes).

`predict_sizes` traces the schedule at each size (solving its size symbol so that the main buffer
holds that many bytes), simulates it, and reports time, algbw and busbw with nccl-tests'
conventions, the critical path, the busiest links and what bounds the time.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from .. import ir
from ..errors import ScheduleError
from ..importers.imported import Imported, is_imported
from ..lowering import Build, lower
from ..topology.model import Constants
from .costs import RunConditions, host_cost, launches_kernel
from .network import GB, Network, from_topology
from .simulate import Simulator, Timeline, compile_model
from ..dsl.message import (  # noqa: F401  (the message size is the DSL's: re-exported for old callers)
    MAX_SIZE, MAX_SIZES, main_buffer, parse_size, parse_sizes, pinned_bytes, size_binding,
)

def imported_chunk(defn: Imported, base: ir.Schedule, nbytes: int) -> int:
    """The chunk (elements) that gives an imported algorithm or plan `nbytes` bytes per rank in its main
    buffer (nccl-tests' convention, as for any schedule: an all-gather's gathered output, else its
    input): that buffer holds the file's chunks, so a chunk is nbytes / (chunks * element bytes), a
    whole number of `chunk_unit` elements; a size that is not is an error naming the multiple to use.
    `base`: the file traced at its `chunk_unit` (`imported_base`)."""
    buf = main_buffer(base)
    step = imported_step(defn, base)
    if nbytes % step:
        low, high = max(step, nbytes // step * step), (nbytes // step + 1) * step
        elements = f"{defn.chunk_unit} {buf.dtype} elements" if defn.chunk_unit > 1 else f"{buf.dtype} elements"
        raise ScheduleError(f"{nbytes} bytes per rank is not a whole number of chunks: the {buf.name} holds "
                            f"{buf.count // defn.chunk_unit} chunks of {elements}", file=defn.loc.file,
                            line=defn.loc.line, hint=f"pick multiples of {step} bytes, e.g. {low} or {high}")
    return nbytes // step * defn.chunk_unit


def imported_base(defn: Imported, world: int, ranks_per_node: int | None = None) -> ir.Schedule:
    """The imported file traced at its smallest chunk (`chunk_unit` elements)."""
    return defn.trace_chunk(world, defn.chunk_unit, ranks_per_node)


def imported_step(defn: Imported, base: ir.Schedule) -> int:
    """The bytes per rank of an imported file at its smallest chunk (`base`, `imported_base`): its
    message sizes are multiples of this (`imported_chunk`)."""
    buf = main_buffer(base)
    return buf.count * ir.DTYPE_BYTES[buf.dtype]


def imported_sizes(defn: Imported, world: int, ranks_per_node: int | None = None) -> list[int]:
    """An imported file's default sweep: 1KiB..1GiB as for any schedule, each size rounded up to a
    whole number of chunks (powers of two times `imported_step`)."""
    step = imported_step(defn, imported_base(defn, world, ranks_per_node))
    size = step
    while size < 1024:
        size *= 2
    sizes = []
    while size <= 1 << 30:
        sizes.append(size)
        size *= 2
    return sizes


def imported_conditions(defn: Imported) -> RunConditions:
    """How an imported file runs: its thread blocks move every send and recv with the file's protocol
    (`protocol`), each put or get is one thread block's (`nvshmem_blocks=1`), and its packet writes are
    the packet path (`packet_signal`)."""
    return RunConditions(protocol=defn.protocol, nvshmem_blocks=1, packet_signal=defn.packet_signal)


def imported_pricing(defn: Imported) -> str:
    """How an imported file is priced, in a line for the report (`Imported.pricing`)."""
    return defn.pricing


def busbw_factor(sched: ir.Schedule) -> tuple[float, str]:
    """nccl-tests' bus bandwidth factor for the schedule's postcondition, and its name."""
    n = sched.world
    label = sched.expect[0].label if sched.expect else ""
    if label.startswith("mscclpp "):  # an MSCCL++ plan's: "mscclpp allreduce", "mscclpp reducescatter"
        label = label.removeprefix("mscclpp ").replace("reducescatter", "reduce_scatter")
    if label.startswith("allreduce"):
        return 2 * (n - 1) / n, "allreduce"
    if label.startswith(("allgather", "reduce_scatter", "alltoall")):
        return (n - 1) / n, label.split("(")[0]
    return 1.0, label.split("(")[0] or "custom"


@dataclass
class Prediction:
    nbytes: int
    time_us: float
    algbw_GBs: float
    busbw_GBs: float
    timeline: Timeline = field(repr=False)
    mode: str = "graph"

    @property
    def bound(self) -> str:
        """What limits the time at this size (`bound` of its timeline)."""
        return bound(self.timeline)

    def to_json(self) -> dict:
        return {"bytes": self.nbytes, "time_us": round(self.time_us, 3), "algbw_GBs": round(self.algbw_GBs, 3),
                "busbw_GBs": round(self.busbw_GBs, 3), "mode": self.mode}


def simulate(sched: ir.Schedule, network: Network, consts: Constants, mode: str = "graph",
             conditions: RunConditions = RunConditions(), model=None) -> Timeline:
    """The schedule's run on `network` with `consts`, under `conditions` (`model`: its semantics
    machine, if already compiled)."""
    return Simulator(sched, network, consts, mode, conditions=conditions, model=model).run()


def host_us(sched: ir.Schedule, consts: Constants) -> float:
    """The host's issue time per iteration on the busiest rank (its NVSHMEM ops share one kernel)."""
    return max(sum(host_cost(op, consts) for op in p.ops)
               + (consts.kernel_launch_us if any(not launches_kernel(op) for op in p.ops) else 0.0)
               for p in sched.programs)


def steady_state_us(sched: ir.Schedule, timeline: Timeline, consts: Constants, mode: str,
                    network: Network | None = None, conditions: RunConditions = RunConditions(),
                    model=None) -> float:
    """Per-iteration time of the schedule run back to back. CUDA-graph launched, that is one run.
    Eagerly launched, the host issues every launch of an iteration while the GPU runs the previous
    one: an iteration takes the longer of the host's issue time and the GPU's own time."""
    if mode != "eager":
        return timeline.total_us
    gpu = Simulator(sched, network or timeline.network, consts, mode, host_clock=False, conditions=conditions,
                    model=model).run().total_us
    return max(gpu, host_us(sched, consts))


def predict_sizes(defn, topo, world: int, sizes: list[int], consts: Constants | None = None,
                  mode: str = "graph", ranks_per_node: int | None = None,
                  conditions: RunConditions = RunConditions(), build: Build | None = None, as_program: bool = False,
                  symbols: dict[str, int] | None = None) -> list[Prediction]:
    """The schedule traced at each size and simulated on `topo` (with its constants unless `consts`
    is given), under `conditions`; `symbols` binds size symbols other than the one each size solves
    for (`--size NAME=VALUE`). `build`: the schedule lowered first (`lowering.lower`: `calls`
    back-to-back calls simulated as one run and the time per call returned, packets, ...); with
    `as_program`, each time is one timed run of its generated program, as `perf.program.program_us`
    gives it (eagerly too: no steady state), else the lowered schedule's own ops."""
    consts = consts or topo.constants
    out = []
    network = from_topology(topo, world)
    imported = is_imported(defn)
    base = imported_base(defn, world, ranks_per_node) if imported else defn.trace(world, ranks_per_node,
                                                                                   sizes=symbols)
    calls = build.calls if build is not None else 1
    for nbytes in sizes:
        if imported:  # the message size sets the chunk
            sched = defn.trace_chunk(world, imported_chunk(defn, base, nbytes), ranks_per_node)
        else:
            binding = {**(symbols or {}), **size_binding(defn, world, nbytes, ranks_per_node, base)}
            sched = defn.trace(world, ranks_per_node, sizes=binding)
        factor, _ = busbw_factor(sched)
        how = conditions
        if build is not None:
            lowered = lower(sched, build)
            sched = lowered.sched
            if as_program:
                how = replace(conditions, program=lowered)
        network._routes.clear()
        model = compile_model(sched)  # both runs of eager mode share it
        timeline = simulate(sched, network, consts, mode, how, model)
        if how.program:  # a generated program's timed run is one run, eager too (`perf.program`)
            time_us = timeline.total_us / calls
        else:
            time_us = steady_state_us(sched, timeline, consts, mode, network, how, model) / calls
        algbw = nbytes / time_us / GB if time_us > 0 else 0.0
        out.append(Prediction(nbytes=nbytes, time_us=time_us, algbw_GBs=algbw, busbw_GBs=algbw * factor,
                              timeline=timeline, mode=mode))
    return out


def link_utilisation(timeline: Timeline, top: int = 5) -> list[tuple[str, float, float]]:
    """(link, GB moved, utilisation over the whole run) of the busiest resources."""
    net = timeline.network
    rows = []
    for res, moved in timeline.link_bytes.items():
        if timeline.total_us > 0:
            rows.append((net.names[res], moved / 1e9, moved / (net.capacity[res] * timeline.total_us)))
    return sorted(rows, key=lambda r: -r[2])[:top]


def bound(timeline: Timeline) -> str:
    """What limits the time: the busiest link if it is busy most of the run; else a transfer on the
    critical path held below the link rate by its own ceiling (NCCL channels, NVSHMEM blocks);
    else the fixed per-op costs."""
    links = link_utilisation(timeline, top=1)
    if links and links[0][2] >= 0.5:
        name, _, util = links[0]
        kind = "reduction (HBM)" if name.endswith("HBM") else "link bandwidth"
        return f"{kind}: {name} busy {util:.0%} of the time"
    # time the bytes themselves took on the critical path (fixed costs excluded)
    transfers = [r for r in timeline.critical if r.detail.get("flow_us")]
    spent = sum(r.detail["flow_us"] for r in transfers)
    if timeline.total_us > 0 and spent > 0.5 * timeline.total_us:
        longest = max(transfers, key=lambda r: r.detail["flow_us"])
        return (f"per-transfer rate ceiling (NCCL channels or NVSHMEM thread blocks), not the links: "
                f"{longest.loc} {longest.text[:50]} moves its bytes in {longest.detail['flow_us']:.1f} us")
    return "latency: fixed per-op costs dominate (launch, protocol steps, signals)"

