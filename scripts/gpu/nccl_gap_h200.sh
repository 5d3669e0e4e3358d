#!/bin/bash
# Does a plain kernel start slower in a CUDA graph once NCCL has run in the process? On one GPU,
# scripts/gpu/nccl_gap_probe.cu under a few NCCL settings (each run its own process, twice).
# Run from the repository root; results under $OUT: nccl_gap.jsonl, build.log.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
set -uo pipefail
OUT=${OUT:-/tmp/cw-nccl-gap}; mkdir -p "$OUT"
SP=$(python3 -c "import site; print(site.getsitepackages()[0])")
NC=$SP/nvidia/nccl
nvcc -O2 -arch=sm_90 -I$NC/include scripts/gpu/nccl_gap_probe.cu -L$NC/lib -l:libnccl.so.2 \
    -Xlinker -rpath=$NC/lib -o /tmp/nccl_gap_probe > "$OUT/build.log" 2>&1 || { cat "$OUT/build.log"; exit 2; }
for rep in 1 2; do
    for setting in "" NCCL_CUMEM_ENABLE=0 NCCL_MEM_SYNC_DOMAIN=0 NCCL_GRAPH_REGISTER=0; do
        label=${setting:-default}
        env $setting timeout 60 /tmp/nccl_gap_probe "$label" >> "$OUT/nccl_gap.jsonl" 2>> "$OUT/run.log" \
            || echo "run $label rc=$?"
    done
done
cat "$OUT/nccl_gap.jsonl"
