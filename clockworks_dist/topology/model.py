"""Topology files: the schema (frozen pydantic models) and the loader.

A topology is a list of devices (GPUs, NVSwitches, PCIe switches, host bridges, CPUs, NICs,
InfiniBand leaves and spines), a list of links between them (kind, lanes, bandwidth per direction,
latency) and the per-op constants the simulator needs. Files are YAML. A file with a `fabric:`
section is a cluster template: the loader expands it to `nodes` copies of a node topology joined
by a rail-optimised leaf/spine fabric (`load_topology("dgx-h100-cluster", nodes=4)`).

Where the shipped files live: in this package, `clockworks_dist/topology/data/*.yaml`, declared
as package data, so `load_topology("dgx-h100")` works the same for an editable install, a wheel
and a source checkout. The repository's `topologies/` is a link to that folder, for people who
browse or copy the files.

Units: bandwidth in GB/s (10^9 bytes per second) per direction, latency in microseconds. Every
number must be finite and lie in a range far wider than any real machine needs (rates 0.001 GB/s to
1 PB/s, latencies up to one second, efficiencies 1% to 100%, at most 256 NCCL channels): a value
outside it is an error naming the file, the line and the field, never a simulation that cannot end.
"""

from __future__ import annotations

import datetime
import difflib
import math
import os
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, ValidationError, model_validator,
)

from pydantic_core import PydanticCustomError

from ..errors import TopologyError
from .library import with_library

DATA_DIR = Path(__file__).resolve().parent / "data"

DeviceKind = Literal["gpu", "nvswitch", "pcie_switch", "host_bridge", "cpu", "nic", "ib_leaf", "ib_spine"]
LinkKind = Literal["nvlink", "pcie", "upi", "ib", "ethernet", "c2c"]
# Switches of the network fabric belong to no node; every other device belongs to exactly one.
FABRIC_KINDS = frozenset({"ib_leaf", "ib_spine"})
GPU_FIELDS = ("hbm_GBs", "hbm_GB", "l2_MiB", "sms", "rank_order", "peak_tflops")
# The dtypes a GPU's peak FLOP rate is given for (`Device.peak_tflops`): a `compute` op's `flops=`
# is divided by the rate of the dtype of the first region it writes (else the first it reads).
FLOP_DTYPES = ("float16", "bfloat16", "float32", "float64")
FlopDtype = Literal[FLOP_DTYPES]
MAX_TFLOPS = 1e6  # an exaflop on one GPU: three orders of magnitude above any built
NIC_FIELDS = ("rail", "gbps")

Identifier = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.\-]*$", max_length=128)]

# Bounds on numbers, far outside any real machine, so that no value in a file can stall the simulator
# (a rate of 1e-300 GB/s or a latency of 1e300 us leaves simulated time unable to advance) and no
# count can make it loop for ever (a billion channels).
MIN_GBS = 1e-3  # 1 MB/s: slower than any link, memory or copy engine ever built
MAX_GBS = 1e6  # 1 PB/s: two orders of magnitude above the fastest HBM
MAX_LATENCY_US = 1e6  # one second for one hop or one fixed cost
MIN_FRACTION = 0.01  # an efficiency below 1% models no real kernel
MAX_CHANNELS = 256  # NCCL's own MAXCHANNELS is 32 or 64, by version
MAX_NODES = 100_000
MAX_RAILS = 1024
MAX_LANES = 10_000
# An expanded cluster holds at most this many devices and links together (a 1,000-node DGX H100
# cluster has 96,284 and loads and summarises in about 2 s; 5,194 nodes fit): beyond it, loading
# takes minutes and gigabytes.
MAX_CLUSTER_PARTS = 500_000
# YAML: a topology file is a few levels deep and a few megabytes at most.
MAX_DEPTH = 32
MAX_FILE_BYTES = 32 * 1024 * 1024
MAX_YAML_NODES = 5_000_000  # values in a file, with aliases (`*name`) expanded


def _at_least(low: float, unit: str, why: str):
    """A check that a positive number is not absurdly small (the field's gt=0 already refused <= 0)."""

    def check(value: float) -> float:
        if value < low:
            raise ValueError(f"must be at least {low:g} {unit} ({why})")
        return value

    return check


def _not_a_bool(value: Any) -> Any:
    """pydantic reads true as 1 in a number field; in a topology file it is a slip, not a number."""
    if isinstance(value, bool):
        raise ValueError("must be a number, not true or false")
    return value


def _int(**bounds: int) -> Any:
    """An integer field with these bounds (JSON schema: minimum, maximum); true and false refused."""
    return Annotated[int, Field(**bounds), BeforeValidator(_not_a_bool)]


def _real(**bounds: float) -> Any:
    """A finite number field with these bounds; true and false refused."""
    return Annotated[float, Field(**bounds), BeforeValidator(_not_a_bool)]


Rate = Annotated[float, Field(gt=0, le=MAX_GBS), BeforeValidator(_not_a_bool),
                 AfterValidator(_at_least(MIN_GBS, "GB/s", "1 MB/s: no real link or memory is slower"))]
Latency = _real(ge=0, le=MAX_LATENCY_US)
Fraction = _real(ge=MIN_FRACTION, le=1)
Channels = _int(ge=1, le=MAX_CHANNELS)


class _Frozen(BaseModel):
    # allow_inf_nan=False: .inf and .nan are refused in every float field, with the field's path.
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class _Invalid(ValueError):
    """Problems found by a model validator, each with the path of the field it is about."""

    def __init__(self, problems: list[tuple[tuple[str | int, ...], str]]):
        super().__init__("; ".join(message for _, message in problems))
        self.problems = problems


