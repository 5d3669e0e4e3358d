#!/bin/bash
# What one NVSHMEM device call costs its issuing thread or block, on one H200 (one PE: no byte crosses
# NVLink): builds scripts/gpu/nvshmem_op_cost_probe.cu and runs it twice (two rounds, so that a drift of
# the machine shows). Results: $OUT/op_cost_r{1,2}.jsonl, $OUT/gpu.txt. Run from the repository root.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
set -euo pipefail
OUT=${OUT:-/tmp/cw-op-cost}
mkdir -p "$OUT"
SP=$(python3 -c "import site; print(site.getsitepackages()[0])")
NS=$SP/nvidia/nvshmem
MPIINC=/usr/lib/x86_64-linux-gnu/openmpi/include
mkdir -p /tmp/nvl
ln -sf $NS/lib/libnvshmem_host.so.3 /tmp/nvl/libnvshmem_host.so
ln -sf $NS/lib/libnvshmem_device.a /tmp/nvl/libnvshmem_device.a
nvcc -O2 -arch=sm_90 -rdc=true -I$NS/include -I$MPIINC scripts/gpu/nvshmem_op_cost_probe.cu \
    -L/tmp/nvl -lnvshmem_host -lnvshmem_device -lmpi -Xlinker -rpath=$NS/lib -o /tmp/nvshmem_op_cost_probe
for round in 1 2; do
    LD_LIBRARY_PATH=$NS/lib:${LD_LIBRARY_PATH:-} timeout 120 mpirun --allow-run-as-root -np 1 \
        -x NCCL_NVLS_ENABLE -x NVSHMEM_DISABLE_NVLS -x TORCH_SYMM_MEM_DISABLE_MULTICAST \
        /tmp/nvshmem_op_cost_probe ${ITERS:-2000} ${REPS:-11} | tee "$OUT/op_cost_r$round.jsonl"
done
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > "$OUT/gpu.txt" 2>&1
