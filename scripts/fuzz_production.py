#!/usr/bin/env python3
"""Fuzz families for the commands that start processes and write folders: run, codegen, build,
validate, tune, and --param (issue 28, part 5). The generators follow scripts/fuzz_cli.py's
conventions (a `Case` is a pure function of (family, seed), every choice through a `Chooser`), and
fuzz_cli.py registers them for `generate` and `make_case` (not in its FAMILIES: its default plan and
its 30 s bound per case stay as they were; builds take longer).

This script runs them with the checks these commands need as well (`run_production_case`):
  injection        a file named PWNED* appeared (a path with shell syntax reached a shell)
  left_processes   a process that carries the case's mark in its environment outlived the command
  left_temp        the case's private TMPDIR is not empty after the command (a job folder, a build)
  wrote_outside    a path appeared in the case's folder outside the output folder it named
  left_folder      a folder that a refusing command must not leave behind exists
and it can send a signal mid-run (`mutation["signal"]`: TERM, HUP or INT once the ranks have
started, or after a delay): the command must then exit 128 + the signal (or, having finished first,
by the contract), and leave nothing behind.

    python scripts/fuzz_production.py --cases 300 --seed 1 --jobs 2 --no-write
    python scripts/fuzz_production.py --replay prod_run:1000003

Families (`--family`): prod_run, prod_codegen, prod_build, prod_validate, prod_tune, prod_param.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FAMILIES = ("prod_run", "prod_codegen", "prod_build", "prod_validate", "prod_tune", "prod_param")
KINDS = {"prod_run": ("np", "json_schedule", "shell_file", "signal", "json_out"),
         "prod_codegen": ("bad_out", "shell_out", "symlink_in_out", "ranks", "json_schedule"),
         "prod_build": ("shell_out", "bad_out", "symlink_in_out", "ranks", "check"),
         "prod_validate": ("bad_out", "no_gpu", "slurm_shell", "slurm_plain", "symlink_in_out", "ranks"),
         "prod_tune": ("variants", "huge_values", "loop_trace", "bad_out", "bad_emit", "symlink_in_out"),
         "prod_param": ("repeated", "on_json", "clash", "unknown")}
# fuzz_cli.py imports this module back where it registers the families: what it reads (FAMILIES,
# KINDS) is defined above, the generators are looked up when a case is made.
sys.path.insert(0, str(Path(__file__).resolve().parent))
import fuzz_cli as base  # noqa: E402
from fuzz_cli import CONTRACT, REJECT, Case, Chooser  # noqa: E402

REPO = base.REPO
R, A = "reject", "accept"
EXTRA_OUTCOMES = ("injection", "left_processes", "left_temp", "wrote_outside", "left_folder")
OUTCOMES = base.OUTCOMES + EXTRA_OUTCOMES
PRECEDENCE = ("injection", "hang", "left_processes", "wrote_outside", "left_temp", "left_folder") + base.PRECEDENCE[1:]
MARK_ENV = "CLOCKWORKS_FUZZ_CASE"
# Builds and tunes take longer than a check on two shared cores.
CASE_TIMEOUTS = {"prod_build": 240.0, "prod_tune": 120.0, "prod_run": 90.0}
SIGNALS = {"TERM": signal.SIGTERM, "HUP": signal.SIGHUP, "INT": signal.SIGINT}

SHELL_NAMES = ["out$(touch PWNED)", "out`touch PWNED`", "out;touch PWNED", "out 'q\" x", "out\ntouch PWNED\n",
               "a b/c d", "$(touch PWNED)`touch PWNED2`", "-o", "out|touch PWNED", "out&&touch PWNED"]
# (value, verdict, what to create: None, "file", "dir", "loop", "schedule")
BAD_OUTS = [("afile", R, "file"), ("ring_allreduce.py", R, None), ("/dev/null", R, None), ("", R, None),
            ("/proc/nope/x", R, None), ("loop", R, "loop"), ("a" * 300, R, None), ("nodir/deeper/out", A, None),
            ("adir", A, "dir")]


def _ring() -> bytes:
    return base._ring()


_JSON_CACHE: dict[str, dict] = {}


def _ring_json() -> dict:
    """ring_allreduce traced at 2 ranks, as `clockworks show --json` writes a schedule."""
    if "ring" not in _JSON_CACHE:
        sys.path.insert(0, str(REPO))
        from clockworks_dist.dsl import load_file

        [defn] = load_file(str(REPO / "protocols" / "ring_allreduce.py"))
        _JSON_CACHE["ring"] = json.loads(defn.trace(2).to_json())
    return json.loads(json.dumps(_JSON_CACHE["ring"]))


def _ops(data: dict, rank: int) -> list[dict]:
    found = []
    for op in data["programs"][rank]["ops"]:
        found += op["ops"] if op["kind"] == "group" else [op]
    return found


def bad_json(ch: Chooser) -> tuple[bytes, str]:
    """A schedule JSON with one inconsistent field (or not a schedule at all): (bytes, what)."""
    data = _ring_json()
    what = ch.choice(["world_up", "world_down", "world_zero", "world_huge", "peer", "peer_negative", "count",
                      "region_stop", "region_start", "numbering", "duplicate_program", "missing_program",
                      "expect_rank", "ranks_per_node", "signal_undeclared", "comm_undeclared", "not_json",
                      "truncated", "empty", "array"])
    rank = ch.randint(0, 1)
    ops = _ops(data, rank)
    if what == "world_up":
        data["world"] = ch.choice([3, 4, 64])
    elif what == "world_down":
        data["world"] = 1
    elif what == "world_zero":
        data["world"] = ch.choice([0, -1])
    elif what == "world_huge":
        data["world"] = ch.choice([10**6, 2**63 - 1])
    elif what in ("peer", "peer_negative"):
        target = next((op for op in ops if "peer" in op), None)
        if target is None:
            data["world"] = 3
        else:
            target["peer"] = ch.choice([2, 7, 10**9]) if what == "peer" else -1
    elif what == "count":
        data["programs"][rank]["buffers"][0]["count"] = ch.choice([-1, -4, -(2**40)])
    elif what in ("region_stop", "region_start"):
        target = next(op for op in ops if "dst" in op or "src" in op)
        region = target.get("dst") or target.get("src")
        if what == "region_stop":
            region["stop"] = ch.choice([10**6, 2**62])
        else:
            region["start"] = ch.choice([-1, region["stop"] + 1])
    elif what == "numbering":
        data["programs"][1]["rank"] = ch.choice([0, 5, -1])
    elif what == "duplicate_program":
        data["programs"].append(data["programs"][0])
    elif what == "missing_program":
        data["programs"].pop()
    elif what == "expect_rank":
        if data["expect"]:
            data["expect"][0]["rank"] = ch.choice([2, 99, -1])
        else:
            data["world"] = 5
    elif what == "ranks_per_node":
        data["ranks_per_node"] = ch.choice([0, 3, -2])
    elif what == "signal_undeclared":
        ops.append({"kind": "wait_until", "loc": {"file": "x.py", "line": 1},
                    "signal": {"signal": "nope", "index": 0}, "cmp": "ge", "value": 1})
        data["programs"][rank]["ops"].append(ops[-1])
    elif what == "comm_undeclared":
        target = next((op for op in ops if "comm" in op), None)
        if target is None:
            data["world"] = 6
        else:
            target["comm"] = "nope"
    elif what == "not_json":
        return b"{not json", what
    elif what == "truncated":
        return json.dumps(data).encode()[: ch.randint(1, 200)], what
    elif what == "empty":
        return b"", what
    else:
        return b"[1, 2]", what
    return json.dumps(data).encode(), what


def _out_value(ch: Chooser, files: dict, dirs: list, mutation: dict) -> tuple[str, str]:
    value, verdict, make = ch.choice(BAD_OUTS)
    if value == "ring_allreduce.py":  # the schedule file itself
        files[value] = _ring()
    if make == "file":
        files[value] = b"keep me\n"
    elif make == "dir":
        dirs.append(value)
    elif make == "loop":
        mutation.setdefault("symlinks", []).append(["loop", "loop"])
    return value, verdict


def _shell_name(ch: Chooser) -> str:
    return ch.choice(SHELL_NAMES)


def _symlink_in_out(ch: Chooser, out: str, name: str, mutation: dict, dirs: list) -> None:
    """A symlink planted in the output folder `out`, named as a file the command writes (or not),
    pointing outside it."""
    dirs.append(out)
    target = ch.choice(["../outside.txt", "/tmp/../etc/cw-fuzz-should-not-exist", "../adir"])
    mutation.setdefault("symlinks", []).append([f"{out}/{name}", target])


# ------------------------------------------------------------------------------------- families
def gen_prod_run(ch: Chooser, kind: str, timeout: float) -> Case:
    files = {"ring_allreduce.py": _ring()}
    dirs: list[str] = []
    mutation: dict = {"subcommand": "run", "kind": kind}
    args = ["run", "ring_allreduce.py", "--timeout", "60"]
    verdict, blame = A, None
    if kind == "np":
        value, verdict = ch.choice([("1000", R), ("100000", R), ("99999999999", R), ("2", A), ("3", A),
                                    ("0", R), ("-1", R)])
        args += ["--np", value]
        blame = ("--np", "--max-ranks", value) if verdict == R else None
        if value == "1000" and ch.coin(30):
            args += ["--max-ranks", "10"]
    elif kind == "json_schedule":
        data, what = bad_json(ch)
        files["sched.json"] = data
        args = ["run", "sched.json", "--timeout", "60"]
        verdict, blame = R, ("sched.json",)
        mutation["json"] = what
    elif kind == "shell_file":
        name = _shell_name(ch).replace("\n", "_").replace("/", "_") + ".py"
        files[name] = _ring()
        args = ["run", name, "--np", "2", "--timeout", "60"]
        mutation["file"] = name
    elif kind == "signal":
        sig = ch.choice(sorted(SIGNALS))
        args += ["--np", "2", "--iters", str(ch.choice([200, 5000, 100000]))]
        mutation["signal"] = {"sig": sig, "after": ch.choice(["ranks", "ranks", 0.5, 2.0])}
    elif kind == "json_out":
        args += ["--np", "2", "--json"]
    else:
        raise ValueError(kind)
    if ch.coin(20) and kind != "json_out":
        args.append("--json")
    return _case("prod_run", kind, args, files, mutation, verdict, blame, dirs)


def gen_prod_codegen(ch: Chooser, kind: str, timeout: float) -> Case:
    files = {"ring_allreduce.py": _ring()}
    dirs: list[str] = []
    mutation: dict = {"subcommand": "codegen", "kind": kind}
    backend = ch.choice(["nccl", "nvshmem"])
    args = ["codegen", "ring_allreduce.py", "--backend", backend, "--ranks", "2"]
    verdict, blame = A, None
    if kind == "bad_out":
        value, verdict = _out_value(ch, files, dirs, mutation)
        args += ["-o", value]
        blame = ("-o", "--out") if verdict == R else None
        mutation["out"] = value
    elif kind == "shell_out":
        value = _shell_name(ch)
        args += ["-o", value]
        mutation["out"] = value
    elif kind == "symlink_in_out":
        _symlink_in_out(ch, "gen", ch.choice([f"ring_allreduce_{backend}_2.cu", "other.cu"]), mutation, dirs)
        args += ["-o", "gen"]
        verdict, blame = R, ("symlink",)
        mutation["out"] = "gen"
    elif kind == "ranks":
        value, verdict = ch.choice([("300", R), ("100000", R), ("129", R), ("4", A)])
        args[args.index("--ranks") + 1] = value
        args += ["-o", "gen"]
        blame = ("--max-ranks",) if verdict == R else None
        mutation["out"] = "gen"
        if verdict == R:
            mutation["absent"] = ["gen"]
    elif kind == "json_schedule":
        data, what = bad_json(ch)
        files["sched.json"] = data
        args = ["codegen", "sched.json", "--backend", backend, "-o", "gen"]
        verdict, blame = R, ("sched.json",)
        mutation.update(json=what, out="gen", absent=["gen"])
    else:
        raise ValueError(kind)
    if ch.coin(30):
        args.append("--json")
    return _case("prod_codegen", kind, args, files, mutation, verdict, blame, dirs)


def gen_prod_build(ch: Chooser, kind: str, timeout: float) -> Case:
    files = {"ring_allreduce.py": _ring()}
    dirs: list[str] = []
    mutation: dict = {"subcommand": "build", "kind": kind}
    args = ["build", "ring_allreduce.py", "--backend", "nccl", "--ranks", "2"]
    verdict, blame = A, None
    if kind == "shell_out":
        value = _shell_name(ch)
        args += ["-o", value]
        mutation["out"] = value
    elif kind == "bad_out":
        value, verdict = _out_value(ch, files, dirs, mutation)
        if verdict == A:  # a real build of a plain folder: covered by shell_out, keep the cases short
            value, verdict = "/dev/null", R
        args += ["-o", value]
        blame = ("-o", "--out")
        mutation["out"] = value
    elif kind == "symlink_in_out":
        _symlink_in_out(ch, "gen", ch.choice(["ring_allreduce_nccl_2", "ring_allreduce_nccl_2.cu"]), mutation, dirs)
        args += ["-o", "gen"]
        verdict, blame = R, ("symlink",)
        mutation["out"] = "gen"
    elif kind == "ranks":
        args[args.index("--ranks") + 1] = ch.choice(["300", "100000"])
        args += ["-o", "gen"]
        verdict, blame = R, ("--max-ranks",)
        mutation.update(out="gen", absent=["gen"])
    elif kind == "check":
        args = ["build", "--check"] + (["--backend", ch.choice(["nccl", "nvshmem"])] if ch.coin() else [])
    else:
        raise ValueError(kind)
    if ch.coin(30):
        args.append("--json")
    return _case("prod_build", kind, args, files, mutation, verdict, blame, dirs)


def gen_prod_validate(ch: Chooser, kind: str, timeout: float) -> Case:
    files = {"ring_allreduce.py": _ring()}
    dirs: list[str] = []
    mutation: dict = {"subcommand": "validate", "kind": kind}
    args = ["validate", "ring_allreduce.py", "--np", "2", "--sizes", "1KiB", "--no-nccl", "--timeout", "30"]
    verdict, blame = R, None
    if kind == "bad_out":
        value, _verdict = _out_value(ch, files, dirs, mutation)
        args += ["--out", value]
        mutation["out"] = value
    elif kind == "no_gpu":  # this machine has none: refused, and no empty results folder left
        args += ["--out", "results"]
        mutation.update(out="results", absent=["results"])
    elif kind == "slurm_shell":
        value = _shell_name(ch)
        args += ["--launcher", "slurm", "--out", value]
        blame = ("--out", "--launcher")
        mutation["out"] = value
    elif kind == "slurm_plain":
        args += ["--launcher", "slurm", "--out", "v"]
        verdict = A
        mutation["out"] = "v"
    elif kind == "symlink_in_out":
        _symlink_in_out(ch, "v", ch.choice(["validate.json", "validate.sbatch", "build"]), mutation, dirs)
        args += ["--launcher", "slurm", "--out", "v"]
        blame = ("symlink",)
        mutation["out"] = "v"
    elif kind == "ranks":
        args[args.index("--np") + 1] = ch.choice(["300", "100000"])
        args += ["--out", "results"]
        blame = ("--max-ranks",)
        mutation.update(out="results", absent=["results"])
    else:
        raise ValueError(kind)
    if ch.coin(30):
        args.append("--json")
    return _case("prod_validate", kind, args, files, mutation, verdict, blame, dirs)


FAMILY_SOURCE = """import clockworks_dist as cw
N = cw.size("N", 8)
{decl}
@cw.schedule(expect=cw.allreduce("x"), sizes=[N])
def fam(r):
    x = r.buffer("x", N)
{body}
    r.all_reduce(x)
