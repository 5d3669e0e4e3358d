#!/bin/bash
# compute-sanitizer's memcheck once on each generated program, at 1 KiB per rank, on a machine with 2
# GPUs. Run from the repository root (install what the machine's Python lacks with WHEELS, as
# scripts/gpu/validate_h200x2.sh does).
#   1. `clockworks validate --launcher slurm --sizes 1KiB` writes each program and its job folder (the
#      checker's expected values); `python -m clockworks_dist.runtime.validate build` compiles them,
#      several at a time.
#   2. each program runs under `compute-sanitizer --tool memcheck` with that job folder, one after the
#      other, so the run under the tool is also checked element by element (its rank lines say match).
#   PAIRS="proto:backend ..."  (default: every protocol with each backend that generates it)
#   MEMCHECK_MAX=N  start no memcheck after N seconds from now (default 520)
#   TOOL_TIMEOUT=S  each memcheck run's bound (default 150)
# NVSHMEM's team setup through NCCL is switched off under the tool (NVSHMEM_DISABLE_NCCL=1): it only
# serves host-side collectives, which the generated programs do not call, and under memcheck each of
# NCCL's kernels without an sm_90 image costs a logged API error. NVLink multicast stays off.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
set -uo pipefail
START=$(date +%s)
PACK=${OUT:-.}
R=${RESULTS:-/tmp/cw-memcheck}
mkdir -p "$R"
. scripts/gpu/env.sh  # multicast off, the wheels, PYTHONPATH
LOG="$R/memcheck.txt"
pack() { cp "$LOG" "$PACK/memcheck.txt" 2>/dev/null; }
PAIRS=${PAIRS:-"nvshmem_oneshot_allreduce:nvshmem nvshmem_twoshot_allreduce:nvshmem nvshmem_alltoall_dispatch:nvshmem
dissemination_barrier:nvshmem ring_allreduce:nccl ring_allgather:nccl ring_reduce_scatter:nccl tree_allreduce:nccl
halving_doubling_allreduce:nccl hierarchical_allreduce:nccl direct_alltoall:nccl pipeline_1f1b:nccl"}
one() {  # proto:backend -> the program at 1 KiB and its job folder, compiled
    local p=${1%%:*} b=${1##*:}
    python3 -m clockworks_dist.cli validate "protocols/$p.py" --np 2 --backend "$b" --sizes 1KiB --no-nccl \
        --launcher slurm --out "$R/${p}_$b" > "$R/${p}_$b.txt" 2>&1 \
      && python3 -m clockworks_dist.runtime.validate build "$R/${p}_$b" >> "$R/${p}_$b.txt" 2>&1
    echo "prepare $p $b rc=$?"
}
export -f one; export R
echo "== step 1: write and build each program (1 KiB)" >> "$LOG"
printf '%s\n' $PAIRS | xargs -P 6 -I{} bash -c 'one {}' >> "$LOG" 2>&1
echo "step 1 done in $(( $(date +%s) - START )) s" >> "$LOG"; pack
for pair in $PAIRS; do
    p=${pair%%:*} b=${pair##*:}; folder="$R/${p}_$b"
    bin=$(find "$folder/build" -mindepth 2 -maxdepth 2 -type f -perm -u+x 2>/dev/null | head -1)
    job=$(find "$folder/runs" -mindepth 1 -maxdepth 1 -type d 2>/dev/null | head -1)
    if [ -z "$bin" ] || [ -z "$job" ]; then echo "== $p $b: no program or job folder (see ${p}_$b.txt)" >> "$LOG"; continue; fi
    if [ $(( $(date +%s) - START )) -gt "${MEMCHECK_MAX:-520}" ]; then echo "== $p $b: memcheck skipped (time)" >> "$LOG"; continue; fi
    echo "== memcheck $p $b ($(basename "$bin"), job $(basename "$job"))" >> "$LOG"
    rm -f "$job"/rank*.jsonl "$job"/dump*.bin
    t0=$SECONDS
    timeout -k 5 "${TOOL_TIMEOUT:-150}" mpirun --allow-run-as-root -np 2 -x NCCL_NVLS_ENABLE -x NVSHMEM_DISABLE_NVLS \
        -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NCCL=1 compute-sanitizer --tool memcheck \
        --error-exitcode 9 --print-limit 20 "$bin" --job "$job" --iters 1 --warmup 0 --no-graph \
        --timeout $(( ${TOOL_TIMEOUT:-150} - 20 )) > "$folder.memcheck.log" 2>&1
    rc=$?
    { grep -E "ERROR SUMMARY|LEAK SUMMARY" "$folder.memcheck.log" | sort | uniq -c
      grep -E "^========= (Invalid|Program hit|Error)" "$folder.memcheck.log" | sort | uniq -c | head -8
      for f in "$job"/rank*.jsonl; do [ -f "$f" ] && echo "$(basename "$f"): $(grep -o '"status":"[a-z]*"' "$f" | tr '\n' ' ')"; done
      echo "rc=$rc in $((SECONDS - t0)) s"; } >> "$LOG"
    pack
done
echo "done in $(( $(date +%s) - START )) s" >> "$LOG"
tar czf "$PACK/memcheck.tgz" -C "$R" --exclude=build --exclude='*.bin' . ; pack
