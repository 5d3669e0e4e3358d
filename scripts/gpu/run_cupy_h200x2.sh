#!/bin/bash
# clockworks run --backend cupy on a machine with 2 GPUs (2 x H200): the cupy tests, then every
# protocol the backend supports at 1 KiB .. 1 GiB per rank (scripts/gpu/cupy_sweep.py).
# Run from the repository root. Results: $OUT (default results/h200x2): cupy_run.json,
# cupy_run.md, sweep.log, pytest.txt.
#   WHEELS=DIR    install the wheels in DIR first (packages the machine lacks: pydantic, pyyaml,
#                 networkx and their dependencies, built for its Python)
#   TESTS=0       skip the tests
#   SECONDS_MAX=N start no job that would end after N seconds from now (default 540)
#   RESUME=FILE   keep the matching results of an earlier cupy_run.json
# NVLink multicast stays off in every process (the launcher passes these on to every rank too).
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
set -uo pipefail
START=$(date +%s)
OUT=${OUT:-results/h200x2}
mkdir -p "$OUT"
if [ -n "${WHEELS:-}" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/clockworks-site "$WHEELS"/*.whl || exit 2
    export PYTHONPATH=/tmp/clockworks-site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
{ echo "python3: $(command -v python3)"; nvidia-smi -L; command -v mpiexec mpirun; } 2>&1 | tee "$OUT/pytest.txt"
if [ "${TESTS:-1}" = 1 ]; then
    timeout 300 python3 -m pytest tests/test_runtime_cupy.py -q -rs -p no:cacheprovider 2>&1 | tee -a "$OUT/pytest.txt"
fi
python3 scripts/gpu/cupy_sweep.py --out "$OUT" --deadline $((START + ${SECONDS_MAX:-540})) \
    ${RESUME:+--resume "$RESUME"}
