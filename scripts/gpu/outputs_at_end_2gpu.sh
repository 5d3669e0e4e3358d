#!/bin/bash
# Generated NVSHMEM programs read each rank's outputs when its program ends (before the quiet and
# barrier_all the harness closes a run with), on the first warm-up run: the seeded unfinished_output
# bugs, run with --no-check, against their fixed twins and the NVSHMEM protocols, on 2 GPUs. Run
# from the repository root; WHEELS=DIR installs what the machine's Python lacks (env.sh).
#   REPEAT=N   runs of each seeded bug (default 5): whether the stale read shows is a race on the GPU
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
set -uo pipefail
. scripts/gpu/env.sh  # multicast off, the wheels, PYTHONPATH
R=${OUT:-/tmp}/outputs_at_end
mkdir -p "$R"
LOG="$R/log.txt"
nvidia-smi -L > "$R/gpus.txt" 2>&1
validate() {  # name, out folder, extra options
    local name=$1 folder=$2; shift 2
    python3 -m clockworks_dist.cli validate "protocols/$name.py" --np 2 --backend nvshmem --iters 5 \
        --timeout 60 --out "$folder" --json "$@" > "$folder.json" 2> "$folder.err"
    local rc=$?
    python3 - "$folder.json" "$name" "$rc" >> "$LOG" <<'PY'
import json, sys
path, name, rc = sys.argv[1:]
try:
    doc = json.load(open(path))
except Exception as exc:  # noqa: BLE001
    print(f"{name} rc={rc} unreadable: {exc}"); sys.exit()
cells = doc.get("results") or doc.get("cells") or [doc]
for cell in cells:
    print(f"{name} rc={rc} verdict={cell.get('verdict')} size={cell.get('bytes')} "
          f"first={json.dumps([f for r in cell.get('ranks', []) for f in (r.get('compare') or {}).get('first', [])][:4])}")
PY
}
for bug in put_without_quiet final_signal_unfenced allgather_dropped_final_wait; do
    for k in $(seq 1 "${REPEAT:-5}"); do
        validate "buggy/$bug" "$R/${bug}_$k" --no-check
    done
done
validate shift_put_fenced_signal "$R/shift_put_fenced_signal"
for good in allgather_waits_every_peer nvshmem_oneshot_allreduce nvshmem_alltoall_dispatch nvshmem_twoshot_allreduce; do
    validate "$good" "$R/$good" --sizes 1KiB,1MiB
done
rm -rf "$R"/*/build "$R"/*/runs/*/dump*.bin "$R"/*/runs/*/expect*.bin
cat "$LOG"