def _suggest(word: object, choices: list[str]) -> str:
    close = difflib.get_close_matches(str(word), choices, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


# ----------------------------------------------------------------------------------- devices, links
class Device(_Frozen):
    """A GPU, switch, host bridge, CPU or NIC. `node` is the node index (None for fabric switches)."""

    id: Identifier
    kind: DeviceKind
    node: _int(ge=0, lt=MAX_NODES) | None = Field(
        None, description="node index; omit for fabric switches (ib_leaf, ib_spine)")
    model: str | None = Field(None, max_length=200, description="product name, e.g. H100-SXM5-80GB, ConnectX-7")
    hbm_GBs: Rate | None = Field(None, description="GPU only: memory bandwidth, GB/s")
    hbm_GB: _real(gt=0, le=1e6) | None = Field(None, description="GPU only: memory capacity, GB")
    l2_MiB: _real(gt=0, le=1e5) | None = Field(
        None, description="GPU only: L2 cache, MiB (50 on H100/H200, 40 on A100); a plain kernel whose reads and "
                          "writes fit in it moves them at l2_GBs instead of over HBM. Omit it to model HBM alone")
    sms: _int(ge=1, le=100_000) | None = Field(None, description="GPU only: streaming multiprocessors")
    rank_order: _int(ge=0, le=1_000_000) | None = Field(None, description="GPU only: position among its node's "
                                                                           "GPUs (default: file order)")
    peak_tflops: dict[FlopDtype, _real(gt=0, le=MAX_TFLOPS)] | None = Field(
        None, description="GPU only: peak dense TFLOP/s by dtype (float16, bfloat16, float32, float64; tensor cores "
                          "where the dtype has them), what a compute op's flops= is divided by")
    rail: _int(ge=0, lt=MAX_RAILS) | None = Field(None, description="NIC only: the rail (leaf group) it connects to")
    gbps: _real(gt=0, le=8 * MAX_GBS) | None = Field(None, description="NIC only: line rate, Gb/s")

    @model_validator(mode="after")
    def _fields_fit_kind(self) -> Device:
        problems = []
        if self.kind == "gpu":
            problems += [((name,), f"a gpu needs {name}") for name in ("hbm_GBs", "sms") if getattr(self, name) is None]
        if self.kind == "nic" and self.gbps is None:
            problems.append((("gbps",), "a nic needs gbps, its line rate in Gb/s"))
        for names, owner in ((GPU_FIELDS, "gpu"), (NIC_FIELDS, "nic")):
            for name in names:
                if self.kind != owner and getattr(self, name) is not None:
                    problems.append(((name,), f"only {owner} devices have {name}; {self.id} is a {self.kind}"))
        if self.kind in FABRIC_KINDS and self.node is not None:
            problems.append((("node",), f"{self.id} is a fabric switch ({self.kind}): it belongs to no node, "
                                        "remove node"))
        if problems:
            raise _Invalid(problems)
        return self


class LinkSpec(_Frozen):
    """What a link is, without its endpoints (the fabric section of a cluster template uses it)."""

    kind: LinkKind
    lanes: _int(ge=1, le=MAX_LANES) = Field(1, description="physical links or lanes bundled here, e.g. 18 NVLinks")
    GBs_per_dir: Rate = Field(description="GB/s per direction, the total over all lanes")
    latency_us: Latency = Field(description="one-way latency of this hop, microseconds")


class Link(LinkSpec):
    """A full-duplex link between devices `a` and `b`: GBs_per_dir each way."""

    a: Identifier
    b: Identifier


# ----------------------------------------------------------------------------------- constants
# The kinds of NCCL call that per-kind constants are keyed by: the collectives and point-to-point.
NCCL_KINDS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce_to", "all_to_all", "p2p")
NcclKind = Literal[NCCL_KINDS]


def _every_kind(default: float) -> dict[str, float]:
    """A per-kind table with one value for every kind."""
    return dict.fromkeys(NCCL_KINDS, default)


def _kinds_default_to(default: float):
    """A validator for a per-kind table: the kinds a file leaves out take the field's default, so a
    reader finds every kind (and the default lives here only)."""

    def fill(table: dict[str, float]) -> dict[str, float]:
        return {**_every_kind(default), **table}

    return fill


class _ByName(_Frozen):
    """A table with one field per name (protocol or transport), read as `table[name]`."""

    def __getitem__(self, name: str):
        if name not in type(self).model_fields:
            raise KeyError(name)
        return getattr(self, name)


class PerProtocol(_ByName):
    """One latency per NCCL protocol, us."""

    LL: Latency
    LL128: Latency
    Simple: Latency


class PerProtocolRate(_ByName):
    """One rate per NCCL protocol, GB/s."""

    LL: Rate
    LL128: Rate
    Simple: Rate


class PerProtocolFraction(_ByName):
    """One fraction per NCCL protocol, 0.01 to 1."""

    LL: Fraction
    LL128: Fraction
    Simple: Fraction


class StepLatency(_ByName):
    """NCCL's latency per ring step, by the hardware the step crosses (`steps["pcie"]["LL"]`)."""

    nvlink: PerProtocol
    pcie: PerProtocol
    net: PerProtocol


def _comments_above_fields(cls: type) -> dict[str, str]:
    """Field name -> the comment block written above it in `cls`'s source (a block above several
    fields in a row describes each of them); {} where the source cannot be read."""
    import inspect
    import re

    try:
        lines = inspect.getsource(cls).splitlines()
    except (OSError, TypeError):
        return {}
    found: dict[str, str] = {}
    block: list[str] = []
    last = ""
    for line in lines:
        text = line.strip()
        if text.startswith("#"):
            block.append(text.lstrip("#").strip())
            continue
        field = re.match(r"^    ([a-z_][A-Za-z0-9_]*)\s*:", line)
        if field:
            last = " ".join(block) if block else last
            if last:
                found[field.group(1)] = last
        elif text and not line.startswith("        "):  # anything else but a field's continuation
            last = ""
        block = []
    return found


def _describe_constants(schema: dict, model: type) -> None:
    """`clockworks topology schema`: each constant's property carries the comment above it in this
    file (what it means, its unit, where its default was measured), so the schema documents them."""
    for name, text in _comments_above_fields(model).items():
        prop = schema.get("properties", {}).get(name)
        if prop is not None and "description" not in prop:
            prop["description"] = text


class Constants(_Frozen):
    """Per-op constants of the simulator, under the names it reads them by. Defaults are public
    figures (sources in the comments); the calibration step measures them on a real machine and
    writes them into a topology file (`model_dump()`)."""

    model_config = ConfigDict(**_Frozen.model_config, json_schema_extra=_describe_constants)

    # The host's time to issue one NCCL collective eagerly (not in a CUDA graph): launches issued
    # back to back go no faster than one per this; a few us on Hopper with a recent driver, and the
    # figure most worth calibrating. (Plain kernels have their own: local_host_us.)
    kernel_launch_us: Latency = 3.0
    # The same for an NCCL send/recv group, which skips the collectives' tuning on the host.
    p2p_launch_us: Latency = 3.0
    # An NCCL kernel launched from inside a CUDA graph: about a microsecond (graphs remove the
    # per-launch driver work), more once NCCL's own setup on the GPU is counted.
    graph_launch_us: Latency = 1.0
    # What an eagerly launched NCCL kernel costs the GPU on top of a graph-launched one (the host's
    # own cost per launch is kernel_launch_us); 0.5 until calibrated.
    eager_launch_us: Latency = 0.5
    # How long NCCL's kernels take (the timing side; which algorithm and protocol NCCL picks follows
    # its own tables, perf/nccl_tuning.py). Defaults are NCCL's cost model, src/graph/tuning.cc
    # (NCCL 2.19+): baseLat of the ring algorithm...
    nccl_base_latency_us: PerProtocol = PerProtocol(LL=6.6, LL128=14.0, Simple=8.4)
    # ... and hwLat per ring step over NVLink, PCIe and the network (same file).
    nccl_step_latency_us: StepLatency = StepLatency(
        nvlink=PerProtocol(LL=0.6, LL128=1.9, Simple=3.4),
        pcie=PerProtocol(LL=1.0, LL128=2.5, Simple=5.7),
        net=PerProtocol(LL=2.7, LL128=4.0, Simple=14.0))
    # Bandwidth one NCCL channel (one thread block) can drive, GB/s: LL128 36.7 is NCCL's Hopper
    # per-channel cap (perChMaxRingLL128Bws); Simple 20.6 is NCCL's per-NVLink figure for sm90
    # (SM90_NVLINK_BW in src/graph/topo.h), which its graph search gives each channel; LL is
    # Simple's times the LL efficiency.
    nccl_channel_GBs: PerProtocolRate = PerProtocolRate(LL=10.3, LL128=36.7, Simple=20.6)
    # The communicator's channel count (NCCL's init log prints it: "24 coll channels" on NV18);
    # NCCL's upper bound MAXCHANNELS is 32 (src/include/device.h; 64 in recent versions).
    nccl_max_channels: Channels = 32
    # NVSHMEM device calls. What the issuing thread spends on a put or signal before it goes on
    # (the issue): 0.04 us for a signal_op, 0.08 for a thread's 8-byte put, measured on one H200
    # (scripts/gpu/nvshmem_op_cost_probe.cu, results/h200/one_gpu/op_cost).
    nvshmem_put_latency_us: Latency = 0.04
    # What a delivery takes beyond its route's one-way latency (the link's latency_us, which on NV18
    # is the signal ping-pong's 0.77 us one way, so nearly nothing is left); fitted by calibration.
    nvshmem_signal_latency_us: Latency = 0.0
    # A fence or quiet on the load/store path is the thread's system-scope fence
    # (`__threadfence_system`): this much with nothing of its own in flight (0.51 us measured on one
    # H200, the same probe), else until every store it made is acknowledged (`perf/simulate.py`).
    nvshmem_fence_us: Latency = 0.51
    # One thread block issuing putmem_block moves about 40 GB/s over NVLink (37-42 GB/s measured
    # with one 1024-thread block on 2 x H200): large puts must spread over blocks.
    nvshmem_block_GBs: Rate = 40.0
    # The fraction of a route's raw bandwidth device-initiated puts reach with many blocks (measured
    # 356 GB/s of 478 on NV18 with 32 blocks); 1.0 until calibrated.
    nvshmem_link_efficiency: Fraction = 1.0
    # Host-issued putmem_on_stream uses the copy engines (~400 GB/s measured on NV18, same machine).
    copy_engine_GBs: Rate = 400.0
    # Fraction of the datasheet HBM bandwidth a streaming kernel (a reduction) reaches: ~90% is
    # typical of STREAM-like kernels on H100/H200.
    hbm_efficiency: Fraction = 0.9
    # What a plain kernel moves per second when all the bytes it reads and writes fit in the GPU's
    # L2 (the device's l2_MiB): a kernel repeated on the same buffers, or reducing what a recv has
    # just written, finds them there. Measured about 9 TB/s for the reduce kernel on one H200
    # (calibrate/bench_kernels.cu, 4 to 16 MiB); used only where the device states l2_MiB.
    l2_GBs: Rate = 8000.0
    # One round of a barrier (barrier_all / sync_all).
    barrier_us: Latency = 2.0
    # A `compute` op that states no cost (no us=, flops= or bytes=) is taken as a kernel bound by
    # its reads and writes over HBM, plus this much; 0 unless a file sets it.
    compute_us: Latency = 0.0
    # Plain kernels (reduce, copy, fill, compute, and the reduction after a recv that reduces):
    # they start faster than NCCL's kernels, which set up channels and peers first. The GPU-side
    # start of one in a CUDA graph (about 1 us on Hopper), what an eager launch adds to it, and the
    # host's time to issue one eagerly (a few us with a recent driver); the calibration's kernel
    # microbenchmark measures all three (calibrate/bench_kernels.cu).
    local_graph_launch_us: Latency = 1.0
    local_eager_launch_us: Latency = 0.5
    local_host_us: Latency = 3.0
    # What a cooperative launch adds to a plain kernel's start in a CUDA graph: the attribute NVSHMEM's
    # collective launch gives a kernel, which a generated NVSHMEM kernel of a run of calls gets when its
    # grid has more than one block or it calls barrier_all or sync_all (and the last one always).
    # 1.11 against 0.80 us between kernels, for grids of 1 to 132 blocks, on one H200
    # (scripts/gpu/pdl_probe.cu, results/h200/one_gpu/pdl2.jsonl); eagerly it adds under 0.1 us.
    cooperative_launch_us: Latency = 0.31
    # A timed run of a generated program (`clockworks validate`): the time from the start event
    # to its first op and from its last op to the stop event (the graph launch itself, or the
    # host's first issue), per run, in graph and in eager mode; the progress word a host-driven
    # program writes before each op and after the last (a stream write to host-mapped memory):
    # its GPU-side cost and, eagerly, the host's time to issue it. 0 until fitted on measured runs
    # of generated programs.
    program_graph_us: Latency = 0.0
    program_eager_us: Latency = 0.0
    program_mark_us: Latency = 0.0
    program_mark_host_us: Latency = 0.0
    # Eagerly, how far ahead of the GPU the host is when the timed span starts: the GPU is still in
    # the barrier that aligns the ranks before the run while the host issues the first ops.
    program_host_lead_us: Latency = 0.0
    # An NVSHMEM program runs a rank's ops in one kernel: what each op that spreads over the
    # kernel's blocks adds there (its progress word and setting its blocks to work); 0 until fitted
    # on measured runs.
    program_step_us: Latency = 0.0
    # What a handoff the code generator plans between an NVSHMEM kernel's blocks costs
    # (`lowering.nvshmem_plan.plan_rank`, the plan the generated code follows): a grid-wide sync, or an
    # arrival counter whose last block goes on, before an op that needs other blocks' work. (Fitted
    # on the generated programs with a cost per block of the kernel and one for a fenced handoff as
    # well, both came out at their lower bound: neither is in the model.) 0 until fitted.
    program_sync_us: Latency = 0.0
    # What each op of an NVSHMEM program generated with host-mapped progress words adds (its
    # fences wait for the progress writes before them to cross PCIe; the words are in GPU memory
    # now, `lowering.Build.host_progress`): prices runs measured before the change. 0 until fitted.
    program_host_progress_us: Latency = 0.0
    # One thread block's rate for a reduce, copy or fill inside an NVSHMEM program's kernel, GB/s
    # of its destination's share per block (the code generator spreads the op over one block per
    # 64 KiB of what it moves, `lowering.nvshmem_blocks`): the op takes at least that share at this
    # rate, however little HBM or L2 it uses (`perf.simulate.Simulator._block_floor`). 0 (off)
    # unless a topology sets it: 38 GB/s measured on one H200 (scripts/fit_local_block_rate.py).
    nvshmem_local_block_GBs: _real(ge=0, le=MAX_GBS) = 0.0
    # The rate of the stand-in kernels a generated program runs for a compute op (they hash what it
    # reads and write what it writes with 64-bit integer arithmetic), GB/s of its reads and writes.
    program_compute_GBs: Rate = 1000.0
    # Each of those hash kernels ends with one 64-bit atomic add per warp on one word, which the
    # GPU serialises: the time of one, us (a warp of 32 threads per atomic; up to 1024 blocks of 256
    # threads, `lowering.local_blocks`). 0 until fitted.
    program_atomic_us: Latency = 0.0
    # Point-to-point: NCCL runs send/recv on up to 32 channels per peer (its init log on NV18); the
    # protocol and channels of a send follow NCCL's rules (perf/nccl_tuning.py).
    nccl_p2p_max_channels: Channels = 32
    # How much of the per-channel rate each kind of NCCL kernel reaches (they do different work per
    # byte: a reduction, a copy, a forward); 1.0 until calibrated.
    # (A file may list some kinds only: the others keep the default.)
    nccl_kind_efficiency: Annotated[dict[NcclKind, _real(ge=MIN_FRACTION, le=10)],
                                    AfterValidator(_kinds_default_to(1.0))] = Field(
        default_factory=lambda: _every_kind(1.0))
    # The fraction of a route's raw link bandwidth each kind reaches with all its channels (NVLink
    # packet overheads, synchronisation between steps); 1.0 until calibrated.
    nccl_kind_link_efficiency: Annotated[dict[NcclKind, Fraction], AfterValidator(_kinds_default_to(1.0))] = Field(
        default_factory=lambda: _every_kind(1.0))
    # Fixed cost each kind of NCCL kernel adds to its protocol's base latency (a broadcast's root
    # only sends; an all-reduce also reduces; an all-to-all also copies its own chunk); 0 until
    # calibrated.
    nccl_kind_base_us: Annotated[dict[NcclKind, Latency], AfterValidator(_kinds_default_to(0.0))] = Field(
        default_factory=lambda: _every_kind(0.0))
    # Data one way over an NVLink draws acknowledgements the other way: the fraction of a flow's
    # rate they take from the opposite direction (traffic both ways runs slower than one way);
    # 0 until calibrated.
    nvlink_reverse_share: _real(ge=0, le=1) = 0.0
    # The same for NVSHMEM puts and gets (stores and loads by the issuing threads, not NCCL's
    # channels): measured on 2 x H200, puts both ways at once move about 8% less per direction than
    # one way. 0 until calibrated.
    nvshmem_reverse_share: _real(ge=0, le=1) = 0.0
    # The fraction of a link each protocol's stores can use beyond the kind's own (LL's 8-byte
    # stores pay more packet overhead than Simple's bulk writes); 1.0 until calibrated.
    nccl_protocol_link_efficiency: PerProtocolFraction = PerProtocolFraction(LL=1.0, LL128=1.0, Simple=1.0)
    # One NCCL channel copying within a GPU, GB/s (an all-to-all's chunk a rank sends to itself);
    # 100 until calibrated.
    nccl_copy_channel_GBs: Rate = 100.0
    # Send/recv has no ring steps: its fixed cost per protocol, apart from the collectives' base.
    nccl_p2p_base_latency_us: PerProtocol = PerProtocol(LL=6.6, LL128=14.0, Simple=8.4)
    # An exchange over many channels (sends both ways at once, an all-to-all) does not reach its
    # per-channel rate at once: a channel moving one chunk (NCCL's Simple p2p step, 512 KiB over
    # NVLink) runs at this fraction of it, and the rate climbs with the chunks each channel moves,
    # log-linearly, to the full rate at 32 chunks (NCCL's largest part per channel). Measured on 2 x
    # H200 with 16 channels: 13 GB/s a channel at one chunk, 19.4 at 32; with one channel the rate is
    # flat, so one channel takes the full rate. 1.0 (no ramp) until calibrated.
    nccl_exchange_ramp: Fraction = 1.0
    # A ring collective's rank also moves its own chunk (nbytes / ranks) within its GPU: an
    # all-gather copies it into its output, a reduce-scatter and an all-reduce reduce into it and
    # write it out. That work runs on the channels beside the ring's steps and does not overlap them
    # fully: the share it adds, in time, is its bytes over this rate (GB/s), by kind. It is why a
    # ring's per-edge rate rises with the ranks (the own chunk shrinks): 2 x H200 runs an all-gather
    # at 272 GB/s an edge, 4 x H200 at 325, the same links. Kinds left out (and every kind until
    # calibrated) add nothing.
    nccl_chunk_GBs: dict[NcclKind, Rate] = Field(default_factory=dict)

    def step_us(self, transport: str, protocol: str) -> float:
        """NCCL's latency per ring step of `protocol` over `transport` (nvlink, pcie or net)."""
        return self.nccl_step_latency_us[transport][protocol]


def _year_zero(value: Any) -> Any:
    """Year 0000 is no date. Older pydantic-core releases read it and then fail outside validation
    (a plain ValueError, not a field error), so it is refused here as the date error it is."""
    if isinstance(value, str) and value.strip().startswith("0000-"):
        raise PydanticCustomError("date_parsing", "Input should be a valid date, year 0 is out of range")
    return value


class Provenance(_Frozen):
    """Where the numbers of a file come from: a datasheet, or a calibration run on a machine."""

    date: Annotated[datetime.date | None, BeforeValidator(_year_zero)] = None
    gpu: str | None = None
    driver: str | None = None
    cuda: str | None = None
    nccl: str | None = None
    nvshmem: str | None = None
    method: str | None = None
    note: str | None = None


# ----------------------------------------------------------------------------------- topology
class Topology(_Frozen):
    """A machine or a cluster: devices, links, per-op constants and where the numbers come from."""

    name: Identifier
    description: str = ""
    nodes: _int(ge=1, le=MAX_NODES) = Field(1, description="number of nodes; device.node ranges over 0..nodes-1")
    devices: tuple[Device, ...]
    links: tuple[Link, ...]
    constants: Constants = Constants()
    provenance: Provenance | None = None

    _index: dict[str, int] = PrivateAttr(default_factory=dict)
    # routing.py keeps its graph and routes here: the model is frozen, so they never go stale.
    _cache: dict[str, Any] = PrivateAttr(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _node_zero_by_default(cls, data: Any) -> Any:
        """In a one-node file, devices other than fabric switches may leave out `node: 0`."""
        if not isinstance(data, dict) or data.get("nodes", 1) != 1:
            return data
        if not isinstance(data.get("devices"), (list, tuple)):
            return data
        return dict(data, devices=[_on_node_zero(d) for d in data["devices"]])

    @model_validator(mode="after")
    def _consistent(self) -> Topology:
        problems: list[tuple[tuple[str | int, ...], str]] = []
        index = self._index  # a private attribute: each access goes through pydantic's __getattr__
        for i, dev in enumerate(self.devices):
            if dev.id in index:
                first = index[dev.id]
                problems.append((("devices", i, "id"), f"duplicate id {dev.id!r} (also devices[{first}])"))
                continue
            index[dev.id] = i
            if dev.kind not in FABRIC_KINDS and dev.node is None:
                problems.append((("devices", i, "node"), f"{dev.id} needs a node index (0..{self.nodes - 1})"))
            elif dev.node is not None and dev.node >= self.nodes:
                problems.append((("devices", i, "node"),
                                 f"node {dev.node}, but the topology has {self.nodes} node(s): 0..{self.nodes - 1}"))
        for i, link in enumerate(self.links):
            for end in ("a", "b"):
                name = getattr(link, end)
                if name not in index:
                    problems.append((("links", i, end), f"no device {name!r}{_suggest(name, list(index))}"))
            if link.a == link.b:
                problems.append((("links", i, "b"), f"a link joins two different devices, not {link.a} to itself"))
        problems += self._rank_order_problems()
        if problems:
            raise _Invalid(problems)
        return self

    def _rank_order_problems(self) -> list[tuple[tuple[str | int, ...], str]]:
        by_node: dict[int | None, list[tuple[int, Device]]] = {}
        for i, dev in enumerate(self.devices):
            if dev.kind == "gpu":
                by_node.setdefault(dev.node, []).append((i, dev))
        problems = []
        for node, members in by_node.items():
            orders = [dev.rank_order for _, dev in members if dev.rank_order is not None]
            if orders and (len(orders) != len(members) or len(set(orders)) != len(orders)):
                i = members[0][0]
                problems.append((("devices", i, "rank_order"),
                                 f"rank_order must be set on every GPU of node {node} or on none, without repeats"))
        return problems

    def device(self, device_id: str) -> Device:
        """The device named `device_id`; a TopologyError with a close match if there is none."""
        index = self.__pydantic_private__["_index"]  # not self._index: pydantic's __getattr__ is slow
        if device_id not in index:
            raise TopologyError(f"{self.name} has no device {device_id!r}{_suggest(device_id, list(index))}")
        return self.devices[index[device_id]]


def cache_of(topo: Topology) -> dict[str, Any]:
    """`topo._cache`, read directly: pydantic's __getattr__ for private attributes costs microseconds,
    and routing a 1,000-node cluster reads the cache hundreds of thousands of times."""
    return topo.__pydantic_private__["_cache"]


def _on_node_zero(device: Any) -> Any:
    # a kind that is a list or a mapping is not hashable: the Device model reports it, naming the field
    kind = device.get("kind") if isinstance(device, dict) else None
    if isinstance(device, dict) and "node" not in device and not (isinstance(kind, str) and kind in FABRIC_KINDS):
        return dict(device, node=0)
    if isinstance(device, Device) and device.node is None and device.kind not in FABRIC_KINDS:
        return device.model_copy(update={"node": 0})
    return device


# ----------------------------------------------------------------------------------- cluster template
class Fabric(_Frozen):
    """A rail-optimised fat tree: NIC r of every node connects to a leaf of rail r (a rail has
    ceil(nodes / nodes_per_leaf) leaves), and every leaf connects to every spine."""

    rails: _int(ge=1, le=MAX_RAILS) = Field(description="rails: NIC r of each node connects to rail r")
    nodes_per_leaf: _int(ge=1, le=MAX_NODES) = Field(32, description="nodes one leaf serves on its rail")
    spines: _int(ge=1, le=MAX_RAILS)
    leaf_model: str | None = None
    spine_model: str | None = None
    nic_link: LinkSpec = Field(description="NIC to leaf")
    uplink: LinkSpec = Field(description="leaf to each spine")


class ClusterTemplate(_Frozen):
    """`nodes` copies of the node topology `node` (device ids prefixed `n0.`, `n1.`, ...) on `fabric`."""

    name: Identifier
    description: str = ""
    nodes: _int(ge=1, le=MAX_NODES) = Field(2, description="default node count; `--nodes N` overrides it")
    node: str = Field(description="the node topology: a shipped name or a path relative to this file")
    fabric: Fabric
    constants: Constants | None = Field(None, description="default: the node topology's")
    provenance: Provenance | None = None


def expand(template: ClusterTemplate, node_topo: Topology, nodes: int | None = None) -> Topology:
    """The cluster `template` with `nodes` nodes (default: its own), each a copy of `node_topo`."""
    count = template.nodes if nodes is None else nodes
    fabric = template.fabric
    devices: list[Device] = []
    links: list[Link] = []
    for k in range(count):
        prefix = f"n{k}."
        devices += [d.model_copy(update={"id": prefix + d.id, "node": k}) for d in node_topo.devices]
        links += [link.model_copy(update={"a": prefix + link.a, "b": prefix + link.b}) for link in node_topo.links]
    leaves_per_rail = math.ceil(count / fabric.nodes_per_leaf)
    for rail in range(fabric.rails):
        devices += [Device(id=f"leaf{rail}.{j}", kind="ib_leaf", model=fabric.leaf_model)
                    for j in range(leaves_per_rail)]
    devices += [Device(id=f"spine{s}", kind="ib_spine", model=fabric.spine_model) for s in range(fabric.spines)]
    nic_link, uplink = fabric.nic_link.model_dump(), fabric.uplink.model_dump()
    for k in range(count):
        for nic in (d for d in node_topo.devices if d.kind == "nic" and d.rail is not None):
            links.append(Link(a=f"n{k}.{nic.id}", b=f"leaf{nic.rail}.{k // fabric.nodes_per_leaf}", **nic_link))
    for rail in range(fabric.rails):
        for j in range(leaves_per_rail):
            links += [Link(a=f"leaf{rail}.{j}", b=f"spine{s}", **uplink) for s in range(fabric.spines)]
    description = f"{count} x {template.description or node_topo.name}"
    topo = Topology(name=template.name, description=description, nodes=count, devices=tuple(devices),
                    links=tuple(links), constants=template.constants or node_topo.constants,
                    provenance=template.provenance or node_topo.provenance)
    topo._cache["template"] = template.name
    return topo


# ----------------------------------------------------------------------------------- loading
def shipped_topologies() -> list[str]:
    """Names of the topology files shipped with the package (`load_topology(name)` loads one)."""
    return sorted(path.stem for path in DATA_DIR.glob("*.yaml"))


def templates_for(node_name: str) -> list[str]:
    """Shipped cluster templates whose nodes are the topology `node_name`."""
    found = []
    for name in shipped_topologies():
        try:
            data = _read_yaml(DATA_DIR / f"{name}.yaml")
        except TopologyError:  # a broken file is reported when it is loaded, not in a hint
            continue
        if "fabric" in data and data.get("node") == node_name:
            found.append(name)
    return found


def _resolve(path_or_name: str | os.PathLike, base: Path | None = None) -> Path:
    path = Path(path_or_name)
    candidates = [base / path] if base is not None and not path.is_absolute() else []
    candidates.append(path)
    if path.parent == Path(".") and path.suffix in ("", ".yaml", ".yml"):
        candidates.append(DATA_DIR / f"{path.stem}.yaml")
    for candidate in candidates:
        try:
            if candidate.is_file():
                return candidate
        except (OSError, ValueError):  # a name too long, or with a NUL byte: no such file either
            continue
    names = shipped_topologies()
    try:
        what = "a folder" if path.is_dir() else "not a regular file" if path.exists() else None
    except (OSError, ValueError):
        what = None
    if what is not None:  # a folder, a device, a FIFO: never read it (a FIFO would block)
        raise TopologyError(f"{path_or_name}: {what}, not a topology file; give a YAML file or a shipped name "
                            f"({', '.join(names)})")
    raise TopologyError(f"{path_or_name}: no such file, and no shipped topology of that name"
                        f"{_suggest(path.stem, names)}; shipped: {', '.join(names)}")


def load_topology(path_or_name: str | os.PathLike, nodes: int | None = None) -> Topology:
    """Load and validate a topology file, or a shipped one by name (`"dgx-h100"`).

    A cluster template is expanded to `nodes` nodes (default: the template's `nodes`). Every
    problem raises TopologyError naming the file, the line, the field path and what is allowed.
    """
    path = _resolve(path_or_name)
    data = _read_yaml(path)
    if "fabric" not in data:
        data = with_library(data)
    if "fabric" in data:
        template = _validate(ClusterTemplate, data, path)
        if nodes is not None and not 1 <= nodes <= MAX_NODES:
            raise TopologyError(f"{path}: a cluster has 1 to {MAX_NODES:,} nodes, not {nodes}")
        node_topo = _load_node(template, path)
        _check_template(template, node_topo, path)
        _check_cluster_size(template, node_topo, nodes, path)
        try:
            return expand(template, node_topo, nodes)
        except ValidationError as exc:  # every part was valid alone: what is left is a clash between them
            raise TopologyError(f"{path}: the expanded cluster is not a valid topology: "
                                f"{describe_errors(exc, Topology, path, lines=False)}") from None
    topo = _validate(Topology, data, path)
    if nodes is not None and nodes != topo.nodes:
        hint = templates_for(topo.name)
        example = f"{hint[0]} --nodes {nodes}" if hint else "a file with a fabric: section"
        raise TopologyError(f"{path}: {topo.name} is a fixed {topo.nodes}-node topology; "
                            f"--nodes {nodes} needs a cluster template (e.g. {example})")
    return topo


def _load_node(template: ClusterTemplate, path: Path) -> Topology:
    """The node topology a template repeats: a one-node file, never a template (a template naming
    itself, or templates naming each other, would expand for ever)."""
    def problem(text: str) -> TopologyError:
        return TopologyError(f"{path}:{_yaml_lines(path)(('node',))}: node: {text}")

    try:
        node_path = _resolve(template.node, base=path.parent)
    except TopologyError as exc:
        raise problem(str(exc)) from None
    if node_path.resolve() == path.resolve():
        raise problem(f"{template.node!r} is this template itself; node names the one-node topology each node "
                      "repeats (e.g. node: dgx-h100)")
    data = with_library(_read_yaml(node_path))
    if "fabric" in data:
        shown = template.node if str(node_path) == template.node else f"{template.node} ({node_path})"
        raise problem(f"{shown} is a cluster template too; node names a one-node topology (e.g. node: dgx-h100), "
                      "not another template")
    return _validate(Topology, data, node_path)


def _check_template(template: ClusterTemplate, node_topo: Topology, path: Path) -> None:
    if node_topo.nodes != 1:
        raise TopologyError(f"{path}: node: {template.node} has {node_topo.nodes} nodes; a cluster template "
                            "repeats a one-node topology")
    for dev in node_topo.devices:
        if dev.kind == "nic" and dev.rail is not None and dev.rail >= template.fabric.rails:
            line = _yaml_lines(path)(("fabric", "rails"))
            raise TopologyError(f"{path}:{line}: fabric.rails: {template.node} has {dev.id} on rail {dev.rail}, but "
                                f"the fabric has {template.fabric.rails} rails (0..{template.fabric.rails - 1})")


def _check_cluster_size(template: ClusterTemplate, node_topo: Topology, nodes: int | None, path: Path) -> None:
    """Refuse, before building it, a cluster too large to load in reasonable time and memory."""
    fabric = template.fabric
    nics = sum(1 for d in node_topo.devices if d.kind == "nic" and d.rail is not None)
    per_node = len(node_topo.devices) + len(node_topo.links) + nics

    def parts_of(count: int) -> int:  # devices and links: nodes, then leaves with their uplinks, spines
        leaves = fabric.rails * math.ceil(count / fabric.nodes_per_leaf)
        return count * per_node + leaves * (1 + fabric.spines) + fabric.spines

    count = template.nodes if nodes is None else nodes
    parts = parts_of(count)
    if parts > MAX_CLUSTER_PARTS:
        low, high = 0, count  # the most nodes that fit
        while low < high:
            middle = (low + high + 1) // 2
            low, high = (middle, high) if parts_of(middle) <= MAX_CLUSTER_PARTS else (low, middle - 1)
        most = f"use at most {low:,} nodes" if low else "the fabric alone is too large: fewer rails or spines"
        source = f"{path}" if nodes is not None else f"{path}:{_yaml_lines(path)(('nodes',))}: nodes"
        raise TopologyError(f"{source}: {count:,} nodes of {template.node} make {parts:,} devices and links; at "
                            f"most {MAX_CLUSTER_PARTS:,} are supported (loading more takes minutes and gigabytes; "
                            f"a 1,000-node DGX H100 cluster has about 96,000): {most}")


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # libyaml's parser where installed
    """yaml.safe_load's loader, except that timestamps stay text (pydantic reads the date fields,
    so an impossible date such as 2026-13-45 is a field error with its line) and a value Python
    cannot hold (a 5,000-digit integer) is a YAML error at its line, not a crash."""

    def construct_object(self, node, deep=False):
        try:
            return super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except (ValueError, TypeError, OverflowError) as exc:
            raise yaml.constructor.ConstructorError(None, None, f"cannot read this value: {exc}",
                                                    node.start_mark) from None


_Loader.add_constructor("tag:yaml.org,2002:timestamp", _Loader.construct_yaml_str)


def _read_text(path: Path) -> str:
    """The file's text: UTF-8, and not larger than any topology needs."""
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise TopologyError(f"{path}: {size:,} bytes; a topology file is at most {MAX_FILE_BYTES // 2**20} MiB "
                                "(describe one node and expand it with a cluster template)")
        raw = path.read_bytes()
    except OSError as exc:
        raise TopologyError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise TopologyError(f"{path}:{line}: not UTF-8 text: byte 0x{raw[exc.start]:02x} at column {column} "
                            "(save the file as UTF-8)") from None


def _yaml_error(exc: yaml.YAMLError, path: Path) -> TopologyError:
    mark = getattr(exc, "problem_mark", None)
    where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
    problem = getattr(exc, "problem", None) or str(exc)
    return TopologyError(f"{where}: not valid YAML: {problem}")


def _check_shape(text: str, path: Path) -> None:
    """Refuse, before building anything, YAML nested deeper than a topology needs (100,000 `[`
    would exhaust the stack) or whose aliases expand to millions of values (a few lines of `*a`
    repeated can stand for billions)."""
    depth, total = 0, 0
    open_collections: list[tuple[str | None, int]] = []
    expanded: dict[str, int] = {}
    try:
        for event in yaml.parse(text, Loader=_Loader):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise TopologyError(f"{path}:{event.start_mark.line + 1}: nested more than {MAX_DEPTH} levels "
                                        "deep; a topology file needs a few (is a bracket left open?)")
                open_collections.append((event.anchor, total))
                total += 1
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
                anchor, start = open_collections.pop()
                if anchor is not None:
                    expanded[anchor] = total - start
            elif isinstance(event, yaml.ScalarEvent):
                total += 1
                if event.anchor is not None:
                    expanded[event.anchor] = 1
            elif isinstance(event, yaml.AliasEvent):
                total += expanded.get(event.anchor, 1)
            if total > MAX_YAML_NODES:
                raise TopologyError(f"{path}:{event.start_mark.line + 1}: more than {MAX_YAML_NODES:,} values "
                                    "(aliases expanded): larger than any machine description needs")
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, path) from None


def _read_yaml(path: Path) -> dict:
    text = _read_text(path)
    _check_shape(text, path)
    try:
        data = yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, path) from None
    except RecursionError:  # _check_shape bounds the depth; this is a last line of defence
        raise TopologyError(f"{path}: nested too deeply to read") from None
    if data is None:
        raise TopologyError(f"{path}: the file is empty; a topology has name, devices and links at the top")
    if not isinstance(data, dict):
        raise TopologyError(f"{path}: expected a mapping with name, devices and links at the top, "
                            f"got {type(data).__name__}")
    return data


