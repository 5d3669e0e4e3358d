#!/bin/bash
# clockworks tune, measured, on a machine with 2 GPUs (2 x H200) for the NVSHMEM families of
# all-reduce, all-gather, reduce-scatter and all-to-all. Run from the repository root.
# Per family two tunes: small sizes as 20 back-to-back calls per run (the cheapest separator the
# checker verifies; each variant also with --packets 32KiB), large sizes as one call per run.
# The best of each lowering is measured (--top 1), bit-exact, with NCCL's own collective beside it.
# Results under $OUT: tune_<family>.tgz (tune.json, tune.md, tune_memory.json, each measured
# variant's validate results, the logs).
#   FAMILIES="allreduce_family ..."  which protocols/nvshmem_<family>.py (default: all four)
#   SMALL=LIST LARGE=LIST            the sizes (defaults below)
#   WHEELS=DIR  install the wheels in DIR first (what the machine's Python lacks)
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
set -uo pipefail
START=$(date +%s)
OUT=${OUT:-/tmp/cw-tune-all}
mkdir -p "$OUT"
. scripts/gpu/env.sh  # multicast off, the wheels, PYTHONPATH
export CLOCKWORKS_CACHE=/tmp/cw-cache  # NCCL's benchmark built once for every validate call
W=/tmp/cw-tune-all-work; mkdir -p $W
for family in ${FAMILIES:-allreduce_family allgather_family reduce_scatter_family alltoall_dispatch}; do
    f=protocols/nvshmem_$family.py
    timeout ${SMALL_MAX:-240} python3 -m clockworks_dist.cli tune $f -t h200x2-nv18 --np 2 \
        --sizes ${SMALL:-1KiB,8KiB,64KiB,256KiB,1MiB} --calls 20 --packets 32KiB --top 1 \
        --out $W/$family/small > $W/$family.small.log 2>&1
    echo "$family small rc=$? $(( $(date +%s) - START )) s"
    timeout ${LARGE_MAX:-150} python3 -m clockworks_dist.cli tune $f -t h200x2-nv18 --np 2 \
        --sizes ${LARGE:-16MiB,256MiB,1GiB} --top 1 --out $W/$family/large > $W/$family.large.log 2>&1
    echo "$family large rc=$? $(( $(date +%s) - START )) s"
    cp $W/$family.*.log $W/$family/ 2>/dev/null
    find $W/$family -name '*.link' -delete
    tar czf "$OUT/tune_$family.tgz" -C $W --exclude=build --exclude='build_*' --exclude='*.bin' --exclude='*.pkl' \
        --exclude=runs $family
    grep -h "Measured winner" $W/$family/*/tune.md
done
echo "done $(( $(date +%s) - START )) s"
