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
    proto_base_us: dict = field(default_factory=lambda: {"LL": 3.0, "LL128": 4.5, "Simple": 6.0})
    proto_step_us: dict = field(default_factory=lambda: {"LL": 0.6, "LL128": 1.0, "Simple": 1.6})
    channel_GBs: dict = field(default_factory=lambda: {"LL": 6.0, "LL128": 12.0, "Simple": 15.0})
    max_channels: int = 24  # NCCL's channel count on NVLink-4 (its algorithm choice printout)
    channel_bytes: float = 4096.0  # NCCL adds a channel per this many bytes of a step
    ll_max_bytes: float = 1048576.0  # NCCL stops considering LL above this size
    nvshmem_issue_us: float = 1.0
    nvshmem_latency_us: float = 0.77  # one-way signal over NVLink (shared/reference)
    nvshmem_signal_us: float = 0.3
    nvshmem_block_GBs: float = 40.0  # one thread block issuing puts (shared/reference: 37-42 GB/s)
    nvshmem_blocks: int = 1
    barrier_us: float = 2.0  # per dissemination round
    compute_us: float = 5.0  # an opaque compute kernel, beyond its memory traffic

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
