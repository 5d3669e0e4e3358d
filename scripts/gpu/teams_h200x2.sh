#!/bin/bash
# clockworks validate of the NVSHMEM teams and signal_store corpus protocols, generated for NVSHMEM
# (team splits on the host at setup, team collectives and barriers in the kernel, plain stores to
# signal words), on a machine with 2 GPUs (2 x H200). Run from the repository root.
#   OUT=DIR        where the results go (default .): one folder per protocol and world size
#                  (results.json, results.md, the run's output), teams.log, packed into teams.tgz
#   WHEELS=DIR     install the wheels in DIR first (scripts/gpu/env.sh)
#   PROTOCOLS="a b" the protocols (default: team_allreduce_rows flag_reset_before_ack)
#   NP="2"         world sizes (default 2; NP="2 4" on a machine with 4 GPUs: both declare 2, 4 and 8)
#   SIZES=LIST     bytes per rank (default: the schedules' own sizes)
#   ITERS=K        timed runs per mode (default 10)
#   RUN_TIMEOUT=S  each program's deadline in seconds (default 120)
# NVLink multicast stays off in every process (the launcher passes these on to every rank too).
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
set -uo pipefail
START=$(date +%s)
PACK=${OUT:-.}
RESULTS=$PACK/teams
mkdir -p "$RESULTS"
. scripts/gpu/env.sh  # multicast off, the wheels, PYTHONPATH
LOG="$PACK/teams.log"
{ echo "python3: $(command -v python3)"; nvidia-smi -L; command -v mpirun nvcc; } >> "$LOG" 2>&1
pack() { tar czf "$PACK/teams.tgz" -C "$RESULTS" --exclude=build --exclude='*.bin' . ; }
failed=0
for np in ${NP:-2}; do
    for p in ${PROTOCOLS:-team_allreduce_rows flag_reset_before_ack}; do
        folder="$RESULTS/${p}_nvshmem_${np}"
        sizes=()
        [ -n "${SIZES:-}" ] && sizes=(--sizes "$SIZES")
        t0=$SECONDS
        python3 -m clockworks_dist.cli validate "protocols/$p.py" --np "$np" --backend nvshmem "${sizes[@]}" \
            --iters "${ITERS:-10}" --timeout "${RUN_TIMEOUT:-120}" --no-nccl --out "$folder" > "$folder.txt" 2>&1
        rc=$?
        [ $rc = 0 ] || failed=1
        echo "$p nvshmem np=$np rc=$rc $((SECONDS - t0)) s" | tee -a "$LOG"
        tail -n 12 "$folder.txt" >> "$LOG"
        rm -rf "$folder/build/"*/*.link "$folder/runs/"*/dump*.bin "$folder/runs/"*/expect*.bin
        pack
    done
done
echo "done in $(( $(date +%s) - START )) s, failed=$failed" | tee -a "$LOG"
pack
exit $failed
