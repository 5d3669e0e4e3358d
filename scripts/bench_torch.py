"""The emitted all-reduce library from PyTorch, beside PyTorch's own all-reduces, every output checked.

Run under torchrun, one process per GPU (scripts/gpu/torch_h200x2.sh does it, with the library's C
driver in the same call):

    torchrun --nproc_per_node=2 scripts/bench_torch.py --library results/h200x2/tune_all/dispatch \\
        --driver dispatch.jsonl --out results/h200x2/torch

For each tuned size of the library (bytes per rank, float32):
- ours, through `clockworks_dist.torch`: the library's own buffers (`input_tensor`, `output_tensor`:
  no copy), a CUDA graph of 4 K calls (K = calls between resets, as the C driver's graph) and eager
  calls; and `all_reduce(t)` in place on an ordinary tensor (a copy in and out per call), graph;
- the same library from its C driver (`--driver`: its JSON lines, measured in the same GPU session);
- `torch.distributed.all_reduce` (NCCL), in place, graph and eager;
- `torch.ops.symm_mem.one_shot_all_reduce_out` and `two_shot_all_reduce_` (symmetric memory, CUDA
  backend, multicast off), graph and eager.
Every output is compared bit for bit with the sum its inputs must give (small integers: float32 sums
are exact), for each way of calling; new inputs before every call in a check round of 2 K + 3 calls
of ours (resets crossed). A time is the median over `--reps` timed runs of the time per call (CUDA
events around `--replays` graph replays, or around back-to-back eager calls), the slowest rank's.
Rank 0 writes torch.json and torch.md into --out.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import clockworks_dist.torch as cwt  # noqa: E402
from clockworks_dist.torch.describe import size_text  # noqa: E402


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--library", default=str(ROOT / "results" / "h200x2" / "tune_all" / "dispatch"))
    ap.add_argument("--driver", default=None, help="the C driver's JSON lines (one per rank and size)")
    ap.add_argument("--out", default=None, help="folder for torch.json and torch.md (rank 0)")
    ap.add_argument("--cache", default=None, help="the shared object's cache folder")
    ap.add_argument("--sizes", default=None, help="comma-separated bytes per rank (default: every tuned size)")
    ap.add_argument("--reps", type=int, default=5, help="timed runs per figure (the median is reported)")
    ap.add_argument("--replays", type=int, default=20, help="graph replays (or eager calls / 4K) per timed run")
    ap.add_argument("--budget-ms", type=float, default=60.0, help="at most this long per timed run (large sizes)")
    return ap.parse_args(argv)


# ------------------------------------------------------------------------------------ values

def values(n: int, rank: int, key: int, device) -> torch.Tensor:
    """Small integers 1..4 as float32, a different pattern per rank and key."""
    i = torch.arange(n, device=device, dtype=torch.int64)
    return ((i * 7 + rank * 13 + key * 5) % 4 + 1).to(torch.float32)


def expected(n: int, world: int, key: int, device) -> torch.Tensor:
    return sum(values(n, r, key, device) for r in range(world))


class Checks:
    """Elements compared and mismatches, per (size, way)."""

    def __init__(self):
        self.rows: dict[tuple[int, str], list[int]] = {}

    def compare(self, nbytes: int, way: str, got: torch.Tensor, want: torch.Tensor) -> None:
        row = self.rows.setdefault((nbytes, way), [0, 0])
        bad = int((got.view(torch.int32) != want.view(torch.int32)).sum().item())
        row[0] += got.numel()
        row[1] += bad


# ------------------------------------------------------------------------------------ timing

def sync_all():
    torch.cuda.synchronize()
    dist.barrier()
    torch.cuda.synchronize()


def time_runs(launch, per_run: int, reps: int) -> float:
    """Median over `reps` of the time per call (us) of `launch()` run once per timed run, which
    makes `per_run` calls."""
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        sync_all()
        start.record()
        launch()
        stop.record()
        stop.synchronize()
        times.append(1e3 * start.elapsed_time(stop) / per_run)
    return statistics.median(times)


def graph_of(calls, count: int, stream=None):
    """A CUDA graph of `count` calls of `calls()`, warmed up on a side stream first (torch's advice),
    captured on `stream` (default: torch's own capture stream)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        calls()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        for _ in range(count):
            calls()
    g.replay()
    torch.cuda.synchronize()
    return g


def timed_graph(calls, per_graph: int, replays: int, reps: int, stream=None):
    g = graph_of(calls, per_graph, stream)

    def launch():
        for _ in range(replays):
            g.replay()

    return g, time_runs(launch, replays * per_graph, reps)


def timed_eager(call, count: int, reps: int) -> float:
    for _ in range(2):
        call()

    def launch():
        for _ in range(count):
            call()

    return time_runs(launch, count, reps)


# ------------------------------------------------------------------------------------ the ways

def bench_size(nbytes: int, lib, world: int, rank: int, device, args, checks: Checks, hint_us: float):
    n = nbytes // 4
    K = lib.info.reset_every
    per_graph = 4 * K
    # timed runs of at most --budget-ms each: fewer replays at the large sizes
    replays = max(1, min(args.replays, int(args.budget_ms * 1e3 / max(hint_us * per_graph, 1e-3))))
    eager_calls = replays * per_graph
    row: dict[str, float | str | None] = {}

    # ours: check rounds with new inputs before every call (resets crossed), in place on a tensor
    t = torch.empty(n, device=device, dtype=torch.float32)
    for call in range(2 * K + 3):
        t.copy_(values(n, rank, call, device))
        lib.all_reduce(t)
        checks.compare(nbytes, "ours, all_reduce(t) in place, eager", t, expected(n, world, call, device))
    # ours, zero-copy, graph: the library's own buffers
    x, out = lib.input_tensor(nbytes), lib.output_tensor(nbytes)
    x.copy_(values(n, rank, 100, device))
    _g, row["ours_graph_us"] = timed_graph(lambda: lib.all_reduce(x, out=out), per_graph, replays, args.reps)
    checks.compare(nbytes, "ours, library buffers, graph", out, expected(n, world, 100, device))
    del _g
    # ours, zero-copy, graph captured on the library's own stream: no fork and join of streams in it
    x.copy_(values(n, rank, 106, device))
    _g, row["ours_graph_own_stream_us"] = timed_graph(lambda: lib.all_reduce(x, out=out), per_graph, replays,
                                                      args.reps, stream=lib.stream)
    checks.compare(nbytes, "ours, library buffers, graph captured on lib.stream", out, expected(n, world, 106, device))
    del _g
    # ours, zero-copy, eager (on the current stream: the library's stream is joined by events)
    x.copy_(values(n, rank, 101, device))
    row["ours_eager_us"] = timed_eager(lambda: lib.all_reduce(x, out=out), eager_calls, args.reps)
    checks.compare(nbytes, "ours, library buffers, eager", out, expected(n, world, 101, device))
    # ours, eager on the library's own stream (no events between the streams)
    with torch.cuda.stream(lib.stream):
        x.copy_(values(n, rank, 102, device))
        row["ours_eager_own_stream_us"] = timed_eager(lambda: lib.all_reduce(x, out=out), eager_calls, args.reps)
        checks.compare(nbytes, "ours, library buffers, eager on lib.stream", out, expected(n, world, 102, device))
    torch.cuda.synchronize()
    # ours, in place on an ordinary tensor (copies in and out), graph: timed on zeros (a sum of zeros
    # stays zero, so the in-place repeats neither grow nor overflow), checked with a graph of one call
    t.zero_()
    _g, row["ours_inplace_graph_us"] = timed_graph(lambda: lib.all_reduce(t), per_graph, replays, args.reps)
    del _g
    src = values(n, rank, 103, device)
    g = graph_of(lambda: (t.copy_(src), lib.all_reduce(t)), 1)
    checks.compare(nbytes, "ours, all_reduce(t) in place, graph", t, expected(n, world, 103, device))
    del g

    # NCCL through torch.distributed, in place
    u = torch.zeros(n, device=device, dtype=torch.float32)
    _g, row["nccl_graph_us"] = timed_graph(lambda: dist.all_reduce(u), per_graph, replays, args.reps)
    del _g
    u.zero_()
    row["nccl_eager_us"] = timed_eager(lambda: dist.all_reduce(u), eager_calls, args.reps)
    src = values(n, rank, 104, device)
    g = graph_of(lambda: (u.copy_(src), dist.all_reduce(u)), 1)
    checks.compare(nbytes, "NCCL dist.all_reduce, graph", u, expected(n, world, 104, device))
    del g
    u.copy_(values(n, rank, 105, device))
    dist.all_reduce(u)
    checks.compare(nbytes, "NCCL dist.all_reduce, eager", u, expected(n, world, 105, device))

    symm_mem_ways(nbytes, n, world, rank, device, per_graph, replays, eager_calls, args, checks, row)
    return row


def symm_mem_ways(nbytes, n, world, rank, device, per_graph, replays, eager_calls, args, checks, row):
    import torch.distributed._symmetric_memory as symm_mem

    group_name = dist.group.WORLD.group_name
    buf = symm_mem.empty(n, dtype=torch.float32, device=device)
    symm_mem.rendezvous(buf, group_name)
    out = torch.empty(n, device=device, dtype=torch.float32)
    one = torch.ops.symm_mem.one_shot_all_reduce_out
    two = torch.ops.symm_mem.two_shot_all_reduce_
    try:
        buf.copy_(values(n, rank, 106, device))
        _g, row["symm_one_shot_graph_us"] = timed_graph(lambda: one(buf, "sum", group_name, out), per_graph, replays,
                                                        args.reps)
        del _g
        checks.compare(nbytes, "symm_mem one_shot_all_reduce_out, graph", out, expected(n, world, 106, device))
        buf.copy_(values(n, rank, 107, device))
        row["symm_one_shot_eager_us"] = timed_eager(lambda: one(buf, "sum", group_name, out), eager_calls, args.reps)
        checks.compare(nbytes, "symm_mem one_shot_all_reduce_out, eager", out, expected(n, world, 107, device))
    except Exception as exc:  # noqa: BLE001 (a baseline that cannot run at a size is recorded, not fatal)
        row["symm_one_shot_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    try:
        buf.zero_()
        _g, row["symm_two_shot_graph_us"] = timed_graph(lambda: two(buf, "sum", group_name), per_graph, replays,
                                                        args.reps)
        del _g
        buf.zero_()
        row["symm_two_shot_eager_us"] = timed_eager(lambda: two(buf, "sum", group_name), eager_calls, args.reps)
        src = values(n, rank, 108, device)
        g = graph_of(lambda: (buf.copy_(src), two(buf, "sum", group_name)), 1)
        checks.compare(nbytes, "symm_mem two_shot_all_reduce_, graph", buf, expected(n, world, 108, device))
        del g
        buf.copy_(values(n, rank, 109, device))
        two(buf, "sum", group_name)
        checks.compare(nbytes, "symm_mem two_shot_all_reduce_, eager", buf, expected(n, world, 109, device))
    except Exception as exc:  # noqa: BLE001
        row["symm_two_shot_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    torch.cuda.synchronize()


# ------------------------------------------------------------------------------------ report

def driver_rows(path: str | None) -> dict[int, dict]:
    """The C driver's figures per size: the slowest rank's graph and eager time, elements checked and
    mismatches over the ranks."""
    rows: dict[int, dict] = {}
    if not path or not Path(path).is_file():
        return rows
    for line in Path(path).read_text().splitlines():
        if not line.startswith("{"):
            continue
        m = json.loads(line)
        r = rows.setdefault(m["bytes"], {"graph_us": 0.0, "eager_us": 0.0, "checked": 0, "mismatches": 0})
        r["graph_us"] = max(r["graph_us"], m["graph_us"])
        r["eager_us"] = max(r["eager_us"], m["eager_us"])
        r["checked"] += m["checked"]
        r["mismatches"] += m["mismatches"]
    return rows


def fmt(v) -> str:
    return "-" if v is None else f"{v:.2f}"


def table(result: dict) -> str:
    d = result["driver"]
    lines = [
        f"# {result['library']} from PyTorch, beside PyTorch's all-reduces ({result['world']} x {result['gpu']})",
        "",
        "Time per call in microseconds, float32, bytes per rank; each figure the median of "
        f"{result['reps']} timed runs, the slowest rank's. Graph: a CUDA graph of "
        f"{result['per_graph']} calls, replayed (up to {result['replays']} replays per timed run, fewer "
        f"where a run would pass {result['budget_ms']:g} ms); eager: back-to-back calls, host launch included. "
        "Ours = `clockworks_dist.torch` (one ctypes call per collective: the library's stream joined to "
        "the caller's by events); `lib bufs` = the library's own symmetric buffers (no copy), `in place` = "
        "`all_reduce(t)` on an ordinary tensor (a copy in and out per call). C driver = the same library's "
        f"MPI test driver (`{result['library']}_test`, CUDA graph of {result['per_graph']} calls, mean "
        "over its replays), run in the same session. NCCL = `torch.distributed.all_reduce` (in place); "
        "symm_mem = `torch.ops.symm_mem.one_shot_all_reduce_out` / `two_shot_all_reduce_` (CUDA backend, "
        "multicast off). In-place ways are timed on zeros and checked in separate graphs and eager calls.",
        "",
        "| bytes per rank | ours graph (lib bufs) | ours graph (captured on lib.stream) | C driver graph | "
        "ours / C | ours graph (in place) | "
        "NCCL graph | symm one-shot graph | symm two-shot graph | ours eager | ours eager (lib.stream) | "
        "C driver eager | NCCL eager | symm one-shot eager | symm two-shot eager |",
        "|---:" * 15 + "|",
    ]
    for row in result["sizes"]:
        n = row["bytes"]
        c = d.get(str(n)) or d.get(n) or {}
        ratio = (f"{row['ours_graph_us'] / c['graph_us']:.3f}" if c.get("graph_us") and row.get("ours_graph_us")
                 else "-")
        lines.append("| " + " | ".join([
            size_text(n), fmt(row.get("ours_graph_us")), fmt(row.get("ours_graph_own_stream_us")),
            fmt(c.get("graph_us")), ratio,
            fmt(row.get("ours_inplace_graph_us")), fmt(row.get("nccl_graph_us")),
            fmt(row.get("symm_one_shot_graph_us")), fmt(row.get("symm_two_shot_graph_us")),
            fmt(row.get("ours_eager_us")), fmt(row.get("ours_eager_own_stream_us")), fmt(c.get("eager_us")),
            fmt(row.get("nccl_eager_us")), fmt(row.get("symm_one_shot_eager_us")),
            fmt(row.get("symm_two_shot_eager_us"))]) + " |")
    lines += ["", "Every output compared bit for bit with the expected sum (elements over both ranks):", "",
              "| bytes per rank | way | elements checked | mismatches |", "|---:|---|---:|---:|"]
    for c in result["checks"]:
        lines.append(f"| {size_text(c['bytes'])} | {c['way']} | {c['checked']} | {c['mismatches']} |")
    for n, c in sorted(((int(k), v) for k, v in d.items())):
        lines.append(f"| {size_text(n)} | C driver (its own checks) | {c['checked']} | {c['mismatches']} |")
    errors = [(row["bytes"], k, v) for row in result["sizes"] for k, v in row.items() if k.endswith("_error")]
    if errors:
        lines += ["", "Baselines that did not run:", ""]
        lines += [f"- {size_text(n)}: {k[:-6]}: {v}" for n, k, v in errors]
    lines += ["", f"Software: torch {result['torch']}, NCCL {result['nccl']}, {result['nvshmem']}; "
              f"symm_mem schemas: `{result['schemas'].get('one_shot')}`, `{result['schemas'].get('two_shot')}`."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = parse_args(argv)
    for key in ("NCCL_NVLS_ENABLE", "NVSHMEM_DISABLE_NVLS"):
        os.environ.setdefault(key, "0" if key.startswith("NCCL") else "1")
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=device)
    rank, world = dist.get_rank(), dist.get_world_size()
    started = time.monotonic()
    lib = cwt.load(args.library, cache=args.cache)
    built_s = time.monotonic() - started
    lib.init()
    described = json.loads((Path(args.library) / f"{lib.info.name}.json").read_text())
    hints = {row["bytes"]: row.get("time_us") or 10.0 for row in described["sizes"]}
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else list(lib.info.sizes)
    checks = Checks()
    rows = []
    for nbytes in sizes:
        t0 = time.monotonic()
        row = {"bytes": nbytes, **bench_size(nbytes, lib, world, rank, device, args, checks, hints.get(nbytes, 10.0))}
        rows.append(row)
        if rank == 0:
            print(f"{size_text(nbytes)}: {json.dumps(row)} ({time.monotonic() - t0:.1f} s)", flush=True)
    gathered = [None] * world
    dist.all_gather_object(gathered, {"rows": rows, "checks": {f"{n}|{w}": v for (n, w), v in checks.rows.items()}})
    ok = True
    if rank == 0:
        merged = []
        for i, row in enumerate(rows):
            m = dict(row)
            for k, v in row.items():
                if k.endswith("_us"):
                    others = [g["rows"][i].get(k) for g in gathered]
                    m[k] = max(o for o in others if o is not None) if all(o is not None for o in others) else None
            merged.append(m)
        totals: dict[str, list[int]] = {}
        for g in gathered:
            for key, (checked, bad) in g["checks"].items():
                t = totals.setdefault(key, [0, 0])
                t[0] += checked
                t[1] += bad
        check_rows = [{"bytes": int(k.split("|", 1)[0]), "way": k.split("|", 1)[1], "checked": c, "mismatches": b}
                      for k, (c, b) in totals.items()]
        ok = all(c["mismatches"] == 0 for c in check_rows)
        schemas = {}
        for name, op in (("one_shot", "one_shot_all_reduce_out"), ("two_shot", "two_shot_all_reduce_")):
            try:
                schemas[name] = str(getattr(torch.ops.symm_mem, op).default._schema)
            except Exception as exc:  # noqa: BLE001
                schemas[name] = f"unavailable: {type(exc).__name__}"
        driver = {str(k): v for k, v in driver_rows(args.driver).items()}
        result = {"library": lib.info.name, "world": world, "gpu": torch.cuda.get_device_name(device),
                  "reps": args.reps, "replays": args.replays, "budget_ms": args.budget_ms,
                  "per_graph": 4 * lib.info.reset_every, "torch": torch.__version__,
                  "nccl": ".".join(map(str, torch.cuda.nccl.version())), "nvshmem": lib.describe().split("; ")[1],
                  "python": platform.python_version(), "build_or_cache_s": round(built_s, 1),
                  "schemas": schemas, "sizes": merged, "checks": check_rows, "driver": driver,
                  "all_bit_exact": ok and all(c["mismatches"] == 0 for c in driver.values())}
        if args.out:
            out = Path(args.out)
            out.mkdir(parents=True, exist_ok=True)
            (out / "torch.json").write_text(json.dumps(result, indent=2) + "\n")
            (out / "torch.md").write_text(table(result))
        print(table(result), flush=True)
    lib.close()
    dist.barrier()
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
