#!/bin/bash
# Smoke run of generated NCCL programs on the GPU machine: build each .cu of scripts/gpu/smoke_src,
# run it under mpirun at 2 ranks, keep every rank's line. NVLink multicast stays off.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/bin"
PY=/opt/torch/.venv/bin/python3
SP=$($PY -c "import site; print(site.getsitepackages()[0])")
NC=$SP/nvidia/nccl; MPIINC=/usr/lib/x86_64-linux-gnu/openmpi/include
nvidia-smi -L > "$OUT/gpus.txt"
for f in scripts/gpu/smoke_src/*.cu; do
  n=$(basename "$f" .cu)
  ( nvcc -O2 -std=c++17 -arch=sm_90 -I"$NC/include" -I$MPIINC "$f" -L"$NC/lib" -l:libnccl.so.2 -lmpi \
      -Xlinker -rpath="$NC/lib" -o "$OUT/bin/$n" > "$OUT/$n.build.log" 2>&1 || echo "BUILD FAILED $n" ) &
done
wait
for b in "$OUT"/bin/*; do
  n=$(basename "$b"); job="$OUT/job_$n"; mkdir -p "$job"
  t0=$SECONDS
  timeout -k 5 60 mpirun --allow-run-as-root -np 2 -x NCCL_NVLS_ENABLE -x NVSHMEM_DISABLE_NVLS \
      -x TORCH_SYMM_MEM_DISABLE_MULTICAST "$b" --job "$job" --iters 5 --timeout 15 > "$OUT/$n.run.log" 2>&1
  rc=$?
  echo "$n rc=$rc $((SECONDS - t0)) s"
  grep -h '^{' "$OUT/$n.run.log" | cut -c1-400
done
ps aux | grep -c "[b]in/" 
