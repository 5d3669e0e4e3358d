"""The per-op constants of the performance model, with defaults and their sources.

Calibration (`clockworks calibrate`) fits them on a real machine and stores them in the topology
file's `constants` section; these defaults are a starting point, not measurements of any machine.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields


@dataclass
class Constants:
    launch_us: float = 2.5  # GPU-side start of a kernel launched from a CUDA graph
    host_issue_us: float = 12.0  # host cost of one launch when launches are issued eagerly
    host_issue_p2p_us: float = 12.0  # ... of one NCCL send/recv group (no tuning on the host)
    eager_launch_us: float = 0.5  # what an eagerly launched kernel costs the GPU beyond a graph's
    proto_base_us: dict = field(default_factory=lambda: {"LL": 3.0, "LL128": 4.5, "Simple": 6.0})
    proto_step_us: dict = field(default_factory=lambda: {"LL": 0.6, "LL128": 1.0, "Simple": 1.6})
    channel_GBs: dict = field(default_factory=lambda: {"LL": 6.0, "LL128": 12.0, "Simple": 15.0})
    max_channels: int = 24  # NCCL's channel count on NVLink-4 (its algorithm choice printout)
    nvshmem_issue_us: float = 1.0
    nvshmem_latency_us: float = 0.77  # one-way signal over NVLink (shared/reference)
    nvshmem_signal_us: float = 0.3
    nvshmem_block_GBs: float = 40.0  # one thread block issuing puts (shared/reference: 37-42 GB/s)
    nvshmem_blocks: int = 1
    nvshmem_link_efficiency: float = 1.0
    barrier_us: float = 2.0  # per dissemination round
    compute_us: float = 5.0  # an opaque compute kernel, beyond its memory traffic

    p2p_max_channels: int = 32
    kind_efficiency: dict = field(default_factory=lambda: {
        "all_reduce": 1.0, "all_gather": 1.0, "reduce_scatter": 1.0, "broadcast": 1.0, "reduce_to": 1.0, "all_to_all": 1.0, "p2p": 1.0})
    kind_link_efficiency: dict = field(default_factory=lambda: {
        "all_reduce": 1.0, "all_gather": 1.0, "reduce_scatter": 1.0, "broadcast": 1.0, "reduce_to": 1.0, "all_to_all": 1.0, "p2p": 1.0})
    kind_base_us: dict = field(default_factory=lambda: {
        "all_reduce": 0.0, "all_gather": 0.0, "reduce_scatter": 0.0, "broadcast": 0.0, "reduce_to": 0.0, "all_to_all": 0.0, "p2p": 0.0})
    p2p_base_us: dict = field(default_factory=lambda: {"LL": 3.0, "LL128": 4.5, "Simple": 6.0})
    # NCCL_MAX_NCHANNELS of a run: caps the channels a call uses, not NCCL's choice of protocol
    # (its tuning tables are built for the full channel count).
    channel_cap: int | None = None
    nvlink_reverse_share: float = 0.0  # a flow's acknowledgement load on the opposite NVLink direction
    copy_channel_GBs: float = 100.0  # one NCCL channel copying within a GPU (a send to itself)
    proto_link_efficiency: dict = field(default_factory=lambda: {"LL": 1.0, "LL128": 1.0, "Simple": 1.0})
    step_by_transport: dict = field(default_factory=dict)  # nvlink|pcie|net -> per-protocol step latency

    @classmethod
    def from_topology(cls, tc) -> "Constants":
        """The simulator's view of a topology file's `constants` section."""
        steps = tc.nccl_step_latency_us
        return cls(
            launch_us=tc.graph_launch_us, host_issue_us=tc.kernel_launch_us, eager_launch_us=tc.eager_launch_us,
            host_issue_p2p_us=tc.p2p_launch_us,
            proto_base_us=tc.nccl_base_latency_us.model_dump(), proto_step_us=steps.nvlink.model_dump(),
            channel_GBs=tc.nccl_channel_GBs.model_dump(), max_channels=tc.nccl_max_channels,
            nvshmem_issue_us=tc.nvshmem_put_latency_us, nvshmem_latency_us=tc.nvshmem_signal_latency_us,
            nvshmem_signal_us=0.0, nvshmem_block_GBs=tc.nvshmem_block_GBs,
            nvshmem_link_efficiency=tc.nvshmem_link_efficiency, barrier_us=tc.barrier_us,
            compute_us=tc.compute_us, p2p_max_channels=tc.nccl_p2p_max_channels,
            kind_base_us={**cls().kind_base_us, **tc.nccl_kind_base_us},
            nvlink_reverse_share=tc.nvlink_reverse_share, copy_channel_GBs=tc.nccl_copy_channel_GBs,
            proto_link_efficiency=tc.nccl_protocol_link_efficiency.model_dump(),
            p2p_base_us=tc.nccl_p2p_base_latency_us.model_dump(),
            kind_efficiency={**cls().kind_efficiency, **tc.nccl_kind_efficiency},
            kind_link_efficiency={**cls().kind_link_efficiency, **tc.nccl_kind_link_efficiency},
            step_by_transport={"nvlink": steps.nvlink.model_dump(), "pcie": steps.pcie.model_dump(),
                               "net": steps.net.model_dump()})

    def topology_fields(self) -> dict:
        """The fitted values, as fields of a topology file's `constants` section."""
        steps = dict(self.step_by_transport) or {"nvlink": dict(self.proto_step_us)}
        steps["nvlink"] = dict(self.proto_step_us)
        return {
            "graph_launch_us": self.launch_us, "kernel_launch_us": self.host_issue_us,
            "eager_launch_us": self.eager_launch_us, "p2p_launch_us": self.host_issue_p2p_us,
            "nccl_base_latency_us": dict(self.proto_base_us), "nccl_step_latency_us": steps,
            "nccl_channel_GBs": dict(self.channel_GBs), "nccl_max_channels": int(self.max_channels),
            "nvshmem_put_latency_us": self.nvshmem_issue_us, "nvshmem_signal_latency_us": self.nvshmem_latency_us,
            "nvshmem_block_GBs": self.nvshmem_block_GBs, "nvshmem_link_efficiency": self.nvshmem_link_efficiency, "barrier_us": self.barrier_us, "compute_us": self.compute_us,
            "nccl_p2p_max_channels": int(self.p2p_max_channels),
            "nccl_kind_efficiency": dict(self.kind_efficiency),
            "nccl_kind_link_efficiency": dict(self.kind_link_efficiency),
            "nccl_kind_base_us": dict(self.kind_base_us), "nvlink_reverse_share": self.nvlink_reverse_share,
            "nccl_copy_channel_GBs": self.copy_channel_GBs,
            "nccl_protocol_link_efficiency": dict(self.proto_link_efficiency),
            "nccl_p2p_base_latency_us": dict(self.p2p_base_us),
        }

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict | None) -> "Constants":
        known = {f.name for f in fields(cls)}
        base = cls()
        for key, value in (data or {}).items():
            if key in known:
                current = getattr(base, key)
                if isinstance(current, dict):
                    merged = dict(current)
                    merged.update(value)
                    value = merged
                setattr(base, key, value)
        return base
