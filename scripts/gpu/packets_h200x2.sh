#!/bin/bash
# Flag-in-data packets (`--packets`) against separate signals, side by side in one call on a machine
# with 2 GPUs (2 x H200): the all-reduce family timed per call over 20 back-to-back calls, one-shot
# with two copies by call parity (alternate) and two-shot with nothing between, each with and without
# packets, 8 KiB to 1 MiB, NCCL's own all-reduce beside the first. Run from the repository root.
# Results under $OUT: packets_<variant>.tgz (results.json, results.md, results.png, the log).
#   WHEELS=DIR  install the wheels in DIR first (what the machine's Python lacks)
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
set -uo pipefail
START=$(date +%s)
OUT=${OUT:-/tmp/cw-packets}
mkdir -p "$OUT"
. scripts/gpu/env.sh  # multicast off, the wheels, PYTHONPATH
W=/tmp/cw-packets-work; mkdir -p $W
for spec in ${SPECS:-oneshot:alternate:256KiB oneshot:alternate:0 twoshot:none:256KiB twoshot:none:0}; do
    IFS=: read -r algo between packets <<< "$spec"
    name=packets_${algo}_${between}_${packets}
    nccl=--no-nccl; [ "$spec" = "${FIRST:-oneshot:alternate:256KiB}" ] && nccl=
    timeout ${ONE_MAX:-200} python3 -m clockworks_dist.cli validate protocols/nvshmem_allreduce_family.py \
        --param ALGO=$algo --np 2 --backend nvshmem --sizes ${SIZES:-8KiB,64KiB,256KiB,1MiB} --calls 20 \
        --between $between --packets $packets --iters 10 --timeout 60 $nccl --out $W/$name > $W/$name.log 2>&1
    echo "$name rc=$? $(( $(date +%s) - START )) s"; cp $W/$name.log $W/$name/ 2>/dev/null
    tar czf "$OUT/$name.tgz" -C $W --exclude=build --exclude=runs $name
    tail -n 9 $W/$name.log
done
