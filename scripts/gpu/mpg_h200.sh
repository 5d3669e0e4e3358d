#!/bin/bash
# Two NVSHMEM PEs on one GPU (a machine with one H200; NVSHMEM's multiple processes per GPU, no MPS):
# `clockworks validate --np 2 --backend nvshmem` of the protocols given, every output compared bit for
# bit with the checker's values. What it can show: that the generated programs' results are right
# when both PEs share one GPU (a functional check of the code, not of NVLink: no time from here is a
# figure of a 2-GPU machine). A control protocol that ran on 2 GPUs before comes first, so a failure
# of the sharing itself is told apart from a failure of a new protocol. Run from the repository root.
#   WHEELS=DIR      install the wheels in DIR first (what the machine's Python lacks)
#   PROTOCOLS="a b" the protocols (default below)
#   NP="2 4"        world sizes (default 2)
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
set -uo pipefail
START=$(date +%s)
OUT=${OUT:-/tmp/cw-mpg}
mkdir -p "$OUT"
. scripts/gpu/env.sh  # multicast off, the wheels, PYTHONPATH
{ nvidia-smi -L; nvidia-smi --query-gpu=compute_mode --format=csv; } > "$OUT/gpu.txt" 2>&1
failed=0
for np in ${NP:-2}; do
for p in ${PROTOCOLS:-shift_put_fenced_signal team_allreduce_rows flag_reset_before_ack flag_in_data_array}; do
    folder="$OUT/${p}_np$np"
    t0=$SECONDS
    timeout ${ONE_MAX:-150} python3 -m clockworks_dist.cli validate "protocols/$p.py" --np "$np" --backend nvshmem \
        --share-gpus --iters 3 --timeout 60 --no-nccl --out "$folder" > "$folder.txt" 2>&1
    rc=$?
    [ $rc = 0 ] || failed=1
    echo "$p nvshmem np=$np (one GPU) rc=$rc $((SECONDS - t0)) s" | tee -a "$OUT/mpg.log"
    tail -n 15 "$folder.txt" >> "$OUT/mpg.log"
    # what a failed run's ranks wrote, where the results can be read without the run folders
    [ $rc = 0 ] || tail -n 5 "$folder"/runs/*/stderr.txt >> "$OUT/mpg.log" 2>/dev/null
    rm -rf "$folder/build" "$folder/runs" "$folder/results.png"
done
done
echo "done in $(( $(date +%s) - START )) s, failed=$failed" | tee -a "$OUT/mpg.log"
exit $failed
