#!/bin/bash
# Puts on the copy engine (`--copy-engine SIZE`) against puts by the kernel's blocks, on one H200 (one PE:
# every put goes to the PE itself, so this is the GPU's own memory, not NVLink). Every output is checked
# bit for bit against the checker's values; both variants are built from the same schedule and run in
# one call of the GPU machine, one after the other.
#   1. protocols/nvshmem_put_bandwidth.py --np 1, 1 MiB to 1 GiB: one put_signal of the whole buffer and
#      its wait; blocks (default) and copy engine (--copy-engine 1MiB), eager and in a CUDA graph.
#   2. scripts/gpu/one_pe_calls.py --calls 20 --between alternate at 1 MiB and 16 MiB with the copy engine:
#      20 calls, each a copy-engine put_signal between two kernels, captured in one graph.
# Run from the repository root.  WHEELS=DIR  install the wheels in DIR first.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
set -uo pipefail
START=$(date +%s)
OUT=${OUT:-/tmp/cw-copy-engine}
mkdir -p "$OUT"
. scripts/gpu/env.sh  # multicast off, the wheels, PYTHONPATH
W=/tmp/cw-ce-work; mkdir -p $W
rc_all=0
run() {  # name, then validate's arguments
    local name=$1; shift
    timeout ${ONE_MAX:-240} python3 -m clockworks_dist.cli validate "$@" --np 1 --backend nvshmem --timeout 60 \
        --out $W/$name > $W/$name.log 2>&1
    local rc=$?; [ $rc = 0 ] || rc_all=$rc
    echo "$name rc=$rc $(( $(date +%s) - START )) s"
    cp $W/$name.log $W/$name/ 2>/dev/null
    grep -h "on_stream(" $W/$name/build/*/*.cu 2>/dev/null | sort | uniq -c | head -3
    tar czf "$OUT/$name.tgz" -C $W --exclude=build --exclude=runs $name
    tail -n 12 $W/$name.log
}
SIZES=${SIZES:-1MiB,16MiB,256MiB,1GiB}
for round in 1 2; do  # twice, the order swapped, so that a drift of the machine shows
    if [ $round = 1 ]; then order="blocks engine"; else order="engine blocks"; fi
    for how in $order; do
        ce=; [ $how = engine ] && ce="--copy-engine 1MiB"
        run put_${how}_r$round protocols/nvshmem_put_bandwidth.py --sizes $SIZES --iters 10 --no-nccl $ce
    done
done
run calls_engine scripts/gpu/one_pe_calls.py --sizes 1MiB,16MiB --calls 20 --between alternate --iters 10 \
    --copy-engine 1MiB
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > $OUT/gpu.txt 2>&1
exit $rc_all
