"""How generated code spreads an op's work, shared by the code generator and the predictor so that
both describe the same program.

A host-driven program's kernels (reduce, fill, a compute op's stand-in) take `local_blocks` blocks
of LOCAL_THREADS threads, as support.cuh's `cw_grid(n, 256)` launches them.

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


# A put_signal sent as packets, and a reduce that reads packets in place (`lowering.packets`), take one
# block per this many bytes of payload (1,024 packets: two a thread of a 512-thread block), at most
# NVSHMEM_MAX_BLOCKS: a packet is one 16-byte store or load whose flag the reader polls, so what bounds
# it is how many round trips each thread makes, not the blocks' rate (a hand-written flag-in-data
# one-shot on 2 x H200 was fastest with about two packets a thread from 8 KiB to 256 KiB:
# reference/h200x2_allreduce_anchors.md).
PACKET_BLOCK_BYTES = 8 * 1024


def packet_blocks(payload: float) -> int:
    """The thread blocks a packet op of `payload` bytes of payload is spread over."""
    return max(1, min(NVSHMEM_MAX_BLOCKS, -(-int(payload) // PACKET_BLOCK_BYTES)))


LOCAL_THREADS = 256  # threads a block of a host-driven program's local kernel
LOCAL_MAX_BLOCKS = 1024  # support.cuh's cw_grid: at most this many blocks, each looping over the rest


def local_blocks(elements: int) -> int:
    """The blocks of a host-driven program's local kernel over `elements` elements (`cw_grid`)."""
    return max(1, min(LOCAL_MAX_BLOCKS, -(-int(elements) // LOCAL_THREADS)))
