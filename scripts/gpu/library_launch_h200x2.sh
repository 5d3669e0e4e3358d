#!/bin/bash
# Where the emitted all-reduce library's time per call goes (issue 31, the library's call path), on 2
# GPUs in one call: three builds of the same winners, each driver (its own bit-for-bit checks, eager
# and CUDA-graph time per call, resets included) run under mpirun one after another:
#   cooperative  every kernel launched cooperatively, a reset every 8 calls (as emitted before)
#   plain        a one-block kernel with no NVSHMEM collective launched plainly, a reset every 8 calls
#   plain_k32    the same, a reset every 32 calls (the checker verified every prefix of 32 calls)
# Results under $OUT: <variant>.jsonl (one line per PE and size), the logs.
#   WHEELS=DIR  the wheels the machine's Python lacks (env.sh); EXP=DIR the variants' sources
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
set -uo pipefail
START=$(date +%s)
OUT=${OUT:-/tmp/cw-library-launch}
mkdir -p "$OUT"
. scripts/gpu/env.sh
EXP=${EXP:-build/exp31}
NAME=cw_nvshmem_allreduce_family
W=/tmp/cw-library-launch-work; rm -rf $W; mkdir -p $W
declare -A SRC=([cooperative]=$EXP/old [plain]=results/h200x2/tune_all/dispatch [plain_k32]=$EXP/k32)
for v in cooperative plain plain_k32; do
  mkdir -p $W/$v && cp "${SRC[$v]}"/$NAME.h "${SRC[$v]}"/$NAME.cu "${SRC[$v]}"/${NAME}_test.cu $W/$v/ || exit 2
  timeout ${BUILD_MAX:-420} python3 scripts/gpu/build_library_driver.py "$W/$v" "$NAME" > $W/$v/build.log 2>&1 &
done
wait
echo "builds done $(( $(date +%s) - START )) s"
for v in cooperative plain plain_k32; do
  cp $W/$v/build.log "$OUT/$v.build.log"
  if [ ! -x $W/$v/${NAME}_test ]; then echo "$v: no binary"; tail -n 5 $W/$v/build.log; continue; fi
  timeout ${RUN_MAX:-150} mpirun --allow-run-as-root -np 2 -x NCCL_NVLS_ENABLE -x NVSHMEM_DISABLE_NVLS \
      -x TORCH_SYMM_MEM_DISABLE_MULTICAST $W/$v/${NAME}_test --iters ${ITERS:-20} > $W/$v/run.log 2>&1
  echo "$v run rc=$? $(( $(date +%s) - START )) s"
  grep '^{' $W/$v/run.log > "$OUT/$v.jsonl"; cp $W/$v/run.log "$OUT/$v.run.log"; tail -n 2 $W/$v/run.log
done
