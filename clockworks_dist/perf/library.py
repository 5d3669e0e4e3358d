"""The library's constants fitted across machines, and scored on a machine the fit never saw.

`fit_across(machines)` fits what NCCL's collectives cost apart from the hardware
(`topology.library`) on the microbenchmarks of several machines at once, each cell predicted on its
own machine's topology (links, switch, ranks) by the same simulator that predicts user schedules.
`leave_one_out(machines)` fits on all machines but one and predicts the one left out, for each in
turn: the accuracy a user can expect before renting a machine nobody measured.

What is fitted (FITTED), and why these: the constants the collective microbenchmarks tell apart when
the kinds share them. A per-kind link efficiency or base latency would fit any one machine and
transfer to none (on two ranks an all-gather's edge bytes and its own chunk are the same half of
the buffer; only kinds sharing the link's efficiency tell them apart), so the kinds share one link
efficiency per protocol and one base latency per protocol, and differ only by what they do: their
ring steps (2(n-1), n-1, one pipeline), their own chunk's work (`nccl_chunk_GBs`). What no measured
machine shows is tied to what one does by NCCL's own ratios (TIES): NCCL never picks LL128 on two
ranks, so LL128's latencies and rates follow Simple's as in NCCL's tuning tables.

Machines must agree on the library: raw runs of different NCCL versions are refused, and so is a
raw run whose GPU is not its topology's.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..errors import ClockworksError
from ..topology import load_topology
from ..topology.library import same_gpu
from ..topology.model import DATA_DIR, Constants, Topology
from .fit import PARAMETERS, Cell, get_value, least_squares_fit, load_cells, predict_cell, with_values

MACHINES_FILE = DATA_DIR / "measured" / "machines" / "index.yaml"
# The collectives the library's fit and score use (the NCCL microbenchmarks' graph runs, 8 KiB up),
# and the point-to-point ones its second stage fits (sends, sends both ways, the grouped exchange).
OPS = ("allreduce", "allgather", "reducescatter", "broadcast")
P2P_OPS = ("sendrecv", "sendrecv_bidir", "alltoall")
SCORED_OPS = ("allreduce", "allgather", "reducescatter")
SMALLEST = 8 * 1024
ONE_CHANNEL_FROM = 16 << 20  # the one-channel runs the fit reads: those a channel's rate bounds
# A machine's own calibration (`perf.fit.PARAMETERS`) fits these too, within the same bounds.
_CALIBRATED = {entry[0]: entry for entry in PARAMETERS}


def _as_calibrated(*paths: str) -> list[tuple[str, float, float]]:
    return [_CALIBRATED[path] for path in paths]


FITTED = _as_calibrated(
    "graph_launch_us", "nccl_base_latency_us.LL", "nccl_base_latency_us.Simple", "nccl_step_latency_us.nvlink.LL",
    "nccl_step_latency_us.nvlink.Simple", "nccl_channel_GBs.LL", "nccl_channel_GBs.Simple",
    "nccl_protocol_link_efficiency.LL", "nvlink_reverse_share") + [
    ("nccl_protocol_link_efficiency.Simple", 0.2, 1.0),
    ("nccl_chunk_GBs.all_gather", 50.0, 20000.0),
    ("nccl_chunk_GBs.all_reduce", 50.0, 20000.0),
    ("nccl_chunk_GBs.reduce_scatter", 50.0, 20000.0),
]
# The second stage: point-to-point's own constants (its base latency per protocol, what a send and an
# exchange reach of a channel and of the link, an exchange's ramp and own copy), with the collective
# constants it shares (a protocol's channel rate and link efficiency, and the load data one way puts on
# the other way of an NVLink, `nvlink_reverse_share`, which every ring's both-way traffic also reads)
# held as the first stage fitted them: a constant the collectives read is fitted where they are
# scored. The generated programs of the NCCL backend are sends and receives: these price them.
P2P_FITTED = _as_calibrated("nccl_p2p_base_latency_us.LL", "nccl_p2p_base_latency_us.Simple") + [
    ("nccl_kind_efficiency.p2p", 0.2, 3.0),  # a wider bound than one machine's calibration (1.5)
    ("nccl_kind_efficiency.all_to_all", 0.2, 3.0),
] + _as_calibrated("nccl_kind_link_efficiency.p2p", "nccl_kind_link_efficiency.all_to_all",
                   "nccl_kind_base_us.all_to_all", "nccl_exchange_ramp")
# (constant, the constant it follows, factor): NCCL's tuning tables (`perf.nccl_tuning`): LL128's
# base latency 14.0 against Simple's 8.4, its NVLink step 1.9 against 3.4, its bandwidth 0.92 of
# Simple's, and its lines carry 120 data bytes in 128.
TIES = [
    ("nccl_base_latency_us.LL128", "nccl_base_latency_us.Simple", 14.0 / 8.4),
    ("nccl_step_latency_us.nvlink.LL128", "nccl_step_latency_us.nvlink.Simple", 1.9 / 3.4),
    ("nccl_channel_GBs.LL128", "nccl_channel_GBs.Simple", 0.92),
    ("nccl_protocol_link_efficiency.LL128", "nccl_protocol_link_efficiency.Simple", 120 / 128),
]
# What the shared structure fixes: no per-kind link efficiency, base or channel share for the
# collectives the fit sees.
SHARED = {"nccl_kind_link_efficiency": ("all_reduce", "all_gather", "reduce_scatter", "broadcast", 1.0),
          "nccl_kind_base_us": ("all_reduce", "all_gather", "reduce_scatter", "broadcast", 0.0),
          "nccl_kind_efficiency": ("all_reduce", "all_gather", "reduce_scatter", "broadcast", 1.0)}


CHUNK_START = {"all_gather": 1000.0, "all_reduce": 1000.0, "reduce_scatter": 1000.0}


@dataclass
class Machine:
    """One measured machine: its name, topology and microbenchmark cells."""

    name: str
    topology: Topology
    cells: list[Cell]
    provenance: dict = field(default_factory=dict)
    what: str = ""

    @property
    def gpu(self) -> str:
        return str(self.provenance.get("gpu") or "")

    @property
    def nccl(self) -> str | None:
        return (self.provenance.get("wheels") or {}).get("nvidia-nccl-cu13") or self.provenance.get("nccl")

    @property
    def ranks(self) -> int:
        return max((c.ranks for c in self.cells), default=0)


def load_machine(name: str, raw: str | Path, topology: str | Path, what: str = "") -> Machine:
    """A machine from its raw microbenchmarks and its topology; refused when the raw run's GPU is not
    the topology's (a raw file of another machine given by mistake)."""
    cells, provenance = load_cells(str(raw))
    # the one-channel runs (NCCL_MAX_NCHANNELS=1) are kept for the fit: they measure a channel's own
    # rate, which is what transfers to a machine whose NCCL runs another channel count per peer
    cells = [c for c in cells if c.op in OPS + P2P_OPS and c.mode == "graph" and c.nbytes >= SMALLEST]
    if not cells:
        raise ClockworksError(f"{raw}: no NCCL collective measured in it (graph runs of {', '.join(OPS)})")
    topo = load_topology(topology)
    gpu = str(provenance.get("gpu") or "")
    models = {d.model for d in topo.devices if d.kind == "gpu" and d.model}
    if gpu and models and not any(same_gpu(gpu, model) for model in models):
        raise ClockworksError(f"{raw}: measured on {gpu}, but its topology {topology} has {', '.join(sorted(models))} "
                              "GPUs: give the topology of the machine that ran it")
    if max(c.ranks for c in cells) > len([d for d in topo.devices if d.kind == "gpu"]):
        raise ClockworksError(f"{raw}: ran on {max(c.ranks for c in cells)} ranks, more than the GPUs of {topology}")
    return Machine(name, topo, cells, provenance, what)


