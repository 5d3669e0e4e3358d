#!/bin/bash
# The all-reduce dispatcher emitted from the committed tune results (results/h200x2/tune_all/dispatch:
# cw_nvshmem_allreduce_family.{h,cu} and its test driver), built and run on 2 GPUs (2 x H200) in one
# call: every tuned size called more than 2 K times (crossing resets, new inputs before every call,
# every output element compared bit for bit), then the sizes interleaved (a reset at every call), then
# each size timed per call eagerly and as a CUDA graph of 4 K calls (resets included), with NCCL's own
# all-reduce measured at the same sizes (bench_nccl, CUDA graph). Run from the repository root.
# Results under $OUT: dispatch.jsonl (one line per PE and size), nccl.jsonl, dispatch.md, the logs.
#   WHEELS=DIR  install the wheels in DIR first (what the machine's Python lacks)
#   LIB=DIR     the emitted library to run (default: the committed one)
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
set -uo pipefail
START=$(date +%s)
OUT=${OUT:-/tmp/cw-dispatch}
mkdir -p "$OUT"
. scripts/gpu/env.sh  # multicast off, the wheels, PYTHONPATH
LIB=${LIB:-results/h200x2/tune_all/dispatch}
NAME=cw_nvshmem_allreduce_family
W=/tmp/cw-dispatch-work; rm -rf $W; mkdir -p $W
cp "$LIB"/$NAME.h "$LIB"/$NAME.cu "$LIB"/${NAME}_test.cu $W/ || exit 2

# 1. build: the library and its driver in one nvcc line (relocatable device code, NVSHMEM's wheel, MPI)
timeout ${BUILD_MAX:-900} python3 scripts/gpu/build_library_driver.py "$W" "$NAME" > $W/build.log 2>&1
echo "build rc=$? $(( $(date +%s) - START )) s"; tail -n 3 $W/build.log; cp $W/build.log "$OUT/"
[ -x $W/${NAME}_test ] || exit 2

# 2. run: every size, the checks, the times (one JSON line per PE and size)
timeout ${RUN_MAX:-300} mpirun --allow-run-as-root -np 2 -x NCCL_NVLS_ENABLE -x NVSHMEM_DISABLE_NVLS \
    -x TORCH_SYMM_MEM_DISABLE_MULTICAST $W/${NAME}_test --iters ${ITERS:-20} > $W/run.log 2>&1
RC=$?
echo "run rc=$RC $(( $(date +%s) - START )) s"
grep '^{' $W/run.log > "$OUT/dispatch.jsonl"; cp $W/run.log "$OUT/"; tail -n 4 $W/run.log

# 3. NCCL's own all-reduce at the same sizes, and the table
timeout ${NCCL_MAX:-300} python3 - "$W" "$OUT" "$LIB/$NAME.json" > $W/nccl.log 2>&1 <<'EOF'
import json, sys
from pathlib import Path
from clockworks_dist.runtime import validate
from clockworks_dist.dsl.message import size_text
work, out, described = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(Path(sys.argv[3]).read_text())
sizes = [row["bytes"] for row in described["sizes"]]
binary = validate.build_nccl_bench(str(work / "nccl"))
_header, cells, problem = validate.run_nccl_bench(binary, validate.NCCL_COLLECTIVE["allreduce"], sizes, 2, 240,
                                                   str(work / "nccl"))
(out / "nccl.jsonl").write_text("".join(json.dumps(cells[n]) + "\n" for n in sorted(cells)))
mine = [json.loads(line) for line in (out / "dispatch.jsonl").read_text().splitlines() if line.strip()]
rows = ["| bytes per PE | kernel | between calls | checked (both PEs) | mismatches | eager us | graph us | "
        "NCCL graph us | NCCL / ours |", "|---:|---|---|---:|---:|---:|---:|---:|---:|"]
for row in described["sizes"]:
    n = row["bytes"]
    lines = [m for m in mine if m["bytes"] == n]
    graph = max((m["graph_us"] for m in lines), default=None)
    eager = max((m["eager_us"] for m in lines), default=None)
    nccl = (cells.get(n) or {}).get("graph_us")
    ratio = f"{nccl / graph:.2f}x" if nccl and graph and graph > 0 else "-"
    rows.append(f"| {size_text(n)} | {row['label']} | {row['between']} | "
                f"{sum(m['checked'] for m in lines)} | {sum(m['mismatches'] for m in lines)} | "
                f"{eager if eager is not None else '-'} | {graph if graph is not None else '-'} | "
                f"{nccl if nccl is not None else '-'} | {ratio} |")
head = [f"# {described['library']} on 2 GPUs: checked and timed per call", "",
        f"Reset every {described['reset_every']} calls; graph: {4 * described['reset_every']} calls per graph, "
        "per call, the resets included. NCCL: bench_nccl's all-reduce, CUDA graph, per call.",
        *([f"NCCL: {problem}"] if problem else []), ""]
(out / "dispatch.md").write_text("\n".join(head + rows) + "\n")
print("\n".join(head + rows))
EOF
echo "nccl rc=$? $(( $(date +%s) - START )) s"; cp $W/nccl.log "$OUT/"; cat "$OUT/dispatch.md" 2>/dev/null
exit $RC
