#!/bin/bash
# The reduce that reads packets in place (lowering/packets.py `_consumed`, cw_nv_pk_reduce), checked on a
# machine with one H200: several NVSHMEM PEs share the GPU (results only, no figure of NVLink).
# 1. clockworks validate --share-gpus of the all-reduce family with --packets, one-shot and two-shot,
#    a kernel per call (the reduce ends its kernel: the waits emit no poll) and the calls fused in one
#    kernel (the waits poll, the reduce reads the payload), at NP ranks: every output bit for bit;
# 2. the emitted library before (A, carry build/lib_old) and after (B, build/lib_new), each driver's
#    checked calls at every size (--no-time), 2 PEs on the GPU.
#   WHEELS=DIR the wheels (env.sh); NP="2 4" the world sizes of 1; SIZES (default 1KiB,8KiB,32KiB) and
#   PACKETS (default 64KiB; empty: none) validate's --sizes and --packets; ALGOS (default "oneshot
#   twoshot"); EXTRA more validate options (--copy-engine 1MiB, say); LIBRARY=0 skips 2; A= (empty) runs
#   the library after (B) alone.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
set -uo pipefail
START=$(date +%s)
OUT=${OUT:-/tmp/cw-pk-reduce}
mkdir -p "$OUT"
. scripts/gpu/env.sh
nvidia-smi -L > "$OUT/gpu.txt" 2>&1
failed=0
PK=${PACKETS-64KiB}; PKFLAG=""; [ -n "$PK" ] && PKFLAG="--packets $PK"
for np in ${NP:-2 4}; do
  for algo in ${ALGOS:-oneshot twoshot}; do
    for how in "percall:--calls 4 --between alternate" "fused:--calls 4 --between alternate --fuse-calls"; do
      tag=${how%%:*}; flags=${how#*:}
      folder="$OUT/${algo}_${tag}_np$np"
      t0=$SECONDS
      timeout ${ONE_MAX:-240} python3 -m clockworks_dist.cli validate protocols/nvshmem_allreduce_family.py \
          --param ALGO=$algo --np "$np" --backend nvshmem --share-gpus $PKFLAG $flags ${EXTRA:-} \
          --sizes ${SIZES:-1KiB,8KiB,32KiB} --iters 2 --warmup 1 --timeout 60 --no-nccl --out "$folder" > "$folder.txt" 2>&1
      rc=$?
      [ $rc = 0 ] || failed=1
      echo "$algo $tag np=$np rc=$rc $((SECONDS - t0)) s" | tee -a "$OUT/pk.log"
      tail -n 8 "$folder.txt" >> "$OUT/pk.log"
      [ $rc = 0 ] || tail -n 5 "$folder"/runs/*/stderr.txt >> "$OUT/pk.log" 2>/dev/null
      rm -rf "$folder/build" "$folder/runs" "$folder/results.png"
    done
  done
done
echo "validate done $(( $(date +%s) - START )) s, failed=$failed" | tee -a "$OUT/pk.log"
if [ "${LIBRARY:-1}" = 1 ] && [ -d build/lib_new ] && { [ -z "${A-build/lib_old}" ] || [ -d "${A-build/lib_old}" ]; }; then
  OUT=$OUT/library A=${A-build/lib_old} B=build/lib_new NP=2 RUNS=1 DRIVER_ARGS="--no-time" RUN_MAX=${RUN_MAX:-300} \
      bash scripts/gpu/library_ab.sh || failed=1
fi
echo "done in $(( $(date +%s) - START )) s, failed=$failed" | tee -a "$OUT/pk.log"
# few files come back from a lent machine: everything but the log in one archive
( cd "$OUT" && tar czf /tmp/pk.tgz --exclude=pk.log . && find . -mindepth 1 ! -name pk.log -delete && mv /tmp/pk.tgz . )
exit $failed
