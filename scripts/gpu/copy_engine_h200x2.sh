#!/bin/bash
# Puts on the copy engine over NVLink, on a machine with 2 GPUs (2 x H200). Run from the repository root.
#   1. protocols/nvshmem_put_bandwidth.py --np 2, 1 MiB to 1 GiB (both PEs put at once, one put_signal
#      each): the kernel's blocks against --copy-engine 1MiB, two rounds in swapped order; the generated
#      put bandwidth per size (the target: >= 380 GB/s at 1 GiB; the copy engine alone 396).
#   2. clockworks tune of the four NVSHMEM families at 16 MiB, 256 MiB and 1 GiB, each variant also with
#      --copy-engine 16MiB (--top 1 of each lowering, bit-exact, NCCL beside it): where it wins.
# Results under $OUT: one .tgz per step (results.json/.md, tune.json/.md, tune_memory.json, the logs).
#   STEPS="put tune"  which steps (default both); FAMILIES as in tune_all_h200x2.sh
#   WHEELS=DIR  install the wheels in DIR first (what the machine's Python lacks)
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
set -uo pipefail
START=$(date +%s)
OUT=${OUT:-/tmp/cw-copy-engine-x2}
mkdir -p "$OUT"
. scripts/gpu/env.sh  # multicast off, the wheels, PYTHONPATH
export CLOCKWORKS_CACHE=/tmp/cw-cache  # NCCL's benchmark built once for every validate call
W=/tmp/cw-ce-x2-work; mkdir -p $W
rc_all=0
for step in ${STEPS:-put tune}; do
    if [ $step = put ]; then
        for round in 1 2; do
            if [ $round = 1 ]; then order="blocks engine"; else order="engine blocks"; fi
            for how in $order; do
                ce=; [ $how = engine ] && ce="--copy-engine 1MiB"
                name=put_${how}_r$round
                timeout ${PUT_MAX:-200} python3 -m clockworks_dist.cli validate protocols/nvshmem_put_bandwidth.py \
                    --np 2 --backend nvshmem --sizes 1MiB,16MiB,256MiB,1GiB --iters 10 --no-nccl --timeout 60 $ce \
                    --out $W/$name > $W/$name.log 2>&1
                rc=$?; [ $rc = 0 ] || rc_all=$rc
                echo "$name rc=$rc $(( $(date +%s) - START )) s"
                cp $W/$name.log $W/$name/ 2>/dev/null
                tar czf "$OUT/$name.tgz" -C $W --exclude=build --exclude=runs $name
                tail -n 9 $W/$name.log
            done
        done
    else
        for family in ${FAMILIES:-allreduce_family allgather_family reduce_scatter_family alltoall_dispatch}; do
            timeout ${TUNE_MAX:-200} python3 -m clockworks_dist.cli tune protocols/nvshmem_$family.py -t h200x2-nv18 \
                --np 2 --sizes 16MiB,256MiB,1GiB --copy-engine 16MiB --top 1 --out $W/tune_$family \
                > $W/tune_$family.log 2>&1
            rc=$?; [ $rc = 0 ] || rc_all=$rc
            echo "tune $family rc=$rc $(( $(date +%s) - START )) s"
            cp $W/tune_$family.log $W/tune_$family/ 2>/dev/null
            find $W/tune_$family -name '*.link' -delete
            tar czf "$OUT/tune_$family.tgz" -C $W --exclude=build --exclude='*.bin' --exclude=runs tune_$family
            grep -h "Measured winner\|^- " $W/tune_$family/tune.md
        done
    fi
done
echo "done $(( $(date +%s) - START )) s"
exit $rc_all
