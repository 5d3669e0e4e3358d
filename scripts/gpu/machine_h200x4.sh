#!/bin/bash
# One 4-GPU node, measured for the cross-machine model (issue 30), from the repository root:
# 1. what the node reports about itself (nvidia-smi: -L, topo -m, -q, nvlink -s; NVML through
#    clockworks_dist/topology/nvml.py) for `topology detect` and its tests;
# 2. the calibration microbenchmarks (calibrate/runner.py) on all 4 GPUs, and on GPUs 0-1 alone
#    (2 GPUs of a switched node: a machine of its own for the fit);
# 3. clockworks validate of the protocols at 4 ranks and at 2 ranks (GPUs 0-1), for predicted
#    against measured scaling, until SECONDS_MAX.
# Everything lands in $OUT/machine.tgz (packed after every step: a call cut off keeps what finished).
#   WHEELS=DIR  the wheels the machine's Python lacks (env.sh); SIZES, ITERS, SECONDS_MAX as named.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
set -uo pipefail
START=$(date +%s)
PACK=${OUT:-/tmp}
R=/tmp/cw-machine
rm -rf "$R"; mkdir -p "$R/node"
. scripts/gpu/env.sh
pack() { tar czf "$PACK/machine.tgz" -C "$R" --exclude=build --exclude='*.bin' --exclude='*.link' . ; }
LOG="$R/log.txt"
N=node
nvidia-smi -L > "$R/$N/nvidia-smi-L.txt" 2>&1
nvidia-smi topo -m > "$R/$N/topo-m.txt" 2>&1
nvidia-smi -q > "$R/$N/q.txt" 2>&1
nvidia-smi nvlink -s > "$R/$N/nvlink-s.txt" 2>&1
nvidia-smi --query-gpu=index,name,memory.total,pci.bus_id,compute_cap,clocks.max.sm,clocks.max.mem --format=csv \
    > "$R/$N/query-gpu.csv" 2>&1
python3 clockworks_dist/topology/nvml.py > "$R/$N/nvml.json" 2> "$R/$N/nvml.err"; echo "nvml rc=$?" >> "$LOG"
{ ls -l /sys/class/infiniband 2>&1; ls /sys/class/net 2>&1; nproc; lscpu | head -20; } > "$R/$N/host.txt" 2>&1
pack
t0=$SECONDS
timeout 200 python3 clockworks_dist/calibrate/runner.py --out "$R/raw_4" --budget-s 190 > "$R/raw_4.txt" 2>&1
echo "runner np=4 rc=$? $((SECONDS - t0)) s" >> "$LOG"; pack
t0=$SECONDS
CUDA_VISIBLE_DEVICES=0,1 timeout 150 python3 clockworks_dist/calibrate/runner.py --out "$R/raw_2" --np 2 \
    --budget-s 140 > "$R/raw_2.txt" 2>&1
echo "runner np=2 (GPUs 0,1) rc=$? $((SECONDS - t0)) s" >> "$LOG"; pack
SIZES=${SIZES:-16KiB,1MiB,64MiB}
CELLS=${CELLS:-"ring_allreduce:nccl nvshmem_oneshot_allreduce:nvshmem nvshmem_twoshot_allreduce:nvshmem
nvshmem_alltoall_dispatch:nvshmem direct_alltoall:nccl ring_allgather:nccl ring_reduce_scatter:nccl
hierarchical_allreduce:nccl halving_doubling_allreduce:nccl"}
for np in 4 2; do
    for cell in $CELLS; do
        p=${cell%%:*}; backend=${cell##*:}
        if [ $(( $(date +%s) - START )) -gt "${SECONDS_MAX:-520}" ]; then
            echo "SKIPPED (time) $p $backend np=$np" >> "$LOG"; continue
        fi
        folder="$R/validate_np$np/${p}_$backend"
        mkdir -p "$R/validate_np$np"
        devices=0,1,2,3; [ "$np" = 2 ] && devices=0,1
        t0=$SECONDS
        CUDA_VISIBLE_DEVICES=$devices timeout 150 python3 -m clockworks_dist.cli validate "protocols/$p.py" \
            --np "$np" --backend "$backend" --sizes "$SIZES" --iters "${ITERS:-10}" --timeout 100 --out "$folder" \
            > "$folder.txt" 2>&1
        echo "$p $backend np=$np rc=$? $((SECONDS - t0)) s" >> "$LOG"
        rm -rf "$folder/build" "$folder/runs/"*/dump*.bin "$folder/runs/"*/expect*.bin
        pack
    done
done
cat "$LOG"
