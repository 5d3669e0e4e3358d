#!/bin/bash
# One PE on one GPU (a machine with one H200): `validate --np 1 --calls 20` of scripts/gpu/one_pe_calls.py
# (a self put_signal, its wait and a copy), a kernel per call against one kernel for the 20 calls,
# at 1 KiB and 64 KiB (one block: the calls before the last launched plainly; and once more with every
# launch cooperative, CW_NV_ALWAYS_COOPERATIVE=1; and once more with the plain launches with
# programmatic dependent launch, CW_NV_PDL=1) and 1 MiB (16 blocks: every kernel cooperative),
# eagerly and in a CUDA graph, every output checked bit for bit. What it shows: that plain and cooperative launches of generated NVSHMEM kernels run and give the checker's
# values on the hardware, and what a launch per call costs there (pdl against percall: what PDL saves
# between the plain launches). Run from the repository root.
#   WHEELS=DIR  install the wheels in DIR first (what the machine's Python lacks)
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
set -uo pipefail
START=$(date +%s)
OUT=${OUT:-/tmp/cw-one-pe}
mkdir -p "$OUT"
. scripts/gpu/env.sh  # multicast off, the wheels, PYTHONPATH
W=/tmp/cw-one-pe-work; mkdir -p $W
rc_all=0
for spec in ${SPECS:-percall:alternate pdl:alternate cooperative:alternate fused:alternate percall:sync}; do
    IFS=: read -r kernels between <<< "$spec"
    name=one_pe_${kernels}_${between}
    fuse=; [ "$kernels" = fused ] && fuse=--fuse-calls
    # cooperative: the same kernel per call, every one launched cooperatively (what plain launches save)
    if [ "$kernels" = cooperative ]; then export CW_NV_ALWAYS_COOPERATIVE=1; else unset CW_NV_ALWAYS_COOPERATIVE; fi
    # pdl: the same kernel per call, the plain launches with programmatic dependent launch (what PDL saves)
    if [ "$kernels" = pdl ]; then export CW_NV_PDL=1; else unset CW_NV_PDL; fi
    timeout ${ONE_MAX:-200} python3 -m clockworks_dist.cli validate scripts/gpu/one_pe_calls.py --np 1 \
        --backend nvshmem --sizes 1KiB,64KiB,1MiB --calls 20 --between $between $fuse --iters 10 --timeout 60 \
        --out $W/$name > $W/$name.log 2>&1
    rc=$?; [ $rc = 0 ] || rc_all=$rc
    echo "$name rc=$rc $(( $(date +%s) - START )) s"
    cp $W/$name.log $W/$name/ 2>/dev/null
    grep -c "plain\|cw_nv_launch" $W/$name/build/*/*.cu 2>/dev/null | head -3
    tar czf "$OUT/$name.tgz" -C $W --exclude=build --exclude=runs $name
    tail -n 8 $W/$name.log
done
exit $rc_all
