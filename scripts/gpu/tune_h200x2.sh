#!/bin/bash
# clockworks tune, measured, on a machine with 2 GPUs (2 x H200), one call. Run from the repository root.
#   1. clockworks tune on the all-reduce family, measured (top 2 per size, bit-exact check on, NCCL
#      beside it);
#   2. clockworks validate --backend cupy on the ring all-reduce (the cupy executor through validate).
# Results under $OUT: tune/, cupy_validate/ (small files), each packed as a .tgz as it ends.
#   WHEELS=DIR  install the wheels in DIR first (what the machine's Python lacks)
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
set -uo pipefail
START=$(date +%s)
OUT=${OUT:-/tmp/cw-issue11}
mkdir -p "$OUT"
. scripts/gpu/env.sh  # multicast off, the wheels, PYTHONPATH
W=/tmp/cw-work; mkdir -p $W
pack() { tar czf "$OUT/$1.tgz" -C "$W" --exclude=build --exclude='build_*' --exclude='*.bin' --exclude='*.pkl' "$1"; }
timeout ${TUNE_MAX:-220} python3 -m clockworks_dist.cli tune protocols/nvshmem_allreduce_family.py -t h200x2-nv18 \
    --np 2 --sizes ${TUNE_SIZES:-8KiB,64KiB,256KiB,1MiB,256MiB,1GiB} --top 2 --out $W/tune > $W/tune.log 2>&1
echo "tune rc=$? $(( $(date +%s) - START )) s"; cp $W/tune.log $W/tune/ 2>/dev/null
find $W/tune -name '*.link' -delete; pack tune
timeout 120 python3 -m clockworks_dist.cli validate protocols/ring_allreduce.py --np 2 --backend cupy \
    --sizes 1KiB,1MiB,64MiB --iters 10 --out $W/cupy_validate > $W/cupy_validate.log 2>&1
echo "cupy validate rc=$? $(( $(date +%s) - START )) s"; cp $W/cupy_validate.log $W/cupy_validate/ 2>/dev/null
pack cupy_validate
tail -n 3 $W/tune.log $W/cupy_validate.log