def validate_document(data: dict, path: Path) -> Topology:
    """A topology file's contents (a dict) as a Topology, or a TopologyError naming `path`."""
    return _validate(Topology, data, path)


def _validate(model: type[BaseModel], data: dict, path: Path) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise TopologyError(describe_errors(exc, model, path)) from None


# ----------------------------------------------------------------------------------- error text
def describe_errors(exc: ValidationError, model: type[BaseModel], path: Path, limit: int = 10,
                    lines: bool = True) -> str:
    """`FILE:LINE: devices[3].kind: 'gpuu' is not one of gpu, nvswitch, ... (did you mean 'gpu'?)`,
    one line per problem (`lines=False`: without FILE:LINE, for data that is not the file's)."""
    lines_of = _yaml_lines(path) if lines else (lambda loc: None)
    found: list[tuple[tuple, str]] = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        cause = err.get("ctx", {}).get("error")
        if isinstance(cause, _Invalid):
            found += [(loc + sub, message) for sub, message in cause.problems]
        else:
            found.append((loc, _message(err, loc, model)))
    text = []
    for loc, message in found[:limit]:
        line = lines_of(loc)
        where = f"{path}:{line}" if line else str(path)
        field = _dotted(loc)
        text.append(f"{where}: {field + ': ' if field else ''}{message}")
    if len(found) > limit:
        text.append(f"... and {len(found) - limit} more problems")
    return "\n".join(text)


