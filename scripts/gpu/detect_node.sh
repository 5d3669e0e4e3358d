#!/bin/bash
# `clockworks topology detect` on the lent node, from the repository root: the facts it read (for
# tests/data/detect), the topology it wrote, its GPU test, and the calibration microbenchmarks of the
# node (a machine for the cross-machine fit). Packed into $OUT/node.tgz.
#   WHEELS=DIR  the wheels the machine's Python lacks (env.sh)
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
set -uo pipefail
. scripts/gpu/env.sh
R=/tmp/cw-node
rm -rf "$R"; mkdir -p "$R"
pack() { tar czf "${OUT:-/tmp}/node.tgz" -C "$R" . ; }
{ nvidia-smi -L; nvidia-smi topo -m; nvidia-smi nvlink -s; } > "$R/nvidia-smi.txt" 2>&1
python3 -m clockworks_dist topology detect --save-facts "$R/facts.json" --out "$R/node.yaml" > "$R/detect.txt" 2>&1
echo "detect rc=$?" >> "$R/log.txt"
python3 -m pytest -p no:cacheprovider -q tests/test_detect.py > "$R/test_detect.txt" 2>&1
echo "test_detect rc=$?" >> "$R/log.txt"
pack
t0=$SECONDS
timeout 200 python3 clockworks_dist/calibrate/runner.py --out "$R/raw" --budget-s 190 > "$R/runner.txt" 2>&1
echo "runner rc=$? $((SECONDS - t0)) s" >> "$R/log.txt"
rm -f "$R/raw/run.log" "$R/raw/build.log"
pack
cat "$R/log.txt" "$R/detect.txt"; tail -3 "$R/test_detect.txt"; head -12 "$R/nvidia-smi.txt"
