#!/bin/bash
# clockworks tune, measured, at 4 ranks (4 x H200, NVSwitch) for the NVSHMEM families (issue 31:
# every family tuned at 4 ranks on a 4-GPU kind). Per family protocols/nvshmem_<family>.py: small
# sizes as 20 back-to-back calls per run (each variant also with --packets 32KiB), a large size as
# one call per run; the best of each lowering measured (--top 1), bit-exact, NCCL's own collective
# beside it in the same validate call. Then the winners emitted as a library for 4 PEs
# (`tune --emit`), built with its MPI driver and run (every size checked bit for bit, timed per call
# eagerly and in a CUDA graph). Run from the repository root. Results under $OUT/tune<NP>_<family>.tgz.
#   FAMILIES="allreduce_family ..."  which families (default allreduce_family)
#   NP=N TOPO=T  the ranks and the topology tune predicts with (default 4 and h200x4-nvswitch)
#   SMALL=LIST LARGE=LIST  the sizes (default 8KiB,64KiB,1MiB and 64MiB; SMALL= or LARGE= skips that
#                          tune); LARGE_OPTS: more options of the large tune (e.g. --copy-engine 16MiB)
#   CE=SIZE CE_SIZES=LIST  also tune with the copy engine (--copy-engine SIZE, one call per run) at
#                          CE_SIZES (default 64MiB,256MiB), into <family>/copy_engine (default: not)
#   STEP=dry|tune|emit|library|all (default all = tune, emit, library: the GPU machine does it all)
#     dry      no GPU: the checker's and the predictor's pass of each tune (`tune --dry`) into $W, to
#              pass to a tune as PRE (a 4-rank check of 20 calls tries every separator: minutes a variant)
#     tune     the measured tunes; PRE=DIR: DIR/<family>/{small,large,copy_engine}/tune_memory.json
#              (from STEP=dry) copied in first, so the tune checks and predicts nothing again
#     emit     no GPU: the library of each family's winners into $W/<family>/library (--reset-every
#              RESET_EVERY, default the library's 32)
#     library  build each library with its driver and run it; LIBS=DIR: the libraries are
#              DIR/<family>/ (default $W/<family>/library); OBJECTS=1: link the NAME.o made there by
#              `build_library_driver.py --object` (on a machine with the same nvcc and NVSHMEM)
#   PARALLEL=1  the families' tunes (and builds) side by side, their GPU runs one at a time: mpiexec
#               and mpirun wrapped in a lock (flock), so no two runs share the GPUs
#   DEADLINE=S  no step starts or runs past S seconds after the script's start (default 540), so the
#               results are packed before a 600 s call ends
#   WHEELS=DIR  install the wheels in DIR first (what the machine's Python lacks)
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
set -uo pipefail
START=$(date +%s)
OUT=${OUT:-/tmp/cw-tune4}
mkdir -p "$OUT"
. scripts/gpu/env.sh
export CLOCKWORKS_CACHE=${CLOCKWORKS_CACHE:-/tmp/cw-cache}
W=${W:-/tmp/cw-tune4}; mkdir -p "$W"
FAMILIES=${FAMILIES:-allreduce_family}
NP=${NP:-4} TOPO=${TOPO:-h200x4-nvswitch}
STEP=${STEP:-all}
DEADLINE=${DEADLINE:-540}
left() { local l=$(( DEADLINE - ($(date +%s) - START) )); [ $l -gt ${1:-10000} ] && l=$1; [ $l -lt 1 ] && l=1; echo $l; }
say() { echo "$* $(( $(date +%s) - START )) s"; }
pack() {  # ARCHIVE PATH...: results under $W (no builds, binaries, objects, driver sources or runs' raw files)
    local name=$1; shift
    ( cd "$W" && ls -d "$@" > /dev/null 2>&1 ) || return 0
    tar czf "$OUT/tune${NP}_$name.tgz" -C "$W" --exclude=build --exclude='build_*' --exclude='*.bin' --exclude='*.pkl' \
        --exclude=runs --exclude='*_test' --exclude='*.o' --exclude='.*.link' --exclude=link --exclude=drv "$@"
}
has() { case " $STEP " in *" $1 "*|" all ") return 0;; esac; return 1; }

if [ "${PARALLEL:-0}" = 1 ] && [ "$STEP" != dry ] && [ "$STEP" != emit ]; then
    if command -v flock > /dev/null; then
        LOCK=/tmp/cw-gpu-lock; mkdir -p $LOCK/bin
        for launcher in mpiexec mpirun; do
            real=$(command -v $launcher) || continue
            printf '#!/bin/bash\n# one GPU run at a time (tune_family_h200x4.sh PARALLEL=1)\ncase " $* " in *" --version "*) exec %s "$@";; esac\nexec flock %s/lock %s "$@"\n' \
                "$real" "$LOCK" "$real" > $LOCK/bin/$launcher
            chmod +x $LOCK/bin/$launcher
        done
        export PATH=$LOCK/bin:$PATH
    else
        echo "no flock here: the families run one after the other"; PARALLEL=0
    fi
fi

tune_one() {  # FAMILY KIND(small|large|copy_engine) [extra tune options]: one tune into $W/FAMILY/KIND
    local family=$1 kind=$2; shift 2
    local f=protocols/nvshmem_$family.py dry=() pre=${PRE:-}
    [ "$STEP" = dry ] && dry=(--dry)
    mkdir -p "$W/$family"
    if [ -n "$pre" ] && [ -f "$pre/$family/$kind/tune_memory.json" ] && [ ! -f "$W/$family/$kind/tune_memory.json" ]; then
        mkdir -p "$W/$family/$kind" && cp "$pre/$family/$kind/tune_memory.json" "$W/$family/$kind/"
    fi
    timeout $(left ${TUNE_MAX:-600}) python3 -m clockworks_dist.cli tune $f -t $TOPO --np $NP "$@" \
        "${dry[@]}" --out "$W/$family/$kind" > "$W/$family/$kind.log" 2>&1
    say "$family $kind rc=$?"
}

