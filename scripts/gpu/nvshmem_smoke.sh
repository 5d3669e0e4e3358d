#!/bin/bash
# Smoke run of generated NVSHMEM programs on the GPU machine (2 GPUs). Before it, on a machine with the
# package installed: python scripts/gpu/nvshmem_smoke_prepare.py  (writes scripts/gpu/nvshmem_src/:
# each .cu and its job directory with the expected values). Here: build every .cu (two at a time), run
# each under mpirun at 2 ranks (eager and as a CUDA graph, 3 timed runs), keep every rank's line.
# Expected: "match" for the *_small and *_medium programs, "ran" for *_large and every_op, "timeout"
# naming each block's op for hang_signal_to_wrong_pe. NVLink multicast stays off.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
set -u
SRC=${SRC:-scripts/gpu/nvshmem_src}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/bin"
PY=/opt/torch/.venv/bin/python3
SP=$($PY -c "import site; print(site.getsitepackages()[0])")
NS=$SP/nvidia/nvshmem; MPIINC=/usr/lib/x86_64-linux-gnu/openmpi/include
export LD_LIBRARY_PATH=$NS/lib:${LD_LIBRARY_PATH:-}
nvidia-smi -L > "$OUT/gpus.txt"
grep -h VENDOR_BASE_VERSION_STRING "$NS/include/non_abi/nvshmem_version.h" >> "$OUT/gpus.txt"
# nvcc's device link wants plain names: link through symlinks
mkdir -p "$OUT/nvl" && ln -sf "$NS/lib/libnvshmem_host.so.3" "$OUT/nvl/libnvshmem_host.so" \
  && ln -sf "$NS/lib/libnvshmem_device.a" "$OUT/nvl/libnvshmem_device.a"
build() {
  local n; n=$(basename "$1" .cu)
  nvcc -O2 -std=c++17 -arch=sm_90 -rdc=true -I"$NS/include" -I$MPIINC "$1" -L"$OUT/nvl" -lnvshmem_host \
    -lnvshmem_device -lmpi -Xlinker -rpath="$NS/lib" -o "$OUT/bin/$n" > "$OUT/$n.build.log" 2>&1 \
    || echo "BUILD FAILED $n: $(grep -m3 -i error "$OUT/$n.build.log")"
}
t0=$SECONDS
for f in "$SRC"/*.cu; do
  build "$f" &
  while [ "$(jobs -rp | wc -l)" -ge 2 ]; do sleep 1; done
done
wait
echo "built in $((SECONDS - t0)) s"
for b in "$OUT"/bin/*; do
  n=$(basename "$b"); job="$OUT/job_$n"
  rm -rf "$job"; cp -r "$SRC/job_$n" "$job"
  limit=20; case "$n" in hang_*) limit=5 ;; *_large) limit=60 ;; esac
  t0=$SECONDS
  timeout -k 5 $((limit + 90)) mpirun --allow-run-as-root -np 2 -x NCCL_NVLS_ENABLE -x NVSHMEM_DISABLE_NVLS \
      -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x LD_LIBRARY_PATH "$b" --job "$job" --iters 3 --warmup 1 \
      --timeout $limit > "$OUT/$n.run.log" 2>&1
  rc=$?
  echo "$n rc=$rc $((SECONDS - t0)) s"
  grep -h '^{' "$OUT/$n.run.log" | cut -c1-600
  grep -h -m3 -i "error\|fail\|abort" "$OUT/$n.run.log" | grep -v '^{' | cut -c1-300
done
echo "left running: $(pgrep -c -f "$OUT/bin/" || true)"
