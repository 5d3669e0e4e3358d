#!/bin/bash
# A kernel per call against one kernel for the K calls (`validate --calls 20` with and without
# --fuse-calls), side by side in one call on a machine with 2 GPUs (2 x H200): the all-reduce family's
# packet one-shot (alternate) and two-shot (nothing between), 1 KiB to 1 MiB, NCCL's own all-reduce
# beside the first. A kernel per call is what a library call launches, so its time per call is the
# one to compare with NCCL's graph of K kernels. `pdl` in place of percall: the same kernels, the plain
# launches with programmatic dependent launch (CW_NV_PDL=1; off by default: no gain measured on one PE).
# Run from the repository root.
# Results under $OUT: calls_<variant>.tgz (results.json, results.md, results.png, the log).
#   WHEELS=DIR  install the wheels in DIR first (what the machine's Python lacks)
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
set -uo pipefail
START=$(date +%s)
OUT=${OUT:-/tmp/cw-call-kernels}
mkdir -p "$OUT"
. scripts/gpu/env.sh  # multicast off, the wheels, PYTHONPATH
W=/tmp/cw-call-kernels-work; mkdir -p $W
FIRST=${FIRST:-oneshot:alternate:percall}
for spec in ${SPECS:-oneshot:alternate:percall oneshot:alternate:pdl oneshot:alternate:fused twoshot:none:percall twoshot:none:fused}; do
    IFS=: read -r algo between kernels <<< "$spec"
    name=calls_${algo}_${between}_${kernels}
    nccl=--no-nccl; [ "$spec" = "$FIRST" ] && nccl=
    fuse=; [ "$kernels" = fused ] && fuse=--fuse-calls
    if [ "$kernels" = pdl ]; then export CW_NV_PDL=1; else unset CW_NV_PDL; fi
    timeout ${ONE_MAX:-200} python3 -m clockworks_dist.cli validate protocols/nvshmem_allreduce_family.py \
        --param ALGO=$algo --np 2 --backend nvshmem --sizes ${SIZES:-1KiB,8KiB,64KiB,256KiB,1MiB} --calls 20 \
        --between $between --packets ${PACKETS:-32KiB} $fuse --iters 10 --timeout 60 $nccl --out $W/$name \
        > $W/$name.log 2>&1
    echo "$name rc=$? $(( $(date +%s) - START )) s"; cp $W/$name.log $W/$name/ 2>/dev/null
    tar czf "$OUT/$name.tgz" -C $W --exclude=build --exclude=runs $name
    tail -n 9 $W/$name.log
done
