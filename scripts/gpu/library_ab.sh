#!/bin/bash
# Two emitted libraries side by side in one call: both built at once (scripts/gpu/build_library_driver.py),
# then each library's MPI driver run under mpirun one after the other, in the order A, B, A, B (every
# size checked bit for bit over many calls in a row, then timed per call, eagerly and in a CUDA graph,
# unless DRIVER_ARGS has --no-time). Results under $OUT: a.<n>.jsonl, b.<n>.jsonl, the logs.
# With more ranks than GPUs the ranks share the GPUs (the driver picks local rank mod GPUs): a check of
# the results only, no figure of a machine with a GPU per rank.
#   WHEELS=DIR     the wheels the machine's Python lacks (env.sh)
#   A=DIR, B=DIR   the two libraries (tune --emit folders; carry them: build/ is not in git); A= (empty)
#                  runs B alone
#   NAME           the library's name (default cw_nvshmem_allreduce_family)
#   NP             ranks (default 2)
#   RUNS           rounds of A then B (default 2)
#   DRIVER_ARGS    the driver's arguments (default "--iters 20")
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
set -uo pipefail
START=$(date +%s)
OUT=${OUT:-/tmp/cw-library-ab}
mkdir -p "$OUT"
. scripts/gpu/env.sh
NAME=${NAME:-cw_nvshmem_allreduce_family}
W=/tmp/cw-library-ab-work; rm -rf $W; mkdir -p $W
declare -A SRC=([a]=${A-} [b]=${B:?B=DIR})
VARIANTS="a b"; [ -n "${SRC[a]}" ] || VARIANTS="b"
for v in $VARIANTS; do
  mkdir -p $W/$v && cp "${SRC[$v]}"/$NAME.h "${SRC[$v]}"/$NAME.cu "${SRC[$v]}"/${NAME}_test.cu $W/$v/ || exit 2
  timeout ${BUILD_MAX:-400} python3 scripts/gpu/build_library_driver.py "$W/$v" "$NAME" > $W/$v/build.log 2>&1 &
done
wait
echo "builds done $(( $(date +%s) - START )) s" | tee -a "$OUT/ab.log"
{ nvidia-smi -L; echo "A=${SRC[a]} B=${SRC[b]} NP=${NP:-2} DRIVER_ARGS=${DRIVER_ARGS:---iters 20}"; } > "$OUT/gpus.txt" 2>&1
failed=0
for n in $(seq 1 ${RUNS:-2}); do
  for v in $VARIANTS; do
    cp $W/$v/build.log "$OUT/$v.build.log"
    if [ ! -x $W/$v/${NAME}_test ]; then echo "$v: no binary" | tee -a "$OUT/ab.log"; tail -n 5 $W/$v/build.log; failed=1; continue; fi
    timeout ${RUN_MAX:-200} mpirun --allow-run-as-root --oversubscribe -np ${NP:-2} -x NCCL_NVLS_ENABLE \
        -x NVSHMEM_DISABLE_NVLS -x TORCH_SYMM_MEM_DISABLE_MULTICAST $W/$v/${NAME}_test ${DRIVER_ARGS:---iters 20} \
        > $W/$v/run.$n.log 2>&1
    rc=$?
    [ $rc = 0 ] || failed=1
    echo "$v run $n rc=$rc $(( $(date +%s) - START )) s" | tee -a "$OUT/ab.log"
    grep '^{' $W/$v/run.$n.log > "$OUT/$v.$n.jsonl"; cp $W/$v/run.$n.log "$OUT/$v.run.$n.log"
    tail -n 2 $W/$v/run.$n.log | tee -a "$OUT/ab.log"
  done
done
echo "done in $(( $(date +%s) - START )) s, failed=$failed" | tee -a "$OUT/ab.log"
exit $failed