def shipped_machines(names: list[str] | None = None) -> list[Machine]:
    """The machines of data/measured/machines/index.yaml (all, or those named)."""
    entries = yaml.safe_load(MACHINES_FILE.read_text())["machines"]
    found = [load_machine(e["name"], MACHINES_FILE.parent / e["raw"], e["topology"], e.get("what", ""))
             for e in entries if names is None or e["name"] in names]
    return found


def check_compatible(machines: list[Machine]) -> None:
    """Refuse machines whose runs cannot share library constants: different NCCL versions, or the
    same raw run twice."""
    versions = {m.name: m.nccl for m in machines}
    if len(set(versions.values())) > 1:
        listed = ", ".join(f"{name}: NCCL {version or 'unknown'}" for name, version in versions.items())
        raise ClockworksError(f"the runs were made with different NCCL versions ({listed}); the library's constants "
                              "are one version's: fit each version on its own runs")
    seen: dict[str, str] = {}
    for m in machines:
        stamp = str(m.provenance.get("date_utc") or "") + str(len(m.cells))
        if stamp in seen and m.provenance.get("date_utc"):
            raise ClockworksError(f"{m.name} and {seen[stamp]} are the same run (same date and cells): give each "
                                  "machine's own raw results once")
        seen[stamp] = m.name


