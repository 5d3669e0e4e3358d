#!/bin/bash
# Why the count-per-block library gave wrong sums at 64 KiB (results/h200x2/library_endless/README.md,
# "Why the count-per-block build was wrong"): five builds of the same 2-rank all-reduce winners side by
# side on one 2 x H200 lease, every driver with the same calls (1,000 in a row per size, new inputs
# before each, every output element checked bit for bit, in three parts: at 64 KiB the thirds blocks
# 1, 2 and 0 of the kernel reduce) and each library's call count words read back after every call:
#   k32                 a reset every 32 calls (the committed dispatcher)
#   shared              one call count per PE, an atomic arrival and a fence at every kernel's start
#                       (what tune --emit --calls-without-end emits today)
#   per_block           one count per block, read at the kernel's start (commit c3e684b, measured wrong)
#   per_block_volatile  the same, the count read by a volatile load (not through the L1 cache)
#   per_block_fenced    the same, a fence and a block barrier after the read (the shared count's, at
#                       every kernel's start), the count still per block
# run in the order k32, shared, per_block, per_block_volatile, per_block_fenced, twice. Sizes above
# CWT_PROBE_MAX_BYTES (default 1 MiB) are skipped: the question is at 64 KiB, the 1 KiB to 1 MiB sizes
# are the controls.
# Prepare on a CPU machine, in a git checkout (per_block is read from the history), and carry the folder:
#   python3 scripts/gpu/endless64_probe.py prepare build/endless64
# Results under $OUT: <variant>.<n>.jsonl (the driver's lines per PE and size), <variant>.<n>.probe.jsonl
# (a line per call where a part was wrong or a count word was not the calls since the size's reset, and
# the first calls and every 250th), summary.txt (endless64_probe.py summary), gpus.txt (the GPUs, their
# NVLink topology and link state, ECC counters: a fault of the machine is one of the answers), the logs.
#   WHEELS=DIR  the wheels the machine's Python lacks (env.sh)
#   STEP=build | run | all (default all): the k32 source (1.7 MB) takes minutes to compile; with the
#               machine held, STEP=build then STEP=run keeps each call under the device's limit (the
#               binaries stay in $WORK, default build/endless64-work)
#   ROUNDS (1000), RUNS (2), CWT_PROBE_MAX_BYTES (1048576)
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
set -uo pipefail
START=$(date +%s)
OUT=${OUT:-/tmp/cw-endless64}
mkdir -p "$OUT"
. scripts/gpu/env.sh
NAME=cw_nvshmem_allreduce_family
SRC=${SRC:-build/endless64}
W=${WORK:-build/endless64-work}  # in the checkout (ignored): a held machine keeps it between calls
STEP=${STEP:-all}
export CWT_PROBE_MAX_BYTES=${CWT_PROBE_MAX_BYTES:-1048576}
VARIANTS="k32 shared per_block per_block_volatile per_block_fenced"
if [ "$STEP" = build ] || [ "$STEP" = all ]; then
  rm -rf $W; mkdir -p $W
  for v in $VARIANTS; do
    mkdir -p $W/$v && cp "$SRC/$v/$NAME.h" "$SRC/$v/$NAME.cu" "$SRC/$v/${NAME}_test.cu" $W/$v/ || exit 2
    timeout ${BUILD_MAX:-420} python3 scripts/gpu/build_library_driver.py "$W/$v" "$NAME" > $W/$v/build.log 2>&1 &
  done
  wait
  echo "builds done $(( $(date +%s) - START )) s"
  for v in $VARIANTS; do cp $W/$v/build.log "$OUT/$v.build.log"; done
fi
[ "$STEP" = build ] && exit 0
{ nvidia-smi -L; nvidia-smi topo -m; nvidia-smi nvlink -s; nvidia-smi -q -d ECC; } > "$OUT/gpus.txt" 2>&1
for n in $(seq 1 ${RUNS:-2}); do
  for v in $VARIANTS; do
    if [ ! -x $W/$v/${NAME}_test ]; then echo "$v: no binary"; tail -n 5 $W/$v/build.log; continue; fi
    timeout ${RUN_MAX:-150} mpirun --allow-run-as-root -np 2 -x NCCL_NVLS_ENABLE -x NVSHMEM_DISABLE_NVLS \
        -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x CWT_PROBE_MAX_BYTES $W/$v/${NAME}_test --rounds ${ROUNDS:-1000} \
        --iters 20 > $W/$v/run.$n.log 2>&1
    echo "$v run $n rc=$? $(( $(date +%s) - START )) s"
    grep '^{"rank"' $W/$v/run.$n.log > "$OUT/$v.$n.jsonl"
    grep '^{"probe"' $W/$v/run.$n.log > "$OUT/$v.$n.probe.jsonl"
    grep -v '^{"probe"' $W/$v/run.$n.log > "$OUT/$v.run.$n.log"
    tail -n 1 "$OUT/$v.run.$n.log"
  done
done
python3 scripts/gpu/endless64_probe.py summary "$OUT" | tee "$OUT/summary.txt"
