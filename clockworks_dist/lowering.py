"""How generated code spreads an op's work, shared by the code generator and the predictor so that
both describe the same program.

The NVSHMEM backend runs each rank's ops in one cooperative kernel; an op that moves B bytes takes
one thread block per `NVSHMEM_BLOCK_BYTES` of them, at least one and at most `NVSHMEM_MAX_BLOCKS`
(one per SM of an H200). A put or get then moves its bytes at up to that many blocks' rate.
"""

from __future__ import annotations

NVSHMEM_BLOCK_BYTES = 64 * 1024  # an op takes one more block per this many bytes ...
NVSHMEM_MAX_BLOCKS = 132  # ... up to one block per SM of an H200


def nvshmem_blocks(nbytes: float) -> int:
    """The thread blocks a generated NVSHMEM op of `nbytes` bytes is spread over."""
    return max(1, min(NVSHMEM_MAX_BLOCKS, -(-int(nbytes) // NVSHMEM_BLOCK_BYTES)))
