#!/bin/bash
# After the production half moved onto lowering/ (Build, lower, Lowered), validate's whole path on
# 2 GPUs: the NCCL backend, and the NVSHMEM backend with each lowering (a kernel per call, packets,
# the copy engine), each checked bit for bit, timed, predicted, against NCCL's own collective. Run
# from the repository root; WHEELS=DIR installs what the machine's Python lacks (env.sh).
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
set -uo pipefail
. scripts/gpu/env.sh  # multicast off, the wheels, PYTHONPATH
R=${OUT:-/tmp}/lowering_smoke
mkdir -p "$R"
nvidia-smi -L > "$R/gpus.txt" 2>&1
run() {  # name, then validate's arguments
    local name=$1; shift
    timeout 280 python3 -m clockworks_dist.cli validate "$@" --np 2 --iters 10 --timeout 90 --out "$R/$name" \
        > "$R/$name.txt" 2> "$R/$name.err"
    echo "$name rc=$?" >> "$R/log.txt"
    head -30 "$R/$name.txt" >> "$R/log.txt"
}
run ring_nccl protocols/ring_allreduce.py --backend nccl --sizes 8KiB,1MiB
run oneshot_calls protocols/nvshmem_allreduce_family.py --backend nvshmem --param ALGO=oneshot --sizes 8KiB \
    --calls 4 --between alternate
run oneshot_packets protocols/nvshmem_allreduce_family.py --backend nvshmem --param ALGO=oneshot --sizes 8KiB \
    --calls 4 --between alternate --packets 32KiB
run twoshot_engine protocols/nvshmem_allreduce_family.py --backend nvshmem --param ALGO=twoshot --sizes 64MiB \
    --copy-engine 16MiB
rm -rf "$R"/*/build "$R"/*/runs/*/dump*.bin "$R"/*/runs/*/expect*.bin
cat "$R/log.txt"
