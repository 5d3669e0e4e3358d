#!/bin/bash
# The emitted all-reduce library from PyTorch on 2 GPUs (2 x H200), in one call: the library built
# with the module's shim into a shared object (clockworks_dist.torch) and, beside it, with its MPI
# test driver (as dispatch_h200x2.sh); the driver run under mpirun (checks and times); the module's
# tests that need GPUs (torchrun inside pytest); scripts/bench_torch.py under torchrun (ours vs the
# C driver's figures vs torch.distributed's NCCL vs torch symmetric memory, every output checked).
# Run from the repository root. Results under $OUT/torch.tgz: torch.json, torch.md, dispatch.jsonl,
# the logs.
#   WHEELS=DIR  install the wheels in DIR first (what the machine's Python lacks)
#   DEADLINE_S  the whole script's time (default 540 s): each step gets at most what is left
#   BENCH_ARGS  more options for scripts/bench_torch.py (--reps, --budget-ms, --sizes)
#   LIB=DIR  the emitted library (default: the committed dispatcher); DRIVER_ARGS  the C driver's options
#   (default --iters 20; e.g. --rounds 1000 --iters 20), DRIVER_MAX its time (default 120 s)
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
set -uo pipefail
START=$(date +%s)
END=$(( START + ${DEADLINE_S:-540} ))
left() { local l=$(( END - $(date +%s) )); [ $l -gt 5 ] && echo $l || echo 5; }
OUT=${OUT:-/tmp/cw-torch-out}
R=/tmp/cw-torch; rm -rf $R; mkdir -p $R "$OUT"
pack() { tar czf "$OUT/torch.tgz" -C $R --exclude='*.so' --exclude=cache --exclude=work . ; }
. scripts/gpu/env.sh  # multicast off, the wheels, PYTHONPATH
export CLOCKWORKS_CACHE=$R/cache
LIB=${LIB:-results/h200x2/tune_all/dispatch}
NAME=cw_nvshmem_allreduce_family
W=$R/work; mkdir -p $W
cp $LIB/$NAME.h $LIB/$NAME.cu $LIB/${NAME}_test.cu $W/ || exit 2
nvidia-smi -L > $R/gpus.txt 2>&1
python3 -c "import torch; print('torch', torch.__version__, 'nccl', torch.cuda.nccl.version())" >> $R/gpus.txt 2>&1

# 1. build, both at once: the C driver (library + driver, one nvcc line) and the module's shared object
timeout $(left) python3 scripts/gpu/build_library_driver.py "$W" "$NAME" > $R/build_driver.log 2>&1 &
DRIVER_PID=$!
T0=$(date +%s)
timeout $(left) python3 -c "
import time; t = time.monotonic()
from clockworks_dist.torch import read_library, shared_object
print(shared_object(read_library('$LIB')).name, 'built in', round(time.monotonic() - t, 1), 's')" > $R/build_torch.log 2>&1
echo "build torch rc=$? $(( $(date +%s) - T0 )) s" | tee -a $R/log.txt
wait $DRIVER_PID; echo "build driver rc=$? $(( $(date +%s) - START )) s" | tee -a $R/log.txt
pack

GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "$GPUS" -lt 2 ]; then   # a 1-GPU machine: the build, and the tests that need one GPU only
    echo "only $GPUS GPU(s): no driver run, no benchmark" | tee -a $R/log.txt
    timeout $(left) python3 -m pytest -p no:cacheprovider -q -rs tests/test_torch_module.py > $R/pytest.log 2>&1
    echo "pytest rc=$? $(( $(date +%s) - START )) s" | tee -a $R/log.txt
    tail -n 15 $R/pytest.log; pack; exit 0
fi

# 2. the C driver: every size checked, then timed (eager, CUDA graph of 4 K calls)
timeout $(( $(left) < ${DRIVER_MAX:-120} ? $(left) : ${DRIVER_MAX:-120} )) mpirun --allow-run-as-root -np 2 -x NCCL_NVLS_ENABLE -x NVSHMEM_DISABLE_NVLS \
    -x TORCH_SYMM_MEM_DISABLE_MULTICAST $W/${NAME}_test ${DRIVER_ARGS:---iters 20} > $R/driver.log 2>&1
echo "driver rc=$? $(( $(date +%s) - START )) s" | tee -a $R/log.txt
grep '^{' $R/driver.log > $R/dispatch.jsonl; tail -n 3 $R/driver.log
pack

# 3. the benchmark, in one torchrun (both ranks in this one step)
timeout $(( $(left) < 300 ? $(left) : 300 )) python3 -m torch.distributed.run --standalone --nproc_per_node=2 \
    scripts/bench_torch.py --library $LIB --driver $R/dispatch.jsonl --out $R ${BENCH_ARGS:-} > $R/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s) - START )) s" | tee -a $R/log.txt
tail -n 40 $R/bench.log
pack

# 4. the module's tests, the GPU ones included (they start torchrun themselves)
timeout $(left) python3 -m pytest -p no:cacheprovider -q -rs tests/test_torch_module.py > $R/pytest.log 2>&1
echo "pytest rc=$? $(( $(date +%s) - START )) s" | tee -a $R/log.txt
tail -n 15 $R/pytest.log
pack
cat $R/log.txt