tune_family() {
    local family=$1
    [ -n "${SMALL-8KiB,64KiB,1MiB}" ] && tune_one $family small --sizes ${SMALL:-8KiB,64KiB,1MiB} --calls 20 \
        --packets 32KiB --top 1
    [ -n "${LARGE-64MiB}" ] && tune_one $family large --sizes ${LARGE:-64MiB} --top 1 ${LARGE_OPTS:-}
    [ "$STEP" = dry ] || pack $family $family
    grep -h "Measured winner" "$W/$family"/*/tune.md 2>/dev/null | sed "s/^/$family: /"
}

if has tune || [ "$STEP" = dry ]; then
    if [ "$STEP" != dry ] && [ "${PARALLEL:-0}" = 1 ]; then
        # NCCL's benchmark built once before the tunes that each want it (it is cached by its source and flags)
        timeout $(left 120) python3 -c "from clockworks_dist.runtime.nccl_bench import build_nccl_bench as b; b('/tmp/cw-ncclb')" \
            > "$W/nccl_bench_build.log" 2>&1; say "NCCL benchmark rc=$?"
    fi
    pids=()
    for family in $FAMILIES; do
        if [ "${PARALLEL:-0}" = 1 ]; then tune_family $family & pids+=($!); else tune_family $family; fi
    done
    if [ -n "${CE:-}" ]; then  # the copy engine's lowering beside the kernel's own puts, one call per run
        ce_family=${CE_FAMILY:-allreduce_family}
        ce() { tune_one $ce_family copy_engine --sizes ${CE_SIZES:-64MiB,256MiB} --copy-engine $CE --top 1
               [ "$STEP" = dry ] || pack ${ce_family}_copy_engine $ce_family/copy_engine $ce_family/copy_engine.log; grep -h "Measured winner" "$W/$ce_family/copy_engine/tune.md"; }
        if [ "${PARALLEL:-0}" = 1 ]; then ce & pids+=($!); else ce; fi
    fi
    for pid in "${pids[@]}"; do wait $pid; done
    for family in $FAMILIES; do [ "$STEP" = dry ] || pack $family $family; done
fi

if has emit; then
    for family in $FAMILIES; do
        froms=()
        for kind in small large; do [ -f "$W/$family/$kind/tune.json" ] && froms+=(--from "$W/$family/$kind"); done
        reset=(); [ -n "${RESET_EVERY:-}" ] && reset=(--reset-every $RESET_EVERY)
        ( timeout $(left ${EMIT_MAX:-600}) python3 -m clockworks_dist.cli tune protocols/nvshmem_$family.py \
            --emit "$W/$family/library" "${froms[@]}" "${reset[@]}" > "$W/$family/emit.log" 2>&1
          say "$family emit rc=$?" ) &
    done
    wait
fi

if has library; then
    build_one() {
        local family=$1 lib=${LIBS:+$LIBS/$1} name=cw_nvshmem_$1
        lib=${lib:-$W/$1/library}
        mkdir -p "$W/$family/drv"
        cp "$lib/$name.h" "$lib/$name.cu" "$lib/${name}_test.cu" "$W/$family/drv/" || { say "$family: no library"; return 2; }
        local how=()
        cp "$lib/$name.json" "$W/$family/"
        if [ "${OBJECTS:-0}" = 1 ]; then cp "$lib/$name.o" "$lib/$name.o.json" "$W/$family/drv/" && how=(--from-object); fi
        timeout $(left ${BUILD_MAX:-420}) python3 scripts/gpu/build_library_driver.py "$W/$family/drv" "$name" "${how[@]}" \
            > "$W/$family/build.log" 2>&1
        local rc=$?; say "$family build ${how[*]} rc=$rc"
        if [ $rc != 0 ] && [ ${#how[@]} != 0 ]; then  # the object did not link here: the whole build
            timeout $(left ${BUILD_MAX:-420}) python3 scripts/gpu/build_library_driver.py "$W/$family/drv" "$name" \
                >> "$W/$family/build.log" 2>&1
            say "$family build rc=$?"
        fi
    }
    pids=()
    for family in $FAMILIES; do
        if [ "${PARALLEL:-0}" = 1 ]; then build_one $family & pids+=($!); else build_one $family; fi
    done
    for pid in "${pids[@]}"; do wait $pid; done
    for family in $FAMILIES; do  # the drivers one after the other: each takes the 4 GPUs
        name=cw_nvshmem_$family
        [ -x "$W/$family/drv/${name}_test" ] || { say "$family: no driver binary"; pack $family $family; continue; }
        timeout $(left ${DRIVER_MAX:-150}) mpirun --allow-run-as-root -np $NP -x NCCL_NVLS_ENABLE -x NVSHMEM_DISABLE_NVLS \
            -x TORCH_SYMM_MEM_DISABLE_MULTICAST "$W/$family/drv/${name}_test" --iters 20 > "$W/$family/driver.log" 2>&1
        say "$family driver rc=$?"
        grep '^{' "$W/$family/driver.log" > "$W/$family/driver.jsonl"; tail -n 4 "$W/$family/driver.log"
        pack $family $family
    done
fi
say done
