#!/bin/bash
# clockworks tune, measured, at 4 ranks (4 x H200, NVSwitch) for the NVSHMEM all-reduce family
# (issue 31: every family tuned at 4 ranks on a 4-GPU kind): small sizes as 20 back-to-back calls
# per run (each variant also with --packets 32KiB), a large size as one call per run; the best of
# each lowering measured (--top 1), bit-exact, NCCL's own all-reduce beside it. Then the winners
# emitted as a library for 4 PEs (`tune --emit`), built with its MPI driver and run (every size
# checked bit for bit, timed per call eagerly and in a CUDA graph). Run from the repository root.
# Results under $OUT/tune4.tgz.
#   WHEELS=DIR  install the wheels in DIR first (what the machine's Python lacks)
#   SMALL=LIST LARGE=LIST  the sizes; STEP=tune|library|all (default all)
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
set -uo pipefail
START=$(date +%s)
OUT=${OUT:-/tmp/cw-tune4}
mkdir -p "$OUT"
. scripts/gpu/env.sh
export CLOCKWORKS_CACHE=/tmp/cw-cache
W=/tmp/cw-tune4; mkdir -p $W
F=protocols/nvshmem_allreduce_family.py
pack() { tar czf "$OUT/tune4.tgz" -C $W --exclude=build --exclude='build_*' --exclude='*.bin' --exclude='*.pkl' \
    --exclude=runs --exclude='*_test' --exclude=link . ; }
if [ "${STEP:-all}" != library ]; then
  timeout ${SMALL_MAX:-330} python3 -m clockworks_dist.cli tune $F -t h200x4-nvswitch --np 4 \
      --sizes ${SMALL:-8KiB,64KiB,1MiB} --calls 20 --packets 32KiB --top 1 --out $W/small > $W/small.log 2>&1
  echo "small rc=$? $(( $(date +%s) - START )) s"; pack
  timeout ${LARGE_MAX:-150} python3 -m clockworks_dist.cli tune $F -t h200x4-nvswitch --np 4 \
      --sizes ${LARGE:-64MiB} --top 1 --out $W/large > $W/large.log 2>&1
  echo "large rc=$? $(( $(date +%s) - START )) s"; pack
  grep -h "Measured winner" $W/*/tune.md
fi
if [ "${STEP:-all}" != tune ]; then
  LIB=${LIB:-$W/library}
  NAME=cw_nvshmem_allreduce_family
  if [ ! -f $LIB/$NAME.cu ]; then
    timeout 240 python3 -m clockworks_dist.cli tune $F --emit $LIB --from $W/small --from $W/large \
        --reset-every ${RESET_EVERY:-8} > $W/emit.log 2>&1; echo "emit rc=$? $(( $(date +%s) - START )) s"
  fi
  mkdir -p $W/drv && cp $LIB/$NAME.h $LIB/$NAME.cu $LIB/${NAME}_test.cu $W/drv/ || { pack; exit 2; }
  timeout 300 python3 scripts/gpu/build_library_driver.py "$W/drv" "$NAME" > $W/build.log 2>&1
  echo "build rc=$? $(( $(date +%s) - START )) s"
  timeout 150 mpirun --allow-run-as-root -np 4 -x NCCL_NVLS_ENABLE -x NVSHMEM_DISABLE_NVLS \
      -x TORCH_SYMM_MEM_DISABLE_MULTICAST $W/drv/${NAME}_test --iters 20 > $W/driver.log 2>&1
  echo "driver rc=$? $(( $(date +%s) - START )) s"; grep '^{' $W/driver.log > $W/dispatch.jsonl; tail -n 4 $W/driver.log
  pack
fi