def _dotted(loc: tuple) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _show(value: object, width: int = 60) -> str:
    """repr(value), cut short: a message quotes what the file says, not a megabyte of it."""
    try:
        text = repr(value)
    except (ValueError, RecursionError):  # an integer too long to print, a structure too deep
        return f"a {type(value).__name__}"
    return text if len(text) <= width else text[:width] + "..."


# Why a bound is where it is, by what the field's name ends with (the last name in its path that
# matches): part of the message when a value is out of range.
_WHY = (("GBs_per_dir", "GB/s", "far beyond any real link"),
        ("GBs", "GB/s", "far beyond any real link or memory"),
        ("gbps", "Gb/s", "far beyond any real NIC"),
        ("_us", "us", "one second: no hop or fixed cost comes near it"),
        ("channels", "", "NCCL's own MAXCHANNELS is 32 or 64, by version"),
        ("kind_efficiency", "", "a factor on the per-channel rate; calibration fits 0.2 to 1.5"),
        ("tflops", "TFLOP/s", "far beyond any GPU"),
        ("efficiency", "", "a fraction of a rate"),
        ("share", "", "a fraction of a rate"),
        ("lanes", "", "no link bundles more"),
        ("sms", "", "no GPU has more"),
        ("hbm_GB", "GB", "no GPU holds more"),
        ("nodes", "", "more than any cluster"),
        ("node", "", "more nodes than any cluster"),
        ("rail", "", "no fabric has more rails"),
        ("rails", "", "no fabric has more rails"),
        ("spines", "", "no fabric has more spines"),
        ("nodes_per_leaf", "", "no switch has more ports"),
        ("rank_order", "", "no node has more GPUs"))


