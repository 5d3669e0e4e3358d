#!/bin/bash
# The PDL probe alone on one GPU (scripts/gpu/pdl_probe.cu); results under $OUT: pdl2.jsonl. Run from the repository root.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
nvcc -O2 -arch=sm_90 scripts/gpu/pdl_probe.cu -o /tmp/pdl_probe && /tmp/pdl_probe --out $OUT/pdl2.jsonl --launches 50 --reps 5 > /dev/null && grep -c pdl $OUT/pdl2.jsonl
# does a rank started by mpirun see a variable of the launching environment? (what
# CW_NV_ALWAYS_COOPERATIVE relies on in one_pe_calls_h200.sh)
CW_NV_ALWAYS_COOPERATIVE=1 mpirun --allow-run-as-root -np 1 sh -c 'echo "rank sees CW_NV_ALWAYS_COOPERATIVE=${CW_NV_ALWAYS_COOPERATIVE:-unset}"' | tee $OUT/env_check.txt
