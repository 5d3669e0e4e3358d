#!/bin/bash
# The emitted all-reduce library with calls without end (no reset: check/unbounded.py's proof; carry
# build/endless_dispatch) beside
# the same winners with a reset every 32 calls, on 2 GPUs in one call: both built at once, each
# library's MPI driver run under mpirun one after the other (every size checked bit for bit over many
# calls in a row, then timed per call, eagerly and in a CUDA graph of 128 calls), twice each, in the
# order k32, endless, k32, endless. Results under $OUT: <variant>.<n>.jsonl, the logs.
#   WHEELS=DIR  the wheels the machine's Python lacks (env.sh)
#   K32=DIR     the library with resets (default: the committed one, results/h200x2/tune_all/dispatch)
#   ENDLESS=DIR the library of calls without end (default build/endless_dispatch: make it here with
#               clockworks tune protocols/nvshmem_allreduce_family.py --emit build/endless_dispatch
#               --calls-without-end --from results/h200x2/tune_all/allreduce_family/{small,large})
#   ROUNDS      the endless driver's checked calls in a row per size (default 1000)
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
set -uo pipefail
START=$(date +%s)
OUT=${OUT:-/tmp/cw-library-endless}
mkdir -p "$OUT"
. scripts/gpu/env.sh
NAME=cw_nvshmem_allreduce_family
W=/tmp/cw-library-endless-work; rm -rf $W; mkdir -p $W
declare -A SRC=([k32]=${K32:-results/h200x2/tune_all/dispatch} [endless]=${ENDLESS:-build/endless_dispatch})
declare -A ARGS=([k32]="--iters 20" [endless]="--rounds ${ROUNDS:-1000} --iters 20")
for v in k32 endless; do
  mkdir -p $W/$v && cp "${SRC[$v]}"/$NAME.h "${SRC[$v]}"/$NAME.cu "${SRC[$v]}"/${NAME}_test.cu $W/$v/ || exit 2
  timeout ${BUILD_MAX:-300} python3 scripts/gpu/build_library_driver.py "$W/$v" "$NAME" > $W/$v/build.log 2>&1 &
done
wait
echo "builds done $(( $(date +%s) - START )) s"
nvidia-smi -L > "$OUT/gpus.txt" 2>&1
for n in 1 2; do
  for v in k32 endless; do
    cp $W/$v/build.log "$OUT/$v.build.log"
    if [ ! -x $W/$v/${NAME}_test ]; then echo "$v: no binary"; tail -n 5 $W/$v/build.log; continue; fi
    timeout ${RUN_MAX:-150} mpirun --allow-run-as-root -np 2 -x NCCL_NVLS_ENABLE -x NVSHMEM_DISABLE_NVLS \
        -x TORCH_SYMM_MEM_DISABLE_MULTICAST $W/$v/${NAME}_test ${ARGS[$v]} > $W/$v/run.$n.log 2>&1
    echo "$v run $n rc=$? $(( $(date +%s) - START )) s"
    grep '^{' $W/$v/run.$n.log > "$OUT/$v.$n.jsonl"; cp $W/$v/run.$n.log "$OUT/$v.run.$n.log"; tail -n 1 $W/$v/run.$n.log
  done
done