def _why(loc: tuple) -> tuple[str, str]:
    """(unit, why the bound) for the field at `loc`."""
    for part in reversed(loc):
        if isinstance(part, str):
            for suffix, unit, why in _WHY:
                if part.endswith(suffix):
                    return unit, why
    return "", ""


def _message(err: dict, loc: tuple, model: type[BaseModel]) -> str:
    kind, value, ctx = err["type"], err.get("input"), err.get("ctx", {})
    if kind == "literal_error":
        allowed = [choice.strip().strip("'") for choice in ctx.get("expected", "").replace(" or ", ", ").split(",")]
        return f"{_show(value)} is not one of {', '.join(allowed)}{_suggest(value, allowed)}"
    if kind == "extra_forbidden":
        fields = list(_model_at(model, loc[:-1]).model_fields)
        return f"unknown field {_show(loc[-1])}{_suggest(loc[-1], fields)}; allowed: {', '.join(fields)}"
    if kind == "missing":
        return "missing (required)"
    bounds = {"greater_than": ("gt", ">"), "greater_than_equal": ("ge", ">="), "less_than": ("lt", "<"),
              "less_than_equal": ("le", "<=")}
    if kind in bounds:
        name, sign = bounds[kind]
        unit, why = _why(loc)
        limit = ctx.get(name)
        text = f"must be {sign} {limit:g}{' ' + unit if unit and limit else ''}, got {_show(value)}"
        return text + (f" ({why})" if why and kind.startswith("less") else "")
    if kind == "finite_number":
        return f"must be a finite number, got {_show(value)}"
    if kind.startswith("date"):
        detail = err["msg"].split(", ", 1)[-1]
        return f"not a date ({detail}), got {_show(value)}; write YYYY-MM-DD, e.g. 2026-11-21"
    if kind == "string_pattern_mismatch":
        return f"{_show(value)} is not a valid id: letters, digits, '_', '.' and '-', starting with a letter or '_'"
    message = err["msg"].removeprefix("Value error, ").replace("Input should be ", "must be ", 1)
    if isinstance(value, (dict, list)):
        return message
    return f"{message} ({_show(value)})" if ", got " in message else f"{message}, got {_show(value)}"


def _model_at(model: type[BaseModel], loc: tuple) -> type[BaseModel]:
    """The model class that validates the value at `loc` inside `model` (tuples and Optionals unwrapped)."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        current = current.model_fields[part].annotation
        while not (isinstance(current, type) and issubclass(current, BaseModel)):
            args = [a for a in getattr(current, "__args__", ()) if a is not type(None) and a is not Ellipsis]
            current = args[0]
    return current


def _yaml_lines(path: Path):
    """A function from a field path to the 1-based line in `path` where that field is written."""
    try:
        root = yaml.compose(_read_text(path), Loader=_Loader)
    except (yaml.YAMLError, TopologyError, RecursionError):
        root = None

    def line_of(loc: tuple) -> int | None:
        node, line = root, None
        for part in loc:
            if isinstance(node, yaml.MappingNode):
                node = next((v for k, v in node.value if k.value == part), None)
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
                node = node.value[part]
            else:
                node = None
            if node is None:
                break
            line = node.start_mark.line + 1
        return line if line is not None else None

    return line_of
