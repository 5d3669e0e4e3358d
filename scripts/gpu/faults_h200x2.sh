#!/bin/bash
# Faults on the GPU machine: schedules the checker rejects, forced through `validate --no-check`, end
# within their timeout with each rank's state and leave no process behind. Run from the repository
# root with the packages installed as scripts/gpu/validate_h200x2.sh does. Results under RESULTS.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
set -uo pipefail
OUT=${RESULTS:-/tmp/cw-validate}
mkdir -p "$OUT"
run() {  # NAME FILE BACKEND SIZE-OPTIONS...
    local name=$1 file=$2 backend=$3; shift 3
    local t0=$SECONDS
    python3 -m clockworks_dist.cli validate "$file" --np 2 --backend "$backend" --no-check --no-nccl --iters 3 \
        --timeout 10 --out "$OUT/fault_$name" "$@" > "$OUT/fault_$name.txt" 2>&1
    echo "fault $name rc=$? $((SECONDS - t0)) s; left running: $(pgrep -fc "fault_$name" || true)" | tee -a "$OUT/faults.log"
    grep -v "^wrote" "$OUT/fault_$name.txt" | head -5 | tee -a "$OUT/faults.log"
}
run recv_never_matched protocols/buggy/recv_never_matched.py nccl
NCCL_DEBUG=WARN run ring_allreduce_no_group protocols/buggy/ring_allreduce_no_group.py nccl --size CHUNK=16777216
run signal_to_wrong_pe protocols/runtime/signal_to_wrong_pe.py nvshmem
