#!/bin/bash
# Progress words in GPU memory vs host-mapped, on 2 x H200, one call (repository root): the timing
# side by side (scripts/gpu/progress_ab.py), then the seeded NVSHMEM hang forced through
# `validate --no-check`, which must still name each rank's op and leave nothing running.
#   WHEELS=DIR  install the wheels in DIR first (what the machine's Python lacks)
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
set -uo pipefail
OUT=${OUT:-/tmp/cw-progress}; mkdir -p "$OUT"
. scripts/gpu/env.sh  # multicast off, the wheels, PYTHONPATH
W=/tmp/cw-progress-work; mkdir -p $W/ab
SECONDS=0
timeout 150 python3 -m clockworks_dist.cli validate protocols/runtime/signal_to_wrong_pe.py --np 2 --backend nvshmem \
    --no-check --no-nccl --iters 3 --timeout 10 --out $W/fault > $OUT/fault.txt 2>&1
echo "fault rc=$? ${SECONDS} s; left running: $(pgrep -fc "$W/fault" || true)" | tee -a $OUT/fault.txt
timeout 200 python3 scripts/gpu/progress_ab.py --out $W/ab --rounds 2 > $OUT/ab.log 2>&1; echo "ab rc=$? ${SECONDS} s"
cp $W/ab/progress_ab.* $OUT/ 2>/dev/null; cat $OUT/fault.txt; cat $OUT/progress_ab.md 2>/dev/null || tail -20 $OUT/ab.log
