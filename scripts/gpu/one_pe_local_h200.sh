#!/bin/bash
# What a kernel's reduce costs against a copy of the same destination, on one H200 (one PE): `validate --np 1
# --calls 20 --between alternate --fuse-calls` of scripts/gpu/one_pe_local.py with LOCAL=copy and LOCAL=reduce,
# 1 KiB to 256 KiB, two rounds in swapped order, every output checked bit for bit. Run from the repository root.
#   WHEELS=DIR  install the wheels in DIR first (what the machine's Python lacks)
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
set -uo pipefail
START=$(date +%s)
OUT=${OUT:-/tmp/cw-one-pe-local}
mkdir -p "$OUT"
. scripts/gpu/env.sh  # multicast off, the wheels, PYTHONPATH
W=/tmp/cw-one-pe-local-work; mkdir -p $W
rc_all=0
for round in 1 2; do
    if [ $round = 1 ]; then order="copy reduce"; else order="reduce copy"; fi
    for local in $order; do
        name=local_${local}_r$round
        timeout ${ONE_MAX:-200} python3 -m clockworks_dist.cli validate scripts/gpu/one_pe_local.py --np 1 \
            --backend nvshmem --param LOCAL=$local --sizes ${SIZES:-1KiB,4KiB,8KiB,16KiB,32KiB,64KiB,128KiB,256KiB} \
            --calls 20 --between alternate --fuse-calls --iters 10 --timeout 60 --out $W/$name > $W/$name.log 2>&1
        rc=$?; [ $rc = 0 ] || rc_all=$rc
        echo "$name rc=$rc $(( $(date +%s) - START )) s"
        cp $W/$name.log $W/$name/ 2>/dev/null
        tar czf "$OUT/$name.tgz" -C $W --exclude=build --exclude=runs $name
        grep -h "graph" $W/$name.log | head -12
    done
done
exit $rc_all
