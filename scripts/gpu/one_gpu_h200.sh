#!/bin/bash
# What one GPU can measure (a machine with one H200): the plain-kernel calibration microbenchmark
# (calibrate/bench_kernels.cu: the start of an empty and a spinning kernel, eager and in a CUDA graph,
# and a reduce kernel's rate over HBM, 1 KiB .. 1 GiB) and the programmatic-dependent-launch probe
# (scripts/gpu/pdl_probe.cu: the gap between consecutive kernels with and without PDL, plain and
# cooperative). One call; run from the repository root. Results under $OUT: kernels.jsonl, pdl.jsonl,
# machine.txt, and the build and run logs.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
set -uo pipefail
OUT=${OUT:-/tmp/cw-one-gpu}
mkdir -p "$OUT"
W=$(mktemp -d)
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv; nvcc --version | tail -n 2; } \
    > "$OUT/machine.txt" 2>&1
nvcc -O2 -arch=sm_90 clockworks_dist/calibrate/bench_kernels.cu -o $W/bench_kernels > "$OUT/build.log" 2>&1 &
nvcc -O2 -arch=sm_90 scripts/gpu/pdl_probe.cu -o $W/pdl_probe >> "$OUT/build.log" 2>&1 &
wait
rc=0
timeout 240 $W/bench_kernels --out "$OUT/kernels.jsonl" --max-bytes 1073741824 > "$OUT/kernels.log" 2>&1 || rc=$?
echo "bench_kernels rc=$rc"
timeout 180 $W/pdl_probe --out "$OUT/pdl.jsonl" --launches 50 --reps 5 > "$OUT/pdl.log" 2>&1 || rc=$?
echo "pdl_probe rc=$rc"
# the same sweep once more, to see the run-to-run spread of the figures the fit reads
timeout 120 $W/bench_kernels --out "$OUT/kernels_repeat.jsonl" --max-bytes 67108864 > /dev/null 2>&1 || rc=$?
echo "bench_kernels repeat rc=$rc"
cat "$OUT/machine.txt"; tail -n 40 "$OUT/kernels.log"; grep -c '"bench":"pdl"' "$OUT/pdl.jsonl"
exit $rc
