"""How a schedule becomes a program: the steps between the schedule the user wrote and the program
a backend emits, decided once here and read by the emitters, the simulator's program model and the
tuner.

- `repeat`: K back-to-back calls as one schedule (signal epochs, the calls' separation), and where
  each call starts (a kernel per call);
- `packets`: put_signals sent as flag-in-data packets, the rewritten schedule the checker verifies;
- `nvshmem_plan`: the NVSHMEM block plan (which blocks run each op, what each waits for, which puts
  go on the copy engine);
- `blocks`: how generated code spreads an op's work over thread blocks.
"""

from __future__ import annotations

from .blocks import (  # noqa: F401  (the block rules, read by the emitters and the simulator)
    LOCAL_MAX_BLOCKS, LOCAL_THREADS, NVSHMEM_BLOCK_BYTES, NVSHMEM_MAX_BLOCKS, local_blocks, nvshmem_blocks,
)
