#!/bin/bash
# The 2-rank half of the 2 -> 4 scaling runs that machine_h200x4.sh had no time left for, on a lent
# 2-GPU machine of the same kind (NVML: two H200 of an NVSwitch node, as GPUs 0-1 of the 4-GPU node):
# clockworks validate of each protocol at 2 ranks. Results packed into $OUT/np2.tgz after each one.
#   WHEELS=DIR  the wheels the machine's Python lacks (env.sh); CELLS="protocol:backend ..."
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
set -uo pipefail
. scripts/gpu/env.sh
R=/tmp/cw-np2
rm -rf "$R"; mkdir -p "$R"
pack() { tar czf "${OUT:-/tmp}/np2.tgz" -C "$R" --exclude=build --exclude='*.bin' . ; }
nvidia-smi -L > "$R/gpus.txt" 2>&1
for cell in ${CELLS:-ring_allgather:nccl ring_reduce_scatter:nccl hierarchical_allreduce:nccl halving_doubling_allreduce:nccl}; do
    p=${cell%%:*}; backend=${cell##*:}
    t0=$SECONDS
    timeout 150 python3 -m clockworks_dist.cli validate "protocols/$p.py" --np 2 --backend "$backend" \
        --sizes "${SIZES:-16KiB,1MiB,64MiB}" --iters 10 --timeout 100 --out "$R/${p}_$backend" > "$R/${p}_$backend.txt" 2>&1
    echo "$p $backend np=2 rc=$? $((SECONDS - t0)) s" >> "$R/log.txt"
    rm -rf "$R/${p}_$backend/build"
    pack
done
cat "$R/log.txt"
