#!/usr/bin/env bash
# Calibrate the 2 x H200 machine end to end on the machine itself: build and run the microbenchmarks
# under mpirun, fit the constants, write the calibrated topology.
#
#   scripts/calibrate_on_gpu.sh OUT_DIR [START.yaml]
#
# The GPU machine's Python may lack this package's light dependencies: wheels found in .whl/ (pydantic
# and what it needs, built for that Python) are installed into a private folder first. NVLink
# multicast stays off (shared machines).
set -euo pipefail
out=${1:?usage: scripts/calibrate_on_gpu.sh OUT_DIR [START.yaml]}
start=${2:-topologies/measured/h200x2-nv18.yaml}
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
if ! "$py" -c "import pydantic, yaml, networkx, scipy" 2>/dev/null; then
  site=$(mktemp -d)
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" .whl/*.whl
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$out"
"$py" -m clockworks_dist calibrate -t h200x2-nv18 --run "$out/raw" --start "$start" \
  --out "$out/h200x2-nv18.yaml" --json