"""


def gen_prod_tune(ch: Chooser, kind: str, timeout: float) -> Case:
    files: dict[str, bytes] = {}
    dirs: list[str] = []
    mutation: dict = {"subcommand": "tune", "kind": kind}
    decl, body = 'A = cw.choice("A", ["one", "two"])', "    pass"
    args_tail = ["-t", "h200x2-nv18", "--np", "2", "--sizes", "1KiB", "--dry", "--timeout", "5"]
    out = ["--out", "t"]
    verdict, blame = A, None
    if kind == "variants":
        params = ch.randint(2, 7)
        width = ch.choice([10, 100, 1000])
        decl = "\n".join(f'P{i} = cw.param("P{i}", list(range({width})))' for i in range(params))
        verdict, blame = (R, ("--max-variants",)) if width ** params > 256 else (A, None)
        mutation.update(variants=width ** params, absent=["t"] if verdict == R else [])
    elif kind == "huge_values":
        decl = f'P = cw.param("P", range({ch.choice(["10**12", "10**6", "2000"])}))'
        verdict, blame = R, ("fam.py",)
    elif kind == "loop_trace":
        decl = 'A = cw.choice("A", ["one", "loop"])'
        body = '    if A == "loop":\n        while True:\n            pass'
        args_tail[-1] = ch.choice(["2", "3"])
    elif kind == "bad_out":
        value, verdict = _out_value(ch, files, dirs, mutation)
        out = ["--out", value]
        blame = ("--out",) if verdict == R else None
    elif kind == "bad_emit":
        value, verdict = _out_value(ch, files, dirs, mutation)
        out += ["--emit", value]
        mutation["outs"] = [value]
        blame = ("--emit",) if verdict == R else None
    elif kind == "symlink_in_out":
        _symlink_in_out(ch, "t", ch.choice(["tune.json", "tune_memory.json", "tune.md"]), mutation, dirs)
        verdict, blame = R, ("symlink",)
    else:
        raise ValueError(kind)
    files["fam.py"] = FAMILY_SOURCE.format(decl=decl, body=body).encode()
    args = ["tune", "fam.py", *args_tail, *out]
    if "out" not in mutation:
        mutation["out"] = out[1]
    if ch.coin(30):
        args.append("--json")
    return _case("prod_tune", kind, args, files, mutation, verdict, blame, dirs)


def gen_prod_param(ch: Chooser, kind: str, timeout: float) -> Case:
    files: dict[str, bytes] = {}
    mutation: dict = {"subcommand": "param", "kind": kind}
    command = ch.choice(["show", "check", "codegen", "run", "predict"])
    tail = {"show": [], "check": ["--timeout", "10"], "codegen": ["-o", "gen"], "run": ["--np", "2"],
            "predict": ["-t", "h200x2-nv18", "--sizes", "1KiB"]}[command]
    ranks = [] if command == "run" else (["--ranks", "2"] if command != "codegen" else ["--ranks", "2"])
    decl = 'A = cw.choice("A", ["one", "two"])\nB = cw.param("B", [1, 2])'
    verdict, blame = R, None
    params: list[str] = []
    target = "fam.py"
    if kind == "repeated":
        name = ch.choice(["A", "B"])
        values = {"A": ["one", "two"], "B": ["1", "2"]}[name]
        first, second = ch.choice(values), ch.choice(values)
        params = [f"{name}={first}", f"{name}={second}"]
        blame = (f"--param {name}",)
    elif kind == "on_json":
        data = _ring_json()
        files["sched.json"] = json.dumps(data).encode()
        target = "sched.json"
        params = [ch.choice(["A=one", "B=1", "X=y"])]
        blame = ("--param", "sched.json")
        if command in ("show", "check", "predict"):
            verdict = R
    elif kind == "clash":
        decl = ch.choice(['NP = cw.param("N", [1, 2])', 'NC = cw.choice("N", ["a", "b"])'])
        blame = ("N",)
    elif kind == "unknown":
        params = [ch.choice(["A=three", "B=7", "Z=1", "A=", "B=-1"])]
    else:
        raise ValueError(kind)
    source = FAMILY_SOURCE.format(decl=decl, body="    pass")
    if kind == "clash":
        name = decl.split(" =")[0]
        source = source.replace("sizes=[N])", f"sizes=[N], params=[{name}])")
    files["fam.py"] = source.encode()
    args = [command, target, *ranks, *tail]
    for value in params:
        args += ["--param", value]
    mutation["params"] = params
    if ch.coin(30):
        args.append("--json")
    return _case("prod_param", kind, args, files, mutation, verdict, blame, [])


def _case(family, kind, args, files, mutation, verdict, blame, dirs) -> Case:
    expect = REJECT if verdict == R else CONTRACT
    if verdict == R:
        mutation["must"] = "this input is invalid"
    return Case(family, kind, args, files, mutation, expect, blame, None, tuple(dirs))


GENERATORS = {"prod_run": gen_prod_run, "prod_codegen": gen_prod_codegen, "prod_build": gen_prod_build,
              "prod_validate": gen_prod_validate, "prod_tune": gen_prod_tune, "prod_param": gen_prod_param}


def make_case(family: str, seed: int) -> Case:
    """The case (family, seed): the same every time."""
    ch = Chooser(random.Random(f"{family}:{seed}"))
    case = GENERATORS[family](ch, ch.choice(KINDS[family]), base.CHECK_TIMEOUT)
    case.seed = seed
    return case


# ---------------------------------------------------------------------------------------- running
def _marked(mark: str) -> list[int]:
    """Processes whose environment carries `mark` (every process a case started inherits it)."""
    needle = f"{MARK_ENV}={mark}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                if needle in handle.read().split(b"\0"):
                    with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat:
                        if stat.read().rsplit(")", 1)[1].split()[0] != "Z":
                            found.append(int(entry))
        except OSError:
            continue
    return found


def _tree(folder: Path) -> set[str]:
    found = set()
    for root, dirs, names in os.walk(folder):
        for name in dirs + names:
            found.add(os.path.relpath(os.path.join(root, name), folder))
    return found


def _ranks_started(mark: str) -> bool:
    for pid in _marked(mark):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                if b"clockworks_dist.runtime.worker" in handle.read():
                    return True
        except OSError:
            continue
    return False


def run_production_case(case: Case, case_timeout: float | None = None, keep: str | None = None) -> base.Result:
    case_timeout = case_timeout or CASE_TIMEOUTS.get(case.family, base.CASE_TIMEOUT)
    folder = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="cwprod-"))
    folder.mkdir(parents=True, exist_ok=True)
    work, tmp = folder / "work", folder / "tmp"
    work.mkdir(exist_ok=True)
    tmp.mkdir(exist_ok=True)
    mark = f"{case.id}-{os.getpid()}-{time.monotonic_ns()}"
    extra: list[tuple[str, str]] = []
    sent = None
    try:
        base.materialise(case, work)
        for link, target in case.mutation.get("symlinks", []):
            (work / link).parent.mkdir(parents=True, exist_ok=True)
            os.symlink(target, work / link)
        before = _tree(work)
        # no empty entry in PYTHONPATH: it would put the case's folder on sys.path, where a case file named
        # json.py shadows the standard library (the installed `clockworks` script never sees the folder)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
                   PYTHONHASHSEED="0", PYTHONDONTWRITEBYTECODE="1", NO_COLOR="1", COLUMNS="120",
                   TMPDIR=str(tmp), **{MARK_ENV: mark})
        env.pop("PYTHONSTARTUP", None)
        start = time.monotonic()
        proc = subprocess.Popen(base.cli_argv(case), cwd=work, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                preexec_fn=base._limit_resources)
        plan = case.mutation.get("signal")
        try:
            if plan:
                deadline = start + min(60.0, case_timeout / 2)
                while proc.poll() is None and time.monotonic() < deadline:
                    if plan["after"] == "ranks" and _ranks_started(mark):
                        time.sleep(0.3)
                        break
                    if plan["after"] != "ranks" and time.monotonic() - start >= plan["after"]:
                        break
                    time.sleep(0.05)
                if proc.poll() is None:
                    sent = SIGNALS[plan["sig"]]
                    proc.send_signal(sent)
            out, err = proc.communicate(timeout=max(1.0, case_timeout - (time.monotonic() - start)))
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the case's own session
            out, err = proc.communicate()
            timed_out = True
        seconds = time.monotonic() - start
        time.sleep(0.2)
        left = _marked(mark)
        if left:
            extra.append(("left_processes", f"{len(left)} process(es) of the case still running after it ended"))
            for pid in left:  # ours: they carry the case's mark
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        pwned = [p for p in work.rglob("PWNED*")] + [p for p in tmp.rglob("PWNED*")] + \
            [p for p in REPO.glob("PWNED*")]
        if pwned:
            extra.append(("injection", f"shell syntax ran: {', '.join(map(str, pwned[:3]))}"))
        if any(tmp.iterdir()):
            extra.append(("left_temp", f"TMPDIR not empty: {sorted(os.listdir(tmp))[:5]}"))
        out_dir = case.mutation.get("out")
        after = _tree(work)
        new = sorted(after - before)
        outs = [os.path.normpath(o) for o in [out_dir, *case.mutation.get("outs", [])] if o]
        if out_dir is not None and out_dir != "":
            outside = [p for p in new if not any(p == o or p.startswith(o + os.sep) or o.startswith(p + os.sep)
                                                 for o in outs)]
            if outside:
                extra.append(("wrote_outside", f"wrote {outside[:3]} outside {out_dir!r}"))
        for absent in case.mutation.get("absent", []):
            if (work / absent).exists() and absent not in before:
                extra.append(("left_folder", f"{absent} was left behind"))
        if (folder / "outside.txt").exists() or (work / "outside.txt").exists():
            extra.append(("wrote_outside", "wrote through a symlink planted in the output folder"))
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)
    stdout = (out or b"").decode("utf-8", "replace")
    stderr = (err or b"").decode("utf-8", "replace")
    code = None if timed_out else proc.returncode
    outcome, problems = base.classify(case, code, stdout, stderr, case_timeout)
    if sent is not None and code == 128 + sent:
        problems = [p for p in problems if p[0] not in ("wrong_exit", "bad_json")]
    elif sent is not None and code == -sent and sent != signal.SIGINT:
        # SIGTERM/SIGHUP before the command set its handlers (while Python starts): the default
        # action ended it, silently, before it had started anything; what it left is checked below.
        # (SIGINT then is Python's KeyboardInterrupt, with its traceback: that stays reported.)
        problems = [p for p in problems if p[0] not in ("wrong_exit", "bad_json")]
    problems += extra
    outcome = min((p[0] for p in problems), key=PRECEDENCE.index, default="clean")
    return base.Result(case, outcome, problems, code, seconds, stdout, stderr)


def summarise(results, families) -> dict:
    counts = {f: {o: 0 for o in OUTCOMES} for f in families}
    by_kind: dict = {f: {} for f in families}
    examples: dict = {f: {} for f in families}
    for result in sorted(results, key=lambda r: (r.case.family, r.case.seed)):
        fam = result.case.family
        counts[fam][result.outcome] += 1
        kind = by_kind[fam].setdefault(result.case.kind, {})
        kind[result.outcome] = kind.get(result.outcome, 0) + 1
        if result.outcome != "clean":
            bucket = examples[fam].setdefault(result.outcome, [])
            if len(bucket) < base.EXAMPLES_PER_OUTCOME:
                bucket.append(base.example(result))
    return {"counts": counts, "by_kind": by_kind, "examples": examples}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=120)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--family", action="append", choices=FAMILIES)
    parser.add_argument("--replay", metavar="FAMILY:SEED")
    parser.add_argument("--keep", metavar="DIR")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--out-dir", default=str(base.RESULTS_DIR))
    args = parser.parse_args(argv)
    if args.replay:
        family, seed = args.replay.split(":")
        result = run_production_case(make_case(family, int(seed)), keep=args.keep)
        print(base.describe(result))
        print(result.problems)
        return 0 if result.outcome == "clean" else 1
    families = tuple(args.family) if args.family else FAMILIES
    planned = base.plan(args.cases, args.seed, families)
    cases = [make_case(f, s) for f, s in planned]
    if args.list:
        for case in cases:
            print(case.id, case.command(), case.mutation.get("signal") or "")
        return 0
    results = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for result in pool.map(run_production_case, cases):
            results.append(result)
            if result.outcome != "clean":
                print(f"{result.case.id} {result.outcome}: {result.case.command()!r} -> {result.exit_code}: "
                      f"{result.problems}", flush=True)
    summary = summarise(results, families)
    for fam in families:
        row = {o: n for o, n in summary["counts"][fam].items() if n}
        print(f"{fam}: {sum(row.values())} case(s): {row}")
    if not args.no_write:
        out = Path(args.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "fuzz_production.json").write_text(json.dumps(summary, indent=2) + "\n")
    return 0 if all(r.outcome == "clean" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
