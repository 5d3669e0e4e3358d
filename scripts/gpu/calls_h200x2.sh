#!/bin/bash
# `clockworks validate --calls 20` on a machine with 2 GPUs (2 x H200), one call: the all-reduce family
# timed per call over 20 back-to-back calls (epoch signal words, no reset between calls), one-shot
# with a sync_all between calls and two-shot with nothing between (what the checker verifies for
# each), 8 KiB to 1 MiB, NCCL's own all-reduce beside them. Run from the repository root.
# Results under $OUT: calls_<variant>.tgz (results.json, results.md, results.png, the log).
#   WHEELS=DIR  install the wheels in DIR first (what the machine's Python lacks)
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
set -uo pipefail
START=$(date +%s)
OUT=${OUT:-/tmp/cw-calls}
mkdir -p "$OUT"
. scripts/gpu/env.sh  # multicast off, the wheels, PYTHONPATH
W=/tmp/cw-calls-work; mkdir -p $W
for spec in oneshot:sync twoshot:none; do
    algo=${spec%%:*} between=${spec##*:}; name=calls_${algo}_${between}
    timeout ${ONE_MAX:-200} python3 -m clockworks_dist.cli validate protocols/nvshmem_allreduce_family.py \
        --param ALGO=$algo --np 2 --backend nvshmem --sizes ${SIZES:-8KiB,64KiB,256KiB,1MiB} --calls 20 \
        --between $between --iters 10 --timeout 60 --out $W/$name > $W/$name.log 2>&1
    echo "$name rc=$? $(( $(date +%s) - START )) s"; cp $W/$name.log $W/$name/ 2>/dev/null
    tar czf "$OUT/$name.tgz" -C $W --exclude=build --exclude=runs $name
    tail -n 9 $W/$name.log
done
