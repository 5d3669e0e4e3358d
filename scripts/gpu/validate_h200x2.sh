#!/bin/bash
# clockworks validate on a machine with 2 GPUs (2 x H200): every protocol that runs at 2 ranks, with
# each backend that applies, at the sizes of SIZES; then compute-sanitizer's memcheck once on each
# generated program at the smallest size. Run from the repository root.
#   RESULTS=DIR    results (default /tmp/cw-validate): one folder per protocol and backend
#                  (results.json, results.md, results.png when matplotlib is there), sweep.log,
#                  memcheck.txt; packed at the end into $OUT/validate.tgz (builds and dumps left out)
#   WHEELS=DIR     install the wheels in DIR first (what the machine's Python lacks: pydantic,
#                  pyyaml, networkx, z3-solver and their dependencies)
#   PROTOCOLS="a b" the protocols (default: every protocols/*.py)
#   BACKENDS="nccl nvshmem"
#   SIZES=LIST     bytes per rank (default 1KiB,16KiB,256KiB,4MiB,64MiB,1GiB)
#   ITERS=K        timed runs per mode (default 10)
#   RUN_TIMEOUT=S  each program's deadline in seconds (default 120)
#   SECONDS_MAX=N  start no validation after N seconds from now (default 540)
#   MEMCHECK=0     skip compute-sanitizer; MEMCHECK_MAX=N: start none after N seconds (default 540)
# NVLink multicast stays off in every process (the launcher passes these on to every rank too).
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
set -uo pipefail
START=$(date +%s)
PACK=${OUT:-.}
OUT=${RESULTS:-/tmp/cw-validate}
SIZES=${SIZES:-1KiB,16KiB,256KiB,4MiB,64MiB,1GiB}
ITERS=${ITERS:-10}
mkdir -p "$OUT"
# pack what is there so far: a call cut off at its limit still returns every finished protocol
pack() { tar czf "$PACK/validate.tgz" -C "$OUT" --exclude=build --exclude='*.bin' . ; cp "$LOG" "$PACK/sweep.log" 2>/dev/null; }
. scripts/gpu/env.sh  # multicast off, the wheels, PYTHONPATH
LOG="$OUT/sweep.log"
{ echo "python3: $(command -v python3)"; nvidia-smi -L; command -v mpirun nvcc compute-sanitizer; } >> "$LOG" 2>&1
PROTOCOLS=${PROTOCOLS:-$(ls protocols/*.py | xargs -n1 basename | sed 's/\.py$//')}
for backend in ${BACKENDS:-nccl nvshmem}; do
    for p in $PROTOCOLS; do
        now=$(date +%s)
        if [ $((now - START)) -gt "${SECONDS_MAX:-540}" ]; then
            echo "SKIPPED (time) $p $backend" | tee -a "$LOG"; continue
        fi
        folder="$OUT/${p}_${backend}"
        t0=$SECONDS
        python3 -m clockworks_dist.cli validate "protocols/$p.py" --np 2 --backend "$backend" --sizes "$SIZES" \
            --iters "$ITERS" --timeout "${RUN_TIMEOUT:-120}" --out "$folder" > "$folder.txt" 2>&1
        rc=$?
        if grep -q "cannot generate it\|cannot run" "$folder.txt" && [ $rc = 2 ]; then
            rm -rf "$folder" "$folder.txt"; echo "n/a $p $backend (an op the backend lacks)" >> "$LOG"; continue
        fi
        echo "$p $backend rc=$rc $((SECONDS - t0)) s" | tee -a "$LOG"
        tail -n 12 "$folder.txt" >> "$LOG"
        rm -rf "$folder/build/"*/*.link "$folder/runs/"*/dump*.bin "$folder/runs/"*/expect*.bin
        pack
    done
done
if [ "${MEMCHECK:-1}" = 1 ] && command -v compute-sanitizer > /dev/null; then
    for folder in "$OUT"/*_nccl "$OUT"/*_nvshmem; do
        [ -d "$folder/build" ] || continue
        first=$(ls "$folder/build" | grep -E '^[0-9]+$' | sort -n | head -1)  # the smallest size
        bin=$(find "$folder/build/$first" -maxdepth 1 -type f -perm -u+x | head -1)
        [ -n "$bin" ] || continue
        if [ $(( $(date +%s) - START )) -gt "${MEMCHECK_MAX:-540}" ]; then
            echo "== memcheck skipped (time): $bin" >> "$OUT/memcheck.txt"; continue
        fi
        echo "== memcheck $bin" >> "$OUT/memcheck.txt"
        timeout 60 mpirun --allow-run-as-root -np 2 -x NCCL_NVLS_ENABLE -x NVSHMEM_DISABLE_NVLS \
            -x TORCH_SYMM_MEM_DISABLE_MULTICAST compute-sanitizer --tool memcheck --error-exitcode 9 \
            "$bin" --iters 1 --warmup 0 --no-graph --timeout 50 >> "$OUT/memcheck.txt" 2>&1
        echo "rc=$?" >> "$OUT/memcheck.txt"
        pack
    done
fi
echo "done in $(( $(date +%s) - START )) s" | tee -a "$LOG"
pack
ls -la "$PACK/validate.tgz"
