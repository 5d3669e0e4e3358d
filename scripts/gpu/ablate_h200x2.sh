#!/bin/bash
# Where the time of a generated kernel goes: the all-reduce family's one-shot (packets, two copies by
# call parity, 20 calls per run) built as generated and with one piece of it taken out of the
# generated source at a time, timed side by side on a machine with 2 GPUs (2 x H200). A variant with
# a piece taken out is a measurement only, never something the generator emits: the bit-exact check
# still runs and says whether that variant happened to stay right. Run from the repository root.
#   base     the program as generated
#   nomark   no progress words (cw_nv_mark does nothing)
#   nofence  no nvshmem_fence in the block handoffs (cw_nv_block)
#   gpufence __threadfence() (GPU scope) there instead of nvshmem_fence (system scope)
#   bare     nomark + nofence
#   acqrel   fence.acq_rel.sys there instead of nvshmem_fence (fence.sc.sys on NVLink)
#   acqrelrx acqrel, and each polling thread's fence.acq_rel.sys after its packets arrived
# Results under $OUT: ablate.tgz (each variant's results.json/.md, the logs) and ablate.md.
#   WHEELS=DIR  install the wheels in DIR first (what the machine's Python lacks)
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
set -uo pipefail
START=$(date +%s)
OUT=${OUT:-/tmp/cw-ablate}
mkdir -p "$OUT"
. scripts/gpu/env.sh
W=/tmp/cw-ablate-work; rm -rf $W; mkdir -p $W
SIZES=${SIZES:-8KiB,16KiB,32KiB}
MPIRUN="mpirun --allow-run-as-root --bind-to none -x NCCL_NVLS_ENABLE -x NVSHMEM_DISABLE_NVLS -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x LD_LIBRARY_PATH -x PATH -np 2"
VARIANTS=${VARIANTS:-base nomark nofence gpufence bare}
for v in $VARIANTS; do
    nccl=--no-nccl; [ $v = base ] && nccl=
    python3 -m clockworks_dist.cli validate protocols/nvshmem_allreduce_family.py --backend nvshmem --np 2 \
        --topology h200x2-nv18 --sizes $SIZES --param ALGO=oneshot --calls 20 --between alternate \
        --packets ${PACKETS:-32KiB} --iters 10 --timeout 60 $nccl --launcher slurm --out $W/$v > $W/$v.prep.log 2>&1 \
        || { echo "$v: prep failed"; cat $W/$v.prep.log; continue; }
    for cu in $W/$v/build/*/*.cu; do
        case $v in
            nomark|bare) sed -i 's/__stwt(marks + 1 + blockIdx.x, (unsigned int)(op + 1));/;/; s/if (blockIdx.x == 0) __stwt(marks, (unsigned int)(op + 1));/;/' $cu ;;
        esac
        case $v in
            nofence|bare) sed -i 's/if (fence \&\& threadIdx.x == 0) nvshmem_fence();/;/' $cu ;;
            acqrel|acqrelrx) sed -i 's/if (fence \&\& threadIdx.x == 0) nvshmem_fence();/if (fence \&\& threadIdx.x == 0) asm volatile("fence.acq_rel.sys;" ::: "memory");/' $cu ;;
            gpufence) sed -i 's/if (fence \&\& threadIdx.x == 0) nvshmem_fence();/if (fence \&\& threadIdx.x == 0) __threadfence();/' $cu ;;
        esac
        [ $v = acqrelrx ] && perl -0pi -e 's/(while \(v\.y != flag \|\| v\.w != flag\) v = cw_nv_pk_load\(p \+ i\);\n  \})/$1\n  asm volatile("fence.acq_rel.sys;" ::: "memory");/' $cu
    done
    # the sbatch script's steps, with mpirun on this node in place of srun; compiled beforehand
    sed -e "s#srun --mpi=pmix --ntasks=2 --gpus-per-task=1 --kill-on-bad-exit=0#$MPIRUN#" \
        -e '/runtime.validate build/d' $W/$v/validate.sbatch > $W/$v/run.sh
    python3 -m clockworks_dist.runtime.validate build $W/$v > $W/$v.build.log 2>&1 &
done
wait  # every compile (in parallel), then the runs one at a time: they share the GPUs
echo "built $(( $(date +%s) - START )) s"
for v in $VARIANTS; do
    timeout 300 bash $W/$v/run.sh > $W/$v.log 2>&1; echo "$v rc=$? $(( $(date +%s) - START )) s"
done
wait
{
    echo "# Ablation of the generated one-shot (packets ${PACKETS:-32KiB}, alternate, 20 calls): time per call (us), graph"
    echo
    for v in $VARIANTS; do
        echo "## $v"; grep -A12 '^| size' $W/$v/results.md 2>/dev/null | head -14; echo
    done
} > "$OUT/ablate.md"
cat "$OUT/ablate.md"
tar czf "$OUT/ablate.tgz" -C $W --exclude=build --exclude='runs/*/expect*' $(cd $W && ls)
echo "done $(( $(date +%s) - START )) s"