def tie(consts: Constants) -> Constants:
    """`consts` with the tied constants (TIES) set from the ones they follow."""
    return with_values(consts, {path: get_value(consts, source) * factor for path, source, factor in TIES})


def structured(start: Constants) -> Constants:
    """`start` with the shared structure (SHARED) the fit assumes."""
    data = start.model_dump()
    # where the own-chunk rates start when `start` has none: near an HBM copy's share of a channel
    data["nccl_chunk_GBs"] = {**CHUNK_START, **data["nccl_chunk_GBs"]}
    for name, (*kinds, value) in SHARED.items():
        data[name] = {**data[name], **{kind: value for kind in kinds}}
    return tie(Constants.model_validate(data))


def training_cells(machine: Machine) -> list[Cell]:
    """The cells a fit reads from a machine: of the default runs every other power of two (8, 32,
    128 KiB, ...) and 1 GiB, the largest; the one-channel runs from 16 MiB (a channel's rate; the
    scores never read those)."""
    largest = max(x.nbytes for x in machine.cells)
    return [c for c in machine.cells if (c.nbytes >= ONE_CHANNEL_FROM if c.max_channels else
                                         round(math.log2(c.nbytes)) % 2 == 1 or c.nbytes == largest)]


def fit_across(machines: list[Machine], start: Constants, workers: int | None = None,
               max_nfev: int = 60) -> tuple[Constants, dict]:
    """The library's constants fitted on the training cells of every machine at once: the
    collectives' (FITTED), then point-to-point's (P2P_FITTED) with the collectives' held."""
    check_compatible(machines)

    def items(ops):
        return [((c, m.topology), c.measured_us) for m in machines for c in training_cells(m) if c.op in ops]

    def predict(item, consts):
        return predict_cell(item[0], item[1], tie(consts))

    fitted, summary = least_squares_fit(items(OPS), predict, FITTED, structured(start), workers, max_nfev)
    found = items(P2P_OPS)
    p2p_summary = None
    if found:
        fitted, p2p_summary = least_squares_fit(found, predict, P2P_FITTED, tie(fitted), workers, max_nfev)
    return tie(fitted), dict(summary, p2p=p2p_summary, machines=[m.name for m in machines])


@dataclass(frozen=True)
class Scored:
    """A cell predicted on a machine: ours and NCCL's own estimate against the measured time."""

    machine: str
    op: str
    nbytes: int
    measured_us: float
    predicted_us: float
    nccl_est_us: float | None

    @property
    def error_pct(self) -> float:
        return (self.predicted_us / self.measured_us - 1) * 100

    @property
    def nccl_error_pct(self) -> float | None:
        return (self.nccl_est_us / self.measured_us - 1) * 100 if self.nccl_est_us else None


def score(machine: Machine, consts: Constants, ops=SCORED_OPS) -> list[Scored]:
    """The machine's default runs (NCCL's own channel count) of `ops`, predicted with `consts`."""
    return [Scored(machine.name, c.op, c.nbytes, c.measured_us, predict_cell(c, machine.topology, consts),
                   c.nccl_est_us) for c in machine.cells if c.op in ops and not c.max_channels]


def leave_one_out(machines: list[Machine], start: Constants, workers: int | None = None,
                  max_nfev: int = 60) -> dict[str, tuple[Constants, list[Scored]]]:
    """For each machine: the constants fitted on the others, and its cells predicted with them."""
    out = {}
    for left in machines:
        others = [m for m in machines if m is not left]
        consts, _ = fit_across(others, start, workers, max_nfev)
        out[left.name] = (consts, score(left, consts, SCORED_OPS + P2P_OPS))
    return out


BANDS = (("8-64 KiB", 0, 64 * 1024), ("128 KiB-8 MiB", 64 * 1024 + 1, 8 * 1024**2),
         (">= 16 MiB", 8 * 1024**2 + 1, 1 << 62))


def summary(rows: list[Scored]) -> dict:
    """Median and largest |error| of ours and of NCCL's estimate, over `rows`."""
    ours = sorted(abs(r.error_pct) for r in rows)
    nccl = sorted(abs(r.nccl_error_pct) for r in rows if r.nccl_error_pct is not None)
    out = {"cells": len(rows)}
    if ours:
        out.update(median_pct=round(statistics.median(ours), 1), max_pct=round(ours[-1], 1),
                   bias_pct=round(statistics.median(r.error_pct for r in rows), 1))
    if nccl:
        out.update(nccl_median_pct=round(statistics.median(nccl), 1), nccl_max_pct=round(nccl[-1], 1))
    return out
