#!/usr/bin/env python3
"""Fuzz the `clockworks` command line with hostile inputs and check its contract on every run.

The contract: every invocation exits 0 (verified/ok), 1 (violated), 2 (bad input) or 3 (incomplete);
4 (internal error) is always a defect; no "Traceback (most recent call last)" appears on stdout or
stderr (we never pass --debug); nothing hangs; an exit-2 message names the input that was bad (the
file's basename, or the option); with --json, stdout is one JSON object whatever the exit code; and
an input that is invalid by construction (a schedule that calls sys.exit(0), a topology with a
negative bandwidth, an impossible cw.size) must not be accepted.

Families of cases (`--family`):
  protocol  mutations of the shipped protocols/*.py and protocols/buggy/*.py: delete, swap or
            duplicate a line; an integer literal to 0, -1, huge, float, bool or string; a string
            literal (op, dtype, cmp, buffer name) to a typo or a hostile C++ string; random,
            null or non-UTF-8 bytes; truncation
  body      generated schedule files with hostile bodies: sys.exit, KeyboardInterrupt and other
            BaseExceptions, printing to stdout under --json, endless loops, huge programs, huge
            signal arrays, float/bool regions, impossible cw.size constraints, bad postconditions,
            bad decorator arguments, hostile names, bad op arguments
  topology  mutations of clockworks_dist/topology/data/*.yaml (and measured/): line edits, numbers
            to 0, negative, .nan, .inf, 1e300, 1e-300, strings, null, lists; self-links, dangling
            links, duplicate ids, unknown kinds; deep nesting, alias bombs, YAML tags; injected
            bytes; truncation; run through `topology show FILE` and `predict ... -t FILE`
  options   hostile options of every subcommand: nan, -0, inf, 1e400, negative, huge, garbage,
            missing or odd files, unwritable outputs (nodir/x.json, /dev/full, a directory), and
            stdout redirected to /dev/full
  topology_type
            a field of the wrong type in a shipped topology: a list or mapping where a name or
            number goes, a number (or string) where the devices/links list or a mapping goes; run
            through `topology show FILE` and `predict ... -t FILE`; must be exit 2 naming the file
  degenerate
            schedules with no buffers, nothing on a rank, a world of 1, every rank empty, rank 0
            declaring nothing, scratch buffers only; mostly through `predict` (also check, show);
            no buffer at all must be exit 2, the others may predict
  source    a file that is not Python source given as the schedule: binary, a YAML or JSON file
            named .py, an empty file, a directory, a syntax or indentation error on line N (the
            message must name FILE:N), a bad encoding, plain text; must be exit 2 naming the file
  callable  schedule functions that are not plain functions: async def, generators, async
            generators, a function returning a generator, classes with __call__, functools.partial,
            staticmethod (each exit 2 naming FILE:LINE), a lambda (accepted: documented); rebinding
            or deleting the rank handle's attributes (r.world = 3, r.rank = 5, r.put = ..., del r.put,
            setattr(r, ...)), patching cw or cw.Rank: exit 2 naming the statement's FILE:LINE
  edges     every numeric option of check, show, predict and topology show at its edges: -0, -0.0,
            1e3, 1E-3, +5, 0x10, 1_000, whitespace, other scripts' digits, nan, inf, 0b10, 1__0;
            each accepted with its documented meaning or refused (exit 2 naming the option); and
            sizes far past a stated bound (--scale-nodes 100000, --ranks 99999999999999999999,
            --nodes 1000 for predict): exit 2 naming the option. (calibrate has no numeric option.)

Outcomes: clean, traceback, internal_error (exit 4), hang, wrong_exit (an exit outside 0-3, a
signal, or an exit the input does not allow), wrong_verdict (an input invalid by construction, one
that must be refused with exit 2, got a verdict: 0 verified or 1 violated), leftover_process (a
process of the case still alive after it exited: each case runs in its own session and process
group with a token in its environment; survivors carrying the token are reported, then killed),
outside_write (a file created, or changed, outside the case's own folder: each case gets a fresh
HOME and TMPDIR inside its folder, and the repository's top-level files, its protocols/,
clockworks_dist/, topologies/ and scripts/ (not scripts/results/) and the folder holding the case
folders are compared before and after; a source file that already exists and changes is not counted,
nor results/ or tests/, as engineers edit and write those while a run goes on; writes straight to
other absolute paths are not seen),
bad_json, unnamed_file. When a run has several problems its outcome is the first of hang,
internal_error, traceback, wrong_verdict, wrong_exit, leftover_process, outside_write, bad_json,
unnamed_file.

The families live in a registry that another module can extend: FAMILIES (the default plan),
KINDS (family -> its kinds) and GENERATORS (family -> generator(chooser, kind, check_timeout) ->
Case); scripts/fuzz_production.py registers its production families (run, codegen, build,
validate, tune) in KINDS and GENERATORS and runs them with its own runner.

Each case is a pure function of (family, seed): `--cases N --seed S` runs case k of each family with
seed S * 1_000_000 + k, families interleaved, so the same command gives the same cases every time
(as long as the shipped inputs are the same). `--replay FAMILY:SEED` reruns one case and prints
everything about it; `--keep DIR` leaves its files there.

    python scripts/fuzz_cli.py --cases 3000 --seed 1 --jobs 2
    python scripts/fuzz_cli.py --replay body:1000007 --keep /tmp/case

Writes scripts/results/fuzz_cli.json and fuzz_cli.md (`--out-dir` to put them elsewhere, `--no-write`
for none). tests/test_fuzz.py drives the same generators from Hypothesis.
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import difflib
import json
import os
import random
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROTOCOL_DIR = REPO / "protocols"
TOPOLOGY_DIR = REPO / "clockworks_dist" / "topology" / "data"
RAW_FILE = TOPOLOGY_DIR / "measured" / "raw" / "calibration_raw.jsonl"
RESULTS_DIR = REPO / "scripts" / "results"

FAMILIES = ("protocol", "body", "topology", "options", "topology_type", "degenerate", "source", "callable",
            "edges")
OUTCOMES = ("clean", "traceback", "internal_error", "hang", "wrong_exit", "wrong_verdict", "leftover_process",
            "outside_write", "bad_json", "unnamed_file")
PRECEDENCE = ("hang", "internal_error", "traceback", "wrong_verdict", "wrong_exit", "leftover_process", "outside_write",
              "bad_json", "unnamed_file")  # a run's outcome
CONTRACT = (0, 1, 2, 3)
REJECT = (2,)
BOUNDED = (2, 3)  # an endless schedule: rejected, or the search reports the bound it hit
TRACEBACK = "Traceback (most recent call last)"

CHECK_TIMEOUT = 5.0   # --timeout passed to `clockworks check`
CASE_TIMEOUT = 30.0   # wall-clock bound of one run; past it, the case is a hang
MEMORY_LIMIT = 3 * 1024**3  # address space of one run (a hostile input must not take the machine)
EXAMPLES_PER_OUTCOME = 5
SEED_STRIDE = 1_000_000


# ---------------------------------------------------------------------------------------- choices
class Chooser:
    """Every choice a generator makes goes through here: random.Random for the script, Hypothesis'
    `draw` in tests/test_fuzz.py (which overrides randint, choice and bytes)."""

    def __init__(self, rng: random.Random | None = None):
        self.rng = rng or random.Random(0)

    def randint(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def choice(self, options):
        options = list(options)
        return options[self.randint(0, len(options) - 1)]

    def coin(self, percent: int = 50) -> bool:
        return self.randint(0, 99) < percent

    def bytes(self, n: int) -> bytes:
        return bytes(self.randint(0, 255) for _ in range(n))


# ------------------------------------------------------------------------------------------- cases
@dataclass
class Case:
    """One run of `clockworks ARGS` in a fresh directory holding `files` (and empty `dirs`)."""

    family: str
    kind: str
    args: list[str]
    files: dict[str, bytes] = field(default_factory=dict)
    mutation: dict = field(default_factory=dict)
    expect: tuple[int, ...] = CONTRACT  # the exit codes this input may give
    blame: tuple[str, ...] | None = None  # an exit-2 message must contain one of these
    stdout: str | None = None  # a path stdout goes to (/dev/full), else captured
    dirs: tuple[str, ...] = ()
    seed: int | None = None

    @property
    def json(self) -> bool:
        return "--json" in self.args

    @property
    def id(self) -> str:
        return f"{self.family}:{self.seed}"

    def command(self) -> str:
        text = "clockworks " + shlex.join(self.args)
        return text + (f" > {self.stdout}" if self.stdout else "")


@dataclass
class Result:
    case: Case
    outcome: str
    problems: list[tuple[str, str]]
    exit_code: int | None
    seconds: float
    stdout: str
    stderr: str


def _fmt(value: float) -> str:
    return f"{value:g}"


def _diff(name: str, before: bytes, after: bytes, limit: int = 2500) -> str:
    a = before.decode("utf-8", "backslashreplace").splitlines()
    b = after.decode("utf-8", "backslashreplace").splitlines()
    text = "\n".join(difflib.unified_diff(a, b, f"a/{name}", f"b/{name}", n=1, lineterm=""))
    return text if len(text) <= limit else text[:limit] + f"\n... ({len(text) - limit} more characters)"


def _excerpt(data: bytes, limit: int = 3000) -> str:
    text = data.decode("utf-8", "backslashreplace")
    return text if len(text) <= limit else text[:limit] + f"\n... ({len(text) - limit} more characters)"


_CACHE: dict[str, object] = {}


def _read(path: Path) -> bytes:
    key = str(path)
    if key not in _CACHE:
        _CACHE[key] = path.read_bytes()
    return _CACHE[key]  # type: ignore[return-value]


def protocol_files() -> list[str]:
    """The shipped schedules, as paths relative to the repository."""
    found = sorted(PROTOCOL_DIR.glob("*.py")) + sorted((PROTOCOL_DIR / "buggy").glob("*.py"))
    return [str(p.relative_to(REPO)) for p in found]


def topology_files() -> list[str]:
    found = sorted(TOPOLOGY_DIR.glob("*.yaml")) + sorted((TOPOLOGY_DIR / "measured").glob("*.yaml"))
    return [str(p.relative_to(REPO)) for p in found]


def _topology_name(rel: str) -> str:
    """The basename a topology is written under: measured/h200x2-nv18.yaml would clash."""
    path = Path(rel)
    return f"{path.stem}-measured{path.suffix}" if path.parent.name == "measured" else path.name


def _ring() -> bytes:
    return _read(PROTOCOL_DIR / "ring_allreduce.py")


# --------------------------------------------------------------------------------- schedule commands
def _schedule_args(ch: Chooser, name: str, timeout: float, commands) -> list[str]:
    command = ch.choice(commands)
    if command.startswith("check"):
        args = ["check", name, "--timeout", _fmt(timeout)]
    elif command.startswith("show"):
        args = ["show", name, "--timeout", _fmt(timeout)]
    else:
        args = ["predict", name, "-t", "h200x2-nv18", "--ranks", "2", "--sizes", "1KiB..64KiB", "--timeout",
                _fmt(timeout)]
    if command.endswith("json"):
        args.append("--json")
    return args


ALL_COMMANDS = ("check", "check", "check_json", "show", "show_json", "predict", "predict_json")
CHECK_COMMANDS = ("check", "check_json")
JSON_COMMANDS = ("check_json", "show_json", "predict_json")


# ------------------------------------------------------------------------- family: protocol mutations
PROTOCOL_KINDS = ("delete_line", "swap_lines", "duplicate_line", "int_literal", "str_literal", "random_bytes",
                  "null_byte", "non_utf8", "truncate")

INT_REPLACEMENTS = [("zero", "0"), ("neg", "(-1)"), ("huge", "(2**31)"), ("huge", "(2**64)"), ("huge", "(10**30)"),
                    ("float", "2.5"), ("float", "0.5"), ("float", "float('nan')"), ("bool", "True"),
                    ("bool", "False"), ("str", '"4"')]
HOSTILE_NAMES = ['x"); system("id"); /*', "__global__", "unsigned", "", "x" * 100, "1x", "x y", "\u00e9",
                 "x\x00y", "a-b"]
BAD_WORDS = ["bogus", "", 'x"); system("id"); /*', "__global__", "unsigned"]
OTHER_STRINGS = HOSTILE_NAMES + ["%s%n", "\u202e", "x" * 10000, "\\", "\n"]
NAME_FUNCTIONS = {"buffer", "symmetric", "signal", "comm", "node_comm", "rail_comm", "compute", "size"}
EXPECT_FUNCTIONS = {"allreduce", "allgather", "reduce_scatter", "alltoall", "broadcast", "reduce"}


def _call_name(call) -> str:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _context(node, parents) -> tuple:
    """(where, key, function, in_tuple): where a literal sits, e.g. ("kw", "count", "buffer", False)."""
    holder, parent = node, parents.get(node)
    if isinstance(parent, (ast.Tuple, ast.List)):
        holder, parent = parent, parents.get(parent)
    if isinstance(parent, ast.keyword):
        call = parents.get(parent)
        return ("kw", parent.arg, _call_name(call) if isinstance(call, ast.Call) else "", holder is not node)
    if isinstance(parent, ast.Call) and holder in parent.args:
        return ("arg", parent.args.index(holder), _call_name(parent), holder is not node)
    return ("other", type(parent).__name__, "", False)


def literal_sites(source: bytes, kind: type) -> list[tuple[int, int, int, object, tuple]]:
    """(line, start byte, end byte, value, context) of each one-line int or str literal."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    parents = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    sites = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or type(node.value) is not kind or node.lineno != node.end_lineno:
            continue
        parent = parents.get(node)
        if isinstance(parent, (ast.JoinedStr, ast.FormattedValue)):
            continue
        if kind is str and isinstance(parent, ast.Expr):  # a docstring
            continue
        sites.append((node.lineno, node.col_offset, node.end_col_offset, node.value, _context(node, parents)))
    return sorted(sites, key=lambda s: (s[0], s[1]))


def _int_verdict(context: tuple, cls: str, text: str, declared_ranks: bool) -> tuple[tuple[int, ...], str]:
    """Which exits an int-literal replacement allows, and why (only what is decidable)."""
    where, key, fn, _ = context
    bad_type = cls in ("float", "bool", "str")
    nonpositive = cls in ("zero", "neg")
    if where == "arg" and fn == "size" and key == 1 and (nonpositive or bad_type):
        return REJECT, "cw.size default must be a positive integer (min is 1)"
    if where == "kw" and key == "ranks" and fn == "schedule" and declared_ranks and (nonpositive or bad_type):
        return REJECT, "a declared world size must be a positive integer"
    if where == "kw" and key == "ranks_per_node" and (nonpositive or bad_type):
        return REJECT, "ranks_per_node must be a positive integer"
    if where == "kw" and key == "count" and fn in ("buffer", "symmetric", "signal") and (nonpositive or bad_type):
        return REJECT, "a count must be a positive integer"
    if where == "kw" and key == "root" and (cls in ("neg", "huge") or bad_type):
        return REJECT, "a root must be a rank of the world"
    if ((where == "kw" and key in ("value", "cond")) or (where == "arg" and fn == "wait_until" and key == 2)) and (
            cls == "neg" or bad_type or (cls == "huge" and eval(text) >= 2**64)):  # noqa: S307 (our own literal)
        return REJECT, "a signal or atomic value must be an integer in 0..2**64-1"
    if where == "arg" and fn == "chunk" and key in (0, 1) and (bad_type or cls in ("neg", "huge")
                                                               or (key == 1 and cls == "zero")):
        return REJECT, "chunk(index, parts) needs 0 <= index < parts"
    return CONTRACT, ""


def _str_class(context: tuple) -> str:
    where, key, fn, in_tuple = context
    if where == "arg" and key == 0 and fn in NAME_FUNCTIONS and not in_tuple:
        return "name"
    if where == "kw" and key == "name" and fn in NAME_FUNCTIONS:
        return "name"
    if where == "arg" and fn in EXPECT_FUNCTIONS and key in (0, 1) and not in_tuple:
        return "bufref"
    if where == "kw" and key == "dst" and fn in EXPECT_FUNCTIONS:
        return "bufref"
    if where == "arg" and fn == "equals" and (key == 1 or in_tuple):
        return "bufref"
    if where == "kw" and key in ("dtype", "role", "op", "reduce"):
        return "word"
    if where == "arg" and ((fn == "wait_until" and key == 1) or (fn == "atomic" and key == 2)):
        return "word"
    return "other"


def python_rejects(source: bytes) -> str | None:
    """Why CPython will not compile `source` (as importing it would), or None. Compiling runs nothing."""
    try:
        compile(source, "<fuzzed>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, MemoryError, RecursionError, OverflowError) as exc:
        return f"{type(exc).__name__}: {getattr(exc, 'msg', None) or exc}"[:200]
    return None


def _insert(src: bytes, ch: Chooser, data: bytes) -> tuple[bytes, int]:
    at = ch.randint(0, len(src))
    return src[:at] + data + src[at:], at


def _sites(rel: str, kind: type) -> list:
    key = f"sites:{rel}:{kind.__name__}"
    if key not in _CACHE:
        _CACHE[key] = literal_sites(_read(REPO / rel), kind)
    return _CACHE[key]  # type: ignore[return-value]


def gen_protocol(ch: Chooser, kind: str, timeout: float) -> Case:
    files = protocol_files()
    if kind in ("int_literal", "str_literal"):
        files = [f for f in files if _sites(f, int if kind == "int_literal" else str)]
    rel = ch.choice(files)
    name = Path(rel).name
    src = _read(REPO / rel)
    args = _schedule_args(ch, name, timeout, ALL_COMMANDS)
    declared_ranks = args[0] == "check"
    lines = src.split(b"\n")
    code_lines = [i for i, line in enumerate(lines) if line.strip()]
    expect, why = CONTRACT, ""
    mutation: dict = {"source": rel, "op": kind}
    if kind == "delete_line":
        i = ch.choice(code_lines)
        mutation.update(line=i + 1, text=lines[i].decode("utf-8", "replace"))
        new = b"\n".join(lines[:i] + lines[i + 1:])
    elif kind == "duplicate_line":
        i = ch.choice(code_lines)
        mutation.update(line=i + 1, text=lines[i].decode("utf-8", "replace"))
        new = b"\n".join(lines[:i + 1] + lines[i:])
    elif kind == "swap_lines":
        i, j = ch.choice(code_lines), ch.choice(code_lines)
        lines[i], lines[j] = lines[j], lines[i]
        mutation.update(lines=[i + 1, j + 1])
        new = b"\n".join(lines)
    elif kind in ("int_literal", "str_literal"):
        line, start, end, value, context = ch.choice(_sites(rel, int if kind == "int_literal" else str))
        if kind == "int_literal":
            cls, text = ch.choice(INT_REPLACEMENTS)
            expect, why = _int_verdict(context, cls, text, declared_ranks)
        else:
            group = _str_class(context)
            pool = {"name": HOSTILE_NAMES, "bufref": HOSTILE_NAMES + [f"{value}_nope"],
                    "word": BAD_WORDS + [f"{value}x"], "other": OTHER_STRINGS}[group]
            text = repr(ch.choice(pool))
            if group != "other":
                expect, why = REJECT, {"name": "names must be plain identifiers, not C++ keywords",
                                       "bufref": "a postcondition must name a declared buffer",
                                       "word": "not a valid op, dtype, role or comparison"}[group]
        row = lines[line - 1]
        lines[line - 1] = row[:start] + text.encode() + row[end:]
        mutation.update(line=line, old=row[start:end].decode("utf-8", "replace"), new=text,
                        context="/".join(str(c) for c in context[:3]))
        new = b"\n".join(lines)
    elif kind == "random_bytes":
        data = bytes(ch.randint(32, 126) for _ in range(ch.randint(1, 8)))
        new, at = _insert(src, ch, data)
        mutation.update(offset=at, inserted=data.decode())
    elif kind == "null_byte":
        new, at = _insert(src, ch, b"\x00")
        mutation.update(offset=at, inserted="\\x00")
    elif kind == "non_utf8":  # CPython tolerates bad UTF-8 in comments: python_rejects decides below
        variant = ch.choice(["\\xff", "\\xc3\\x28", "\\xed\\xa0\\x80", "\\x80", "\\xfe\\xff", "utf-16"])
        if variant == "utf-16":
            new = src.decode("utf-8").encode("utf-16")
            mutation.update(encoding="utf-16")
        else:
            new, at = _insert(src, ch, variant.encode().decode("unicode_escape").encode("latin-1"))
            mutation.update(offset=at, inserted=variant)
    elif kind == "truncate":
        at = ch.randint(0, len(src) - 1)
        new = src[:at]
        mutation.update(keep_bytes=at)
        if not new.strip():
            expect, why = REJECT, "an empty file defines no schedule"
    else:
        raise ValueError(kind)
    if expect == REJECT and (b"cw.choice(" in src or b"cw.param(" in src):
        # a family: the line may sit in a variant that check does not trace (the defaults only)
        expect, why = CONTRACT, ""
    refused = python_rejects(new)
    if refused:  # it does not even compile: the only right answer is bad input
        expect, why = REJECT, f"CPython refuses it ({refused})"
    mutation["diff"] = _diff(name, src, new)
    if why:
        mutation["must"] = why
    return Case("protocol", kind, args, {name: new}, mutation, expect, (name,))


# -------------------------------------------------------------------------------- family: bodies
BODY_KINDS = ("exit", "raise", "print", "loop", "huge", "signals", "float_bool", "size", "expect", "decorator",
              "names", "op_args")
BODY_FILE = "sched_fuzz.py"
HEADER = 'import itertools, json, os, sys, time\n\nimport clockworks_dist as cw\n\nCHUNK = cw.size("CHUNK", 2)\n'
DECL = 'x = r.buffer("x", count=n * CHUNK, role="inout")'
DEFAULT_DECO = 'expect=cw.allreduce("x"), ranks=(2,)'


def schedule_source(prelude: str = "", deco: str = DEFAULT_DECO, body: str = "r.all_reduce(x)", decl: str = DECL,
                    signature: str = "r", head: str | None = None) -> str:
    """A schedule file: HEADER, prelude, then `@cw.schedule(deco)` over `def fuzzed(signature)`."""
    text = HEADER + "\n"
    if prelude:
        text += prelude.rstrip() + "\n\n"
    text += head if head is not None else f"@cw.schedule({deco})\ndef fuzzed({signature}):\n"
    return text + textwrap.indent("n = r.world\n" + (decl + "\n" if decl else "") + body.rstrip() + "\n", "    ")


def _placed(stmt: str, where: str, *, tail: str = "r.all_reduce(x)") -> dict:
    """schedule_source arguments that run `stmt` at `where`."""
    if where == "module":
        return {"prelude": stmt, "body": tail}
    if where == "body":
        return {"body": stmt + "\n" + tail}
    if where == "rank1":
        return {"body": "if r.rank == 1:\n" + textwrap.indent(stmt, "    ") + "\n" + tail}
    if where == "expect":
        return {"prelude": "def _post(world):\n" + textwrap.indent(stmt, "    ") + "\n    return []",
                "deco": 'expect=[cw.allreduce("x"), cw.custom(_post)], ranks=(2,)', "body": tail}
    if where == "decorator":
        return {"prelude": "def _ranks():\n" + textwrap.indent(stmt, "    ") + "\n    return (2,)",
                "deco": 'expect=cw.allreduce("x"), ranks=_ranks()', "body": tail}
    raise ValueError(where)


PLACES = ("module", "body", "rank1", "expect", "decorator")
RAISES = {
    "KeyboardInterrupt": "raise KeyboardInterrupt",
    "SystemExit": "raise SystemExit",
    "GeneratorExit": "raise GeneratorExit",
    "MemoryError": "raise MemoryError",
    "RecursionError": "raise RecursionError('too deep')",
    "real_recursion": "def _down(k):\n    return _down(k + 1)\n_down(0)",
    "StopIteration": "raise StopIteration",
    "BaseException": "raise BaseException('base')",
    "custom_base": "class _Stop(BaseException):\n    pass\nraise _Stop()",
    "str_raises": ("class _Weird(Exception):\n    def __str__(self):\n        raise RuntimeError('no str')\n"
                   "raise _Weird()"),
    "str_not_str": "class _Odd(Exception):\n    def __str__(self):\n        return 42\nraise _Odd()",
    "huge_message": "raise ValueError('x' * 10**7)",
    "surrogate_message": "raise ValueError('\\udcff bad \\x00 text')",
    "ExceptionGroup": "raise ExceptionGroup('group', [ValueError(1), KeyboardInterrupt()])",
    "OSError": "raise OSError(28, 'No space left on device')",
    "ClockworksError": "raise cw.ClockworksError('impostor error')",
    "ScheduleError": "raise cw.ScheduleError('impostor', file='elsewhere.py', line=1)",
    "CheckIncomplete": "raise cw.CheckIncomplete('impostor bound')",
}
EXITS = ["sys.exit({})", "exit({})", "raise SystemExit({})", "quit({})"]
EXIT_CODES = ["0", "1", "2", "3", "4", "", "'bye'", "130", "-1", "None"]
PRINTS = ['print("hello from the schedule")', 'print("{")', 'sys.stdout.write("[1, 2]\\n")',
          'print(json.dumps({"verdict": "verified"}))', 'os.write(1, b"raw bytes on fd 1\\n")',
          'print("x", flush=True)', 'print("\\x00\\udcff")', 'sys.stdout.write("x" * 100000)']
LOOPS = ["while True:\n    pass", "time.sleep(3600)", "for _ in itertools.count():\n    pass",
         "while True:\n    _junk = [0] * 1000", "while True:\n    r.barrier()"]
FLOAT_BOOL = [
    "r.fill(x.region(0.5, 2), 1.0)", "r.fill(x[0:1.5], 1.0)", "r.fill(x.region(True, 2), 1.0)",
    "r.fill(x[False:2], 1.0)", "r.fill(x.element(1.0), 1.0)", "r.fill(x.chunk(0.0, 2), 1.0)",
    "r.fill(x.chunk(0, 2.0), 1.0)", "r.fill(x.chunk(True, 2), 1.0)", "r.fill(x.region(1.0, 2.0), 1.0)",
    'y = r.buffer("y", count=2.5, role="scratch")', 'y = r.buffer("y", count=True, role="scratch")',
    'y = r.buffer("y", count=float("inf"), role="scratch")', 's = r.signal("s", count=2.0)',
    's = r.signal("s", count=True)', 'r.fill(x, float("nan"))', 'r.fill(x.region(0, float("nan")), 1.0)',
    's = r.signal("s")\nr.signal_op((r.rank + 1) % n, s, value=2.5)', 's = r.signal("s")\nr.wait_until(s, "ge", 1.5)',
    's = r.signal("s")\nr.wait_until(s, "ge", True)', "r.broadcast(x, root=0.0)", "r.broadcast(x, root=False)",
    "with r.group():\n    r.send(float((r.rank + 1) % n), x)\n    r.recv(float((r.rank - 1) % n), x)",
]
SIZE_DECLS = [
    'S = cw.size("S", 0)', 'S = cw.size("S", -4)', 'S = cw.size("S", 4, min=8)', 'S = cw.size("S", 4, max=2)',
    'S = cw.size("S", 4, min=5, max=3)', 'S = cw.size("S", 4, multiple_of=0)', 'S = cw.size("S", 4, multiple_of=-2)',
    'S = cw.size("S", 4, multiple_of=3)', 'S = cw.size("S", 2.5)', 'S = cw.size("S", True)', 'S = cw.size("S", "4")',
    'S = cw.size("S", 4, min=2.5)', 'S = cw.size("S", 4, max=float("nan"))', 'S = cw.size("S", float("inf"))',
    'S = cw.size("S", 4)\nT = cw.size("S", 8)',
] + [f"S = cw.size({name!r}, 4)" for name in HOSTILE_NAMES]
SIZE_BINDINGS = [('S = cw.size("S", 4, min=2)', "S=1"), ('S = cw.size("S", 4, max=8)', "S=9"),
                 ('S = cw.size("S", 4, multiple_of=2)', "S=3"), ('S = cw.size("S", 4)', "S=0"),
                 ('S = cw.size("S", 4)', "S=-1"), ('S = cw.size("S", 4)', "T=4")]
SIZE_USE = 'y = r.buffer("y", count=S * 2, role="scratch")\nr.fill(y, 1.0)\nr.all_reduce(x)'
CUSTOM_POSTS = [
    "raise ValueError('no postcondition')", "return 42", "return [None]", "return 'x'",
    "return [cw.equals(5, 'x', 0, 1, (0, 'x', 0))]", "return [cw.equals(0, 'x', 0, 1000, (0, 'x', 0))]",
    "return [cw.equals(0, 'nope', 0, 1, (0, 'x', 0))]", "return [cw.equals(0, 'x', 0, 1, (-1, 'x', 0))]",
    "return [cw.equals(0, 'x', 2, 1, (0, 'x', 0))]", "return [cw.equals(0, 'x', 0, 1, (0, 'x', 0), op='bogus')]",
    "return [cw.equals(0, 'x', 0, 1, (0, 'x', 0.5))]", "return (1 / 0 for _ in range(1))",
]
ROOTS = ["2", "99", "-1", "1.5", "True", '"0"', "2**64"]
EXPECTS = ([(f'cw.broadcast("x", root={v})', "r.broadcast(x, root=0)") for v in ROOTS]
           + [(f'cw.reduce("x", root={v})', "r.reduce_to(0, x)") for v in ROOTS]
           + [(f'cw.allreduce("x", op={v!r})', "r.all_reduce(x)") for v in BAD_WORDS]
           + [('cw.allreduce("x", op=None)', "r.all_reduce(x)"), ('cw.allreduce("x", op=42)', "r.all_reduce(x)"),
              ('cw.allreduce("nope")', "r.all_reduce(x)"), ('cw.allreduce("x", "nope")', "r.all_reduce(x)"),
              ("cw.allreduce(42)", "r.all_reduce(x)"), ('cw.allgather("x", "nope")', "r.barrier()"),
              ("cw.custom(42)", "r.all_reduce(x)"), ("cw.custom(lambda: [])", "r.all_reduce(x)"),
              ("42", "r.all_reduce(x)"), ('"x"', "r.all_reduce(x)"), ("[None]", "r.all_reduce(x)"),
              ("cw.allreduce", "r.all_reduce(x)"), ('(cw.allreduce("x"), 5)', "r.all_reduce(x)"),
              ('{"x": 1}', "r.all_reduce(x)")]
           + [("cw.custom(_post)", post) for post in CUSTOM_POSTS])
DECORATORS = (
    [f'expect=cw.allreduce("x"), ranks={v}' for v in
     ["(0,)", "(-2,)", "(2.5,)", '("2",)', "(True,)", '"24"', "5", "(2, -1)", "range(0, 3)", '(float("nan"),)']]
    + [f'expect=cw.allreduce("x"), ranks=(4,), ranks_per_node={v}' for v in ["0", "-1", "2.5", '"2"', "True", "3"]]
    + [f'expect=cw.allreduce("x"), ranks=(2,), name={v!r}' for v in HOSTILE_NAMES]
    + ['expect=cw.allreduce("x"), ranks=(2,), name=123', 'expect=cw.allreduce("x"), ranks=(2,), name=["a"]',
       'expect=cw.allreduce("x"), ranks=(2,), sizes=[5]', 'expect=cw.allreduce("x"), ranks=(2,), sizes="S"',
       'expect=cw.allreduce("x"), rank=(2,)'])
DECORATOR_HEADS = ['@cw.schedule(cw.allreduce("x"))\ndef fuzzed(r):\n', "@cw.schedule\ndef fuzzed():\n",
                   '@cw.schedule(expect=cw.allreduce("x"), ranks=(2,))\ndef fuzzed(r, extra):\n',
                   "@cw.schedule\nclass fuzzed:\n    def __call__(self, r):\n        pass\ndef _unused(r):\n",
                   "fuzzed = cw.schedule(print)\ndef _unused(r):\n"]
NAME_USES = {
    "buffer": {"decl": "x = r.buffer({N}, count=n * CHUNK, role='inout')",
               "deco": "expect=cw.allreduce({N}), ranks=(2,)"},
    "symmetric": {"body": "y = r.symmetric({N}, count=2, role='scratch')\nr.all_reduce(x)"},
    "signal": {"body": "s = r.signal({N})\nr.all_reduce(x)"},
    "comm": {"body": "c = r.comm({N}, range(n))\nr.barrier(comm=c)\nr.all_reduce(x)"},
    "node_comm": {"body": "c = r.node_comm({N})\nr.barrier(comm=c)\nr.all_reduce(x)"},
    "compute": {"body": "r.compute({N}, reads=[x], writes=[x])\nr.all_reduce(x)"},
    "size": {"prelude": "S = cw.size({N}, 4)", "body": SIZE_USE},
    "schedule": {"deco": 'expect=cw.allreduce("x"), ranks=(2,), name={N}'},
}
OP_ARGS = [
    'r.all_reduce(x, op="bogus")', 'r.all_reduce(x, op="")', "r.all_reduce(x, op=None)",
    'y = r.buffer("y", count=2 * n, role="scratch")\nr.recv((r.rank - 1) % n, y, reduce="bogus")',
    's = r.signal("s")\nr.wait_until(s, "gee", 1)', 's = r.signal("s")\nr.wait_until(s, "", 1)',
    'y = r.buffer("y", count=2, dtype="float33")', 'y = r.buffer("y", count=2, dtype="")',
    'y = r.buffer("y", count=2, role="bogus")', "r.send(n, x)", "r.send(-1, x)", "r.send(True, x)",
    "r.send(2**64, x)", 'r.all_reduce(x, comm="world2")', "r.barrier(comm=5)", "r.reduce(x)",
    'y = r.buffer("y", count=2)\nr.put((r.rank + 1) % n, y, x[0:2])', 's = r.signal("s")\nr.atomic(0, s, "bogus")',
    'r.fill(x, "1")', "r.copy(x, x.region(0, 1))", "with r.group():\n    with r.group():\n        r.barrier()",
    'r.compute("k", reads=[42])', "r.frobnicate(x)", "r.all_reduce(x, x.region(0, 1))",
    'y = r.buffer("x", count=2)', "r.barrier(comm=r.comm('c', [0]))",
]


def gen_body(ch: Chooser, kind: str, timeout: float) -> Case:
    mutation: dict = {"kind": kind}
    expect, why, commands = REJECT, "", ALL_COMMANDS
    extra_args: list[str] = []
    blame: tuple[str, ...] = (BODY_FILE,)
    if kind == "exit":
        where = ch.choice(PLACES)
        stmt = ch.choice(EXITS).format(ch.choice(EXIT_CODES))
        spec, why = _placed(stmt, where), "user code that exits must not decide the exit code"
        mutation.update(where=where, statement=stmt)
    elif kind == "raise":
        where, name = ch.choice(PLACES), ch.choice(sorted(RAISES))
        spec, why = _placed(RAISES[name], where), "an exception raised by user code is bad input"
        mutation.update(where=where, exception=name)
    elif kind == "print":
        where, stmt = ch.choice(PLACES), ch.choice(PRINTS)
        spec, expect, commands = _placed(stmt, where), CONTRACT, JSON_COMMANDS
        mutation.update(where=where, statement=stmt)
    elif kind == "loop":
        stmt = ch.choice(LOOPS)
        where = ch.choice(("body", "rank1") if "r." in stmt else PLACES)
        spec, expect = _placed(stmt, where), BOUNDED
        why = "a schedule that never returns must stop at the --timeout bound"
        mutation.update(where=where, statement=stmt)
    elif kind == "huge":
        variant = ch.choice(["ops", "buffers", "lines", "literal", "nesting", "world", "count"])
        expect = CONTRACT
        if variant == "ops":
            k = ch.choice([10**4, 10**5, 10**6, 10**7])
            spec = {"body": f"for _ in range({k}):\n    r.barrier()\nr.all_reduce(x)"}
        elif variant == "buffers":
            k = ch.choice([10**4, 10**5, 10**6])
            spec = {"body": f"for i in range({k}):\n    r.buffer(f'b{{i}}', count=1, role='scratch')\nr.all_reduce(x)"}
        elif variant == "lines":
            k = ch.choice([2000, 20000, 100000])
            spec = {"body": "r.barrier()\n" * k + "r.all_reduce(x)"}
        elif variant == "literal":
            k = ch.choice([10**6, 10**7])
            spec = {"prelude": '_BIG = "' + "x" * k + '"'}
        elif variant == "nesting":
            k = ch.choice([50, 199, 1000, 100000])
            opener, closer = ch.choice([("(", ")"), ("[", "]"), ("-", "")])
            spec = {"body": "_v = " + opener * k + "1" + closer * k + "\nr.all_reduce(x)"}
        elif variant == "world":
            k = ch.choice([64, 1024, 10**5, 10**7])
            spec = {"deco": f'expect=cw.allreduce("x"), ranks=({k},)'}
        else:
            k = ch.choice([10**6, 10**9, 2**40, 2**63, 2**64 + 1])
            spec = {"body": f'big = r.buffer("big", count={k}, role="scratch")\nr.fill(big, 1.0)\nr.all_reduce(x)'}
        mutation.update(variant=variant, k=k)
    elif kind == "signals":
        k = ch.choice([10**4, 10**6, 10**9, 2**40, 2**63, 2**64])
        use = ch.coin()
        body = f's = r.signal("s", count={k})\n'
        if use:
            body += f'r.signal_op((r.rank + 1) % n, s[{k} - 1], value=1)\nr.wait_until(s[{k} - 1], "ge", 1)\n'
        spec, expect = {"body": body + "r.all_reduce(x)"}, CONTRACT
        mutation.update(count=k, used=use)
    elif kind == "float_bool":
        stmt = ch.choice(FLOAT_BOOL)
        spec, why = {"body": stmt + "\nr.all_reduce(x)"}, "regions, counts, peers and values are integers"
        mutation.update(statement=stmt)
    elif kind == "size":
        if ch.coin(30):
            decl, binding = ch.choice(SIZE_BINDINGS)
            commands = ("check", "check_json", "show", "show_json")
            extra_args = ["--size", binding]
            blame = (BODY_FILE, binding.split("=")[0], "--size")
            mutation.update(binding=binding)
        else:
            decl = ch.choice(SIZE_DECLS)
        spec, why = {"prelude": decl, "body": SIZE_USE}, "the size constraint cannot hold"
        mutation.update(declaration=decl)
    elif kind == "expect":
        spec_text, body = ch.choice(EXPECTS)
        spec = {"deco": f"expect={spec_text}, ranks=(2,)", "body": body}
        if spec_text == "cw.custom(_post)":
            spec["prelude"] = "def _post(world):\n    " + body
            spec["body"] = "r.all_reduce(x)"
        commands, why = ("check", "check_json", "show", "show_json"), "the postcondition is malformed"
        mutation.update(expect=spec_text, body=spec.get("prelude", body))
    elif kind == "decorator":
        commands, why = CHECK_COMMANDS, "bad @cw.schedule arguments"
        if ch.coin(75):
            deco = ch.choice(DECORATORS)
            spec = {"deco": deco}
            mutation.update(decorator=deco)
        else:
            head = ch.choice(DECORATOR_HEADS)
            spec = {"head": head}
            mutation.update(head=head)
    elif kind == "names":
        use, name = ch.choice(sorted(NAME_USES)), ch.choice(HOSTILE_NAMES)
        spec = {k: v.replace("{N}", repr(name)) for k, v in NAME_USES[use].items()}
        why = "names become C++ identifiers: hostile strings must be refused"
        mutation.update(use=use, name=name)
    elif kind == "op_args":
        stmt = ch.choice(OP_ARGS)
        spec, why = {"body": stmt + "\nr.all_reduce(x)"}, "bad op arguments"
        mutation.update(statement=stmt)
    else:
        raise ValueError(kind)
    source = schedule_source(**spec)
    refused = python_rejects(source.encode("utf-8", "surrogatepass"))
    if refused:
        expect, why = REJECT, f"CPython refuses it ({refused})"
    args = _schedule_args(ch, BODY_FILE, timeout, commands)
    if extra_args:
        args[2:2] = extra_args
    mutation["source"] = _excerpt(source.encode("utf-8", "surrogatepass"))
    if why and expect != CONTRACT:
        mutation["must"] = why
    return Case("body", kind, args, {BODY_FILE: source.encode("utf-8", "surrogatepass")}, mutation, expect, blame)


# ------------------------------------------------------------------------------ family: topologies
TOPOLOGY_KINDS = ("delete_line", "swap_lines", "duplicate_line", "number", "structure", "deep_nesting",
                  "alias_bomb", "yaml_tag", "null_byte", "non_utf8", "random_bytes", "truncate", "not_mapping")
POSITIVE_FIELDS = {"GBs_per_dir", "hbm_GBs", "hbm_GB", "gbps", "nvshmem_block_GBs", "copy_engine_GBs",
                   "nccl_copy_channel_GBs", "nvshmem_link_efficiency", "hbm_efficiency"}
POSITIVE_PARENTS = {"nccl_channel_GBs", "nccl_kind_efficiency", "nccl_kind_link_efficiency",
                    "nccl_protocol_link_efficiency"}
AT_MOST_ONE = {"nvshmem_link_efficiency", "hbm_efficiency", "nvlink_reverse_share"}
INT_FIELDS = {"lanes", "sms", "nodes", "rails", "nodes_per_leaf", "spines", "nccl_max_channels",
              "nccl_p2p_max_channels", "rank_order", "rail", "node"}
OPTIONAL_FIELDS = {"hbm_GB", "rank_order", "rail"}
NUMBER_REPLACEMENTS = [("zero", "0"), ("neg", "-1"), ("neg", "-0.5"), ("nan", ".nan"), ("inf", ".inf"),
                       ("inf", "-.inf"), ("big", "1.0e+300"), ("tiny", "1.0e-300"), ("inf", "1.0e+400"),
                       ("str", "abc"), ("str", "'fast'"), ("numstr", "'12'"), ("bool", "true"), ("null", "null"),
                       ("list", "[1, 2]"), ("map", "{a: 1}"), ("hex", "0x10"), ("sexagesimal", "1:30")]


def _yaml_scalars(text: str):
    """(path, start, end, tag, value) of each scalar in the YAML `text`, by character offsets."""
    import yaml

    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return []
    found = []

    def walk(node, path):
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                walk(value, path + (key.value,))
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, path + (i,))
        elif isinstance(node, yaml.ScalarNode):
            found.append((path, node.start_mark.index, node.end_mark.index, node.tag, node.value))

    walk(root, ())
    return found


def _number_verdict(path: tuple, cls: str) -> tuple[tuple[int, ...], str]:
    key = path[-1] if path else None
    parent = next((p for p in reversed(path[:-1]) if isinstance(p, str)), None)
    known = key in POSITIVE_FIELDS or key in INT_FIELDS or key in AT_MOST_ONE or parent in (
        "constants", "nccl_base_latency_us", "nvlink", "pcie", "net", "nccl_channel_GBs", "nccl_kind_efficiency",
        "nccl_kind_link_efficiency", "nccl_kind_base_us", "nccl_protocol_link_efficiency",
        "nccl_p2p_base_latency_us", "nic_link", "uplink", "fabric") or key in ("latency_us",)
    if not known:
        return CONTRACT, ""
    positive = (key in POSITIVE_FIELDS or key in INT_FIELDS - {"rank_order", "rail", "node"}
                or parent in POSITIVE_PARENTS)
    if cls in ("nan", "inf"):
        return REJECT, f"{key}: not a finite number"
    if cls == "neg":
        return REJECT, f"{key}: cannot be negative"
    if cls == "zero" and positive:
        return REJECT, f"{key}: must be positive"
    if cls == "tiny" and key in INT_FIELDS:
        return REJECT, f"{key}: must be an integer"
    if cls == "big" and key in AT_MOST_ONE:
        return REJECT, f"{key}: at most 1"
    if cls in ("str", "bool", "list", "map"):
        return REJECT, f"{key}: must be a number"
    if cls == "null" and key not in OPTIONAL_FIELDS:
        return REJECT, f"{key}: required"
    return CONTRACT, ""


def _topology_args(ch: Chooser, name: str, timeout: float) -> tuple[list[str], dict[str, bytes]]:
    if ch.coin():
        args = ["topology", "show", name]
        files = {}
    else:
        args = ["predict", "ring_allreduce.py", "-t", name, "--ranks", "2", "--timeout", _fmt(timeout)]
        files = {"ring_allreduce.py": _ring()}
    if ch.coin(30):
        args.append("--json")
    return args, files


def _bomb(depth: int) -> str:
    lines = ["  l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, depth):
        lines.append(f"  l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def gen_topology(ch: Chooser, kind: str, timeout: float) -> Case:
    rel = ch.choice(topology_files())
    name = _topology_name(rel)
    src = _read(REPO / rel)
    text = src.decode("utf-8")
    args, files = _topology_args(ch, name, timeout)
    lines = src.split(b"\n")
    code_lines = [i for i, line in enumerate(lines) if line.strip() and not line.strip().startswith(b"#")]
    expect, why = CONTRACT, ""
    mutation: dict = {"source": rel, "op": kind}
    if f"scalars:{rel}" not in _CACHE:
        _CACHE[f"scalars:{rel}"] = _yaml_scalars(text)
    scalars = _CACHE[f"scalars:{rel}"]

    def replace(start: int, end: int, new_text: str) -> bytes:
        return (text[:start] + new_text + text[end:]).encode("utf-8")

    if kind == "delete_line":
        i = ch.choice(code_lines)
        new = b"\n".join(lines[:i] + lines[i + 1:])
        mutation.update(line=i + 1, text=lines[i].decode())
    elif kind == "duplicate_line":
        i = ch.choice(code_lines)
        new = b"\n".join(lines[:i + 1] + lines[i:])
        mutation.update(line=i + 1, text=lines[i].decode())
        if re.match(rb"\s*- \{?id: ", lines[i]):
            expect, why = REJECT, "a duplicated device id"
    elif kind == "swap_lines":
        i, j = ch.choice(code_lines), ch.choice(code_lines)
        lines[i], lines[j] = lines[j], lines[i]
        new = b"\n".join(lines)
        mutation.update(lines=[i + 1, j + 1])
    elif kind == "number":
        numbers = [s for s in scalars if s[3].endswith((":int", ":float"))]
        path, start, end, _, old = ch.choice(numbers)
        cls, new_text = ch.choice(NUMBER_REPLACEMENTS)
        new = replace(start, end, new_text)
        expect, why = _number_verdict(path, cls)
        mutation.update(field=".".join(str(p) for p in path), old=old, new=new_text)
    elif kind == "structure":
        links = {}
        devices = {}
        for path, start, end, tag, value in scalars:
            if len(path) == 3 and path[0] == "links" and path[2] in ("a", "b", "kind"):
                links.setdefault(path[1], {})[path[2]] = (start, end, value)
            if len(path) == 3 and path[0] == "devices" and path[2] in ("id", "kind"):
                devices.setdefault(path[1], {})[path[2]] = (start, end, value)
        kinds = [(start, end) for path, start, end, _, _ in scalars if path[-1:] == ("kind",)]
        options = ((["bad_device_kind", "duplicate_id"] if devices else [])
                   + (["self_link", "dangling_link", "bad_link_kind"] if links else []) or ["bad_kind"])
        variant = ch.choice(options)
        if variant == "bad_kind":  # a cluster template: the fabric's link kinds
            start, end = ch.choice(kinds)
            new = replace(start, end, ch.choice(["nvlinkk", "bogus", "''"]))
        elif variant in ("self_link", "dangling_link", "bad_link_kind"):
            i = ch.choice(sorted(links))
            link = links[i]
            if variant == "self_link":
                start, end, _ = link["b"]
                new = replace(start, end, link["a"][2])
            elif variant == "dangling_link":
                start, end, _ = link[ch.choice(["a", "b"])]
                new = replace(start, end, ch.choice(["nosuchdevice", "gpu99", "GPU0"]))
            else:
                start, end, _ = link["kind"]
                new = replace(start, end, ch.choice(["nvlinkk", "bogus", "'x\"); system(\"id\"); /*'"]))
            mutation.update(link=i)
        elif variant == "bad_device_kind":
            i = ch.choice(sorted(devices))
            start, end, _ = devices[i]["kind"]
            new = replace(start, end, ch.choice(["gpuu", "bogus", "GPU", "''"]))
            mutation.update(device=i)
        else:
            i, j = ch.choice(sorted(devices)), ch.choice(sorted(devices))
            if i == j:
                j = (i + 1) % len(devices)
            start, end, _ = devices[j]["id"]
            new = replace(start, end, devices[i]["id"][2])
            mutation.update(devices=[i, j])
        expect, why = REJECT, {"self_link": "a link from a device to itself", "dangling_link": "a link to no device",
                               "bad_link_kind": "an unknown link kind", "bad_device_kind": "an unknown device kind",
                               "duplicate_id": "two devices with one id", "bad_kind": "an unknown kind"}[variant]
        mutation.update(variant=variant)
    elif kind == "deep_nesting":
        depth = ch.choice([100, 1000, 10000, 100000])
        style = ch.choice(["flow_list", "flow_map", "block_map", "block_list"])
        where = ch.choice(["extra", "description"])
        if style == "flow_list":
            value = "[" * depth + "1" + "]" * depth
        elif style == "flow_map":
            value = "{a: " * depth + "1" + "}" * depth
        else:
            depth = min(depth, 1000)
            step = "a:" if style == "block_map" else "-"
            value = ("\n" + "".join(" " * (2 * (k + 1)) + step + "\n" for k in range(depth))
                     + " " * (2 * depth + 2) + "1")
        if where == "description" and "\ndescription:" in text:
            start = text.index("\ndescription:") + len("\ndescription:")
            end = text.index("\n", start)
            new = replace(start, end, " " + value)
        else:
            new = (text.rstrip("\n") + "\nextra: " + value + "\n").encode()
        expect, why = REJECT, "nested data where the schema has none"
        mutation.update(depth=depth, style=style, where=where)
    elif kind == "alias_bomb":
        depth = ch.choice([3, 6, 9, 12])
        key = ch.choice(["extra", "description", "devices", "links", "provenance"])
        body = re.sub(rf"^{key}:.*\n(?:(?![A-Za-z_]).*\n)*", "", text, flags=re.M)
        value = f"*l{depth - 1}" if key != "provenance" else f"{{note: *l{depth - 1}}}"
        new = (body.rstrip("\n") + "\nbomb:\n" + _bomb(depth) + f"{key}: {value}\n").encode()
        expect, why = REJECT, "an alias bomb (9**depth strings behind a few aliases)"
        mutation.update(depth=depth, key=key)
    elif kind == "yaml_tag":
        tag = ch.choice(['!!python/object/apply:os.system ["echo pwned"]', "!!python/name:os.system",
                         "!!binary aGVsbG8=", "!!set {a, b}", "!!timestamp 2001-12-14", "!!omap [a: 1]",
                         "!custom 1", "!!float abc", "!!int 1.5"])
        candidates = [s for s in scalars if s[3].endswith((":int", ":float"))] or scalars
        path, start, end, _, old = ch.choice(candidates)
        new = replace(start, end, tag)
        expect, why = REJECT, "a YAML tag where a plain value belongs"
        mutation.update(field=".".join(str(p) for p in path), old=old, new=tag)
    elif kind == "null_byte":
        new, at = _insert(src, ch, b"\x00")
        expect, why = REJECT, "YAML cannot contain a null byte"
        mutation.update(offset=at, inserted="\\x00")
    elif kind == "non_utf8":
        variant = ch.choice(["\\xff", "\\xc3\\x28", "\\xed\\xa0\\x80", "\\x80", "utf-16", "latin-1 e-acute"])
        if variant == "utf-16":
            new = src.decode("utf-8").encode("utf-16")
            expect, why = CONTRACT, ""  # a BOM-marked UTF-16 stream is valid YAML
        elif variant == "latin-1 e-acute":
            new, at = _insert(src, ch, b"\xe9")
            mutation.update(offset=at)
            expect, why = REJECT, "not UTF-8"
        else:
            new, at = _insert(src, ch, variant.encode().decode("unicode_escape").encode("latin-1"))
            mutation.update(offset=at)
            expect, why = REJECT, "not UTF-8"
        mutation.update(inserted=variant)
    elif kind == "random_bytes":
        data = bytes(ch.randint(32, 126) for _ in range(ch.randint(1, 8)))
        new, at = _insert(src, ch, data)
        mutation.update(offset=at, inserted=data.decode())
    elif kind == "truncate":
        at = ch.randint(0, len(src) - 1)
        new = src[:at]
        mutation.update(keep_bytes=at)
        if not new.strip() or all(not line.strip() or line.strip().startswith(b"#") for line in new.split(b"\n")):
            expect, why = REJECT, "an empty topology"
    elif kind == "not_mapping":
        new = ch.choice([b"", b"- a\n- b\n", b"42\n", b"null\n", b"---\n...\n", b"'just a string'\n", b"[]\n",
                         b"{}\n", b"name: x\n---\nname: y\n"])
        expect, why = REJECT, "not a topology mapping"
        mutation.update(content=new.decode())
    else:
        raise ValueError(kind)
    mutation["diff"] = _diff(name, src, new)
    if why:
        mutation["must"] = why
    files[name] = new
    return Case("topology", kind, args, files, mutation, expect, (name,))


# ---------------------------------------------------------------------------------- family: options
OPTION_KINDS = ("check", "show", "predict", "topology_show", "topology_schema", "calibrate", "stdout_full")
R, A = "r", "a"  # reject, any
POSITIVE_INTS = [("nan", R), ("inf", R), ("-inf", R), ("1e400", R), ("-1", R), ("0", R), ("-0", R), ("abc", R),
                 ("", R), ("2.5", R), ("0x10", R), ("1e3", R), ("99999999999999999999", A), ("100000", A),
                 (str(2**63), A), ("\u0661", A), (" 2", A), ("1_0", A)]
TIMEOUTS = [("nan", R), ("-inf", R), ("-1", R), ("abc", R), ("", R), ("1e400", A), ("-0", A), ("1e-300", A),
            ("inf", A), ("none", A), ("0.000001", A)]
MAX_STATES = [("nan", R), ("-1", R), ("abc", R), ("", R), ("2.5", R), ("1e400", A), ("-0", A), ("1", A), ("inf", A),
              ("none", A), ("99999999999999999999", A)]
SIZES = [("CHUNK=-1", R), ("CHUNK=0", R), ("CHUNK=abc", R), ("CHUNK=4.5", R), ("CHUNK", R), ("=4", R),
         ("NOPE=4", R), ("CHUNK=nan", R), ("CHUNK=1e400", R), ("CHUNK=4=5", R), ("chunk=4", R),
         ("CHUNK=99999999999999999999", A), ("CHUNK=3", A), ("CHUNK=\u0661", A)]
SCHEDULES = [("nope", R), ("", R), ('x"); system("id"); /*', R), ("ring_allreduce ", R)]
MESSAGE_SIZES = [("nan", R), ("inf", R), ("1e400", R), ("-1", R), ("0", R), ("-0", R), ("0..0", R), ("2..1", R),
                 ("1GiB..1KiB", R), ("abc", R), ("", R), (",", R), ("0.5", R), ("1.5", R), ("1KiB..1EiB", A),
                 ("1..99999999999999999999999", A), ("1PiB", A), ("1 KiB", A), ("4096,1MiB", A), ("1KiB..-1", R),
                 ("..", R), ("1KiB..", R)]
MODES = [("bogus", R), ("", R), ("GRAPH", R)]
SCALING = [("0", R), ("-1", R), ("nan", R), ("abc", R), ("100000", A), ("3", A)]
CLUSTER_NODES = [("0", R), ("-1", R), ("nan", R), ("100000", A), ("99999999999999999999", A)]


def _file_value(ch: Chooser, extra: dict[str, bytes], dirs: list[str], *, for_topology: bool = False):
    """A hostile FILE argument: (value, verdict, blame, files to create, dirs to create)."""
    py = not for_topology
    choices = [("nope.py" if py else "nope.yaml", R, ("nope.py" if py else "nope.yaml",), {}, []),
               ("nodir/x.py" if py else "nodir/x.yaml", R, ("x.py" if py else "x.yaml",), {}, []),
               ("adir", R, ("adir",), {}, ["adir"]),
               ("/dev/null", R, ("/dev/null",), {}, []),
               ("", R, None, {}, []),
               ("empty.py" if py else "empty.yaml", R, ("empty.py" if py else "empty.yaml",),
                {"empty.py" if py else "empty.yaml": b""}, []),
               ("topo.yaml", R, ("topo.yaml",), {"topo.yaml": _read(TOPOLOGY_DIR / "dgx-h100.yaml")}, []),
               ("ring_allreduce.py", R, ("ring_allreduce.py",), {"ring_allreduce.py": _ring()}, []),
               ("my ring.py", A, ("my ring.py",), {"my ring.py": _ring()}, []),
               ("ring-allreduce.py", A, ("ring-allreduce.py",), {"ring-allreduce.py": _ring()}, []),
               ("json.py", A, ("json.py",), {"json.py": _ring()}, []),
               ("ring.txt", A, ("ring.txt",), {"ring.txt": _ring()}, []),
               ("\u0440\u0438\u043d\u0433.py", A, ("\u0440\u0438\u043d\u0433.py",),
                {"\u0440\u0438\u043d\u0433.py": _ring()}, [])]
    if py:
        choices = [c for c in choices if c[0] != "ring_allreduce.py"]
    else:
        choices = [c for c in choices if c[0] not in ("topo.yaml", "my ring.py", "ring-allreduce.py", "json.py",
                                                      "ring.txt", "\u0440\u0438\u043d\u0433.py")]
        choices.append(("topo.yaml", R, ("topo.yaml",), {"topo.yaml": b"42\n"}, []))
        choices.append(("dgx_h100", R, ("dgx_h100",), {}, []))
    value, verdict, blame, files, new_dirs = ch.choice(choices)
    extra.update(files)
    dirs.extend(new_dirs)
    return value, verdict, blame


def _option(ch: Chooser, args: list[str], option: str, value: str, replace: bool = True) -> list[str]:
    """args with `option value` set (replacing an existing one), as `--opt value` or `--opt=value`."""
    if replace and option in args:
        i = args.index(option)
        args = args[:i] + args[i + 2:]
    if option.startswith("--") and ch.coin(30):
        return args + [f"{option}={value}"]
    return args + [option, value]


def gen_options(ch: Chooser, kind: str, timeout: float) -> Case:
    files: dict[str, bytes] = {}
    dirs: list[str] = []
    stdout = None
    mutation: dict = {"subcommand": kind}
    if kind in ("check", "show"):
        files["ring_allreduce.py"] = _ring()
        base = [kind, "ring_allreduce.py", "--ranks", "2", "--timeout", _fmt(timeout)]
        which = ch.choice(["ranks", "size", "schedule", "file", "flags", "timeout"]
                          + (["max_states"] if kind == "check" else []))
        if which == "file":
            value, verdict, blame = _file_value(ch, files, dirs)
            args = [base[0], value] + base[2:]
        elif which == "flags":
            flags, verdict = ch.choice([(["--bfs", "--dfs"], R), (["--frobnicate"], R), (["--ranks"], R),
                                        (["--size"], R), (["--json", "--json"], A), (["--no-reduction"], A),
                                        (["--max-states", "1", "--bfs"], A), (["--schedule"], R),
                                        (["--ranks", "2", "--", "extra.py"], R)]
                                       if kind == "check" else
                                       [(["--bfs"], R), (["--frobnicate"], R), (["--ranks"], R),
                                        (["--ranks", "2", "4"], R), (["--json", "--json"], A), (["extra.py"], R)])
            args, value, blame = base + flags, " ".join(flags), (flags[0], flags[-1])
        else:
            option, pool = {"ranks": ("--ranks", POSITIVE_INTS), "size": ("--size", SIZES),
                            "schedule": ("--schedule", SCHEDULES), "timeout": ("--timeout", TIMEOUTS),
                            "max_states": ("--max-states", MAX_STATES)}[which]
            value, verdict = ch.choice(pool)
            args = _option(ch, base, option, value)
            blame = (option,) + ((value.split("=")[0],) if value else ())
            if which in ("schedule", "size"):
                blame += ("ring_allreduce.py",)
        mutation.update(option=which, value=value)
        if ch.coin(30) and "--json" not in args:
            args.append("--json")
    elif kind == "predict":
        files["ring_allreduce.py"] = _ring()
        base = ["predict", "ring_allreduce.py", "-t", "h200x2-nv18", "--ranks", "2", "--sizes", "1KiB..64KiB",
                "--timeout", _fmt(timeout)]
        which = ch.choice(["topology", "ranks", "nodes", "sizes", "mode", "scaling", "scale_nodes", "trace", "plot",
                           "schedule", "file", "timeout"])
        blame = None
        if which == "file":
            value, verdict, blame = _file_value(ch, files, dirs)
            args = [base[0], value] + base[2:]
        elif which == "topology":
            value, verdict, blame = _file_value(ch, files, dirs, for_topology=True)
            args = base[:3] + [value] + base[4:]
        elif which in ("nodes", "scale_nodes"):
            option = "--nodes" if which == "nodes" else "--scale-nodes"
            if ch.coin():
                value, verdict = ch.choice(CLUSTER_NODES)
                args = _option(ch, base[:3] + ["dgx-h100-cluster"] + base[4:], option, value)
            else:
                value, verdict = "2", R
                args = _option(ch, base, option, value)
            blame = (option, value, "h200x2-nv18", "dgx-h100-cluster")
        elif which in ("trace", "plot"):
            option = f"--{which}"
            suffix = ".json" if which == "trace" else ".png"
            value, verdict, blame = ch.choice([(f"nodir/x{suffix}", R, (f"x{suffix}",)),
                                               ("/dev/full", R, ("/dev/full",)), ("adir", R, ("adir",)),
                                               ("", R, (option,)), (f"out{suffix}", A, (f"out{suffix}",))])
            if value == "adir":
                dirs.append("adir")
            if which == "plot":
                blame = blame + ("matplotlib",)
            args = _option(ch, base, option, value)
        else:
            option, pool = {"ranks": ("--ranks", POSITIVE_INTS), "sizes": ("--sizes", MESSAGE_SIZES),
                            "mode": ("--mode", MODES), "scaling": ("--scaling", SCALING),
                            "schedule": ("--schedule", SCHEDULES), "timeout": ("--timeout", TIMEOUTS)}[which]
            value, verdict = ch.choice(pool)
            args = _option(ch, base, option, value)
            blame = (option,) + ((value,) if value else ()) + (("ring_allreduce.py",) if which == "schedule" else ())
            if which in ("ranks", "scaling"):  # "the schedule has 10 ranks but h200x2-nv18 has 2 GPUs" is clear
                blame += ("h200x2-nv18",)
        mutation.update(option=which, value=value)
        if ch.coin(30):
            args.append("--json")
    elif kind == "topology_show":
        base = ["topology", "show", "dgx-h100"]
        which = ch.choice(["file", "nodes", "dot", "png"])
        if which == "file":
            value, verdict, blame = _file_value(ch, files, dirs, for_topology=True)
            args = ["topology", "show", value]
        elif which == "nodes":
            if ch.coin():
                value, verdict = ch.choice(CLUSTER_NODES)
                args = _option(ch, ["topology", "show", "dgx-h100-cluster"], "--nodes", value)
            else:
                value, verdict = ch.choice([("2", R), ("1", A)])
                args = _option(ch, base, "--nodes", value)
            blame = ("--nodes", value, "dgx-h100")
        else:
            option = f"--{which}"
            suffix = f".{which}"
            value, verdict, blame = ch.choice([(f"nodir/x{suffix}", R, (f"x{suffix}",)),
                                               ("/dev/full", R, ("/dev/full",)), ("adir", R, ("adir",)),
                                               ("", R, (option,)), (f"out{suffix}", A, (f"out{suffix}",))])
            if value == "adir":
                dirs.append("adir")
            if which == "png":
                blame = blame + ("matplotlib",)
            args = _option(ch, base, option, value)
        mutation.update(option=which, value=value)
        if ch.coin(30):
            args.append("--json")
    elif kind == "topology_schema":
        args, verdict = ch.choice([(["topology", "schema", "--template", "bogus"], R),
                                   (["topology", "schema", "--json"], R), (["topology", "schema", "--nodes", "2"], R),
                                   (["topology"], R),
                                   (["topology", "bogus"], R), (["topology", "schema", "--template"], A),
                                   (["topology", "schema"], A), (["topology", "schema", "-"], R), ([], R),
                                   (["bogus"], R), (["check"], R), (["predict", "ring_allreduce.py"], R)])
        blame = None
        mutation.update(args=args)
    elif kind == "calibrate":
        raw_lines = _read(RAW_FILE).split(b"\n")
        small = raw_lines[:2] + [line for line in raw_lines if b'"bench": "nccl"' in line][:6]
        files["raw/calibration_raw.jsonl"] = b"\n".join(small) + b"\n"
        base = ["calibrate", "-t", "h200x2-nv18", "--raw", "raw", "--out", "out.yaml"]
        which = ch.choice(["topology", "raw_dir", "raw_content", "out", "start", "flags"])
        blame = None
        if which == "topology":
            value, verdict, blame = _file_value(ch, files, dirs, for_topology=True)
            args = _option(ch, base, "-t", value)
        elif which == "raw_dir":
            value, verdict, blame = ch.choice([("nodir", R, ("nodir",)),
                                               ("emptydir", R, ("emptydir", "calibration_raw")),
                                               ("raw/calibration_raw.jsonl", R, ("calibration_raw.jsonl",)),
                                               ("", R, ("--raw", "calibration_raw"))])
            if value == "emptydir":
                dirs.append("emptydir")
            args = _option(ch, base, "--raw", value)
        elif which == "raw_content":
            variant = ch.choice(["empty", "garbage", "brace", "array", "stub", "nul", "non_utf8", "only_provenance",
                                 "graph_nan", "graph_negative", "graph_zero", "graph_string", "graph_null",
                                 "graph_huge", "bytes_negative", "bytes_string", "bytes_float", "op_bogus",
                                 "huge_line"])
            whole = {"empty": b"", "garbage": bytes(range(256)) * 4, "brace": b"{\n", "array": b"[1, 2]\n",
                     "stub": b'{"bench": "nccl"}\n', "nul": b"\x00\n", "non_utf8": small[0] + b"\xff\xfe\n",
                     "only_provenance": small[0] + b"\n", "huge_line": b'{"bench": "' + b"x" * 10**7 + b'"}\n'}
            if variant in whole:
                files["raw/calibration_raw.jsonl"] = whole[variant]
                verdict = A if variant == "huge_line" else R
            else:
                target, new_value = {"graph_nan": ("graph_us", "NaN"), "graph_negative": ("graph_us", "-1.0"),
                                     "graph_zero": ("graph_us", "0"), "graph_string": ("graph_us", '"fast"'),
                                     "graph_null": ("graph_us", "null"), "graph_huge": ("graph_us", "1e308"),
                                     "bytes_negative": ("bytes", "-1024"), "bytes_string": ("bytes", '"1KiB"'),
                                     "bytes_float": ("bytes", "1.5"), "op_bogus": ("op", '"bogus"')}[variant]
                k = ch.randint(2, len(small) - 1)
                small = list(small)
                small[k] = re.sub(rf'"{target}": [^,}}]+'.encode(), f'"{target}": {new_value}'.encode(), small[k])
                files["raw/calibration_raw.jsonl"] = b"\n".join(small) + b"\n"
                verdict = A  # a tool may skip a bad measurement, with or without a warning
            value, blame, args = variant, ("calibration_raw.jsonl",), base
        elif which == "out":
            value, verdict, blame = ch.choice([("/dev/full", R, ("/dev/full",)), ("adir", R, ("adir",)),
                                               ("", R, ("--out",)), ("/proc/nope/x.yaml", R, ("x.yaml",)),
                                               ("nodir/x.yaml", A, ("x.yaml",))])
            if value == "adir":
                dirs.append("adir")
            args = _option(ch, base, "--out", value)
        elif which == "start":
            value, verdict, blame, content = ch.choice([("nope.yaml", R, ("nope.yaml",), None),
                                                        ("start.yaml", R, ("start.yaml",), b"- 1\n"),
                                                        ("start.yaml", R, ("start.yaml",), b"\xff\xfe\n"),
                                                        ("start.yaml", R, ("start.yaml",),
                                                         _read(TOPOLOGY_DIR / "h200x2-nv18.yaml").replace(
                                                             b"GBs_per_dir: 478.116", b"GBs_per_dir: -1"))])
            if content is not None:
                files["start.yaml"] = content
            args = base + ["--start", value]
        else:
            args, verdict = ch.choice([(base[:3] + ["--run", "r1", "--raw", "raw", "--out", "out.yaml"], R),
                                       (base[:5], R), (["calibrate", "--raw", "raw", "--out", "out.yaml"], R)])
            value = " ".join(args)
        mutation.update(option=which, value=value)
        if ch.coin(30):
            args = args + ["--json"]
    elif kind == "stdout_full":
        files["ring_allreduce.py"] = _ring()
        args = ch.choice([["check", "ring_allreduce.py", "--ranks", "2"], ["show", "ring_allreduce.py"],
                          ["topology", "show", "dgx-h100"], ["topology", "schema"],
                          ["predict", "ring_allreduce.py", "-t", "h200x2-nv18", "--ranks", "2", "--sizes", "1KiB"],
                          ["check", "missing.py"]])
        if args[0] != "topology" or args[1] != "schema":
            if ch.coin():
                args = args + ["--json"]
        stdout, verdict, blame = "/dev/full", R, None
        mutation.update(stdout="/dev/full")
    else:
        raise ValueError(kind)
    expect = REJECT if verdict == R else CONTRACT
    if verdict == R:
        mutation["must"] = "this option value is invalid" if kind != "stdout_full" else \
            "results that cannot be written are a failure"
    return Case("options", kind, args, files, mutation, expect, blame, stdout, tuple(dirs))


# ------------------------------------------------------------------- family: wrong types in topologies
TOPOLOGY_TYPE_KINDS = ("list_for_scalar", "map_for_scalar", "number_for_name", "number_for_list",
                       "scalar_for_map")
FREE_FORM = ("provenance", "description", "note")  # free text or free-form mappings: any type may pass


def _yaml_nodes(text: str):
    """(path, start, end, what, tag) of every node below the root of the YAML `text`."""
    import yaml

    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return []
    found = []

    def walk(node, path):
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                walk(value, path + (key.value,))
            what = "map"
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, path + (i,))
            what = "seq"
        else:
            what = "scalar"
        if path:
            found.append((path, node.start_mark.index, node.end_mark.index, what, node.tag))

    walk(root, ())
    return found


def gen_topology_type(ch: Chooser, kind: str, timeout: float) -> Case:
    """A field of the wrong type: a list or mapping where a name or number goes, a number where a
    list or mapping goes."""
    rel = ch.choice(topology_files())
    name = _topology_name(rel)
    src = _read(REPO / rel)
    text = src.decode("utf-8")
    key = f"nodes:{rel}"
    if key not in _CACHE:
        _CACHE[key] = _yaml_nodes(text)
    nodes = [n for n in _CACHE[key] if not any(str(p) in FREE_FORM for p in n[0])]  # type: ignore[union-attr]
    numeric = [n for n in nodes if n[3] == "scalar" and n[4].endswith((":int", ":float"))]
    names = [n for n in nodes if n[3] == "scalar" and n[4].endswith(":str")
             and n[0][-1] in ("id", "a", "b", "kind", "name", "node", "model")]
    pools = {"list_for_scalar": (numeric + names, ["[1, 2]", "[]", "[[gpu0]]", "[a, b]"]),
             "map_for_scalar": (numeric + names, ["{a: 1}", "{}", "{id: gpu0}"]),
             "number_for_name": (names or numeric, ["5", "-1", "0.5", "true", "null"]),
             "number_for_list": ([n for n in nodes if n[3] == "seq" and n[0][-1] in ("devices", "links")]
                                 or [n for n in nodes if n[3] == "seq"] or [n for n in nodes if n[3] == "map"],
                                 ["5", "0", "'gpu0'", "{a: 1}"]),
             "scalar_for_map": ([n for n in nodes if n[3] == "map"], ["5", "[1, 2]", "'x'"])}
    candidates, replacements = pools[kind]
    path, start, end, what, _tag = ch.choice(candidates)
    new_text = ch.choice(replacements)
    if what != "scalar" and start < end and text[end - 1] == "\n":  # a block collection: keep its line break
        end -= 1
    sep = " " if what != "scalar" and text[start - 1:start] == "\n" else ""
    new = (text[:start] + sep + new_text + text[end:]).encode()
    field_name = str(path[-1])
    expect, why = REJECT, f"{'.'.join(map(str, path))}: a {new_text} where a {what} belongs"
    if kind == "number_for_name" and field_name in ("name", "model") and new_text in ("5", "-1", "0.5", "true"):
        expect, why = CONTRACT, ""  # a number may be read as a name
    if field_name in ("rank_order", "hbm_GB", "rail", "node", "model") and new_text == "null":  # optional
        expect, why = CONTRACT, ""
    args, files = _topology_args(ch, name, timeout)
    files[name] = new
    mutation = {"source": rel, "field": ".".join(map(str, path)), "was": what, "new": new_text,
                "diff": _diff(name, src, new)}
    if why:
        mutation["must"] = why
    return Case("topology_type", kind, args, files, mutation, expect, (name,))


# --------------------------------------------------------------- family: degenerate schedules in predict
DEGENERATE_KINDS = ("no_buffers", "empty_rank", "world_one", "all_empty", "rank0_empty", "scratch_only")
DEGENERATE = {
    "no_buffers": ("", "r.barrier()", REJECT),
    "empty_rank": (DECL, "if r.rank == 0:\n    r.fill(x, 1.0)", CONTRACT),
    "world_one": (DECL, "r.all_reduce(x)", CONTRACT),
    "all_empty": (DECL, "pass", CONTRACT),
    "rank0_empty": ("", 'if r.rank == 1:\n    y = r.buffer("y", count=n * CHUNK, role="inout")\n    r.fill(y, 1.0)',
                    CONTRACT),
    "scratch_only": ('x = r.buffer("x", count=n * CHUNK, role="scratch")', "r.barrier()", CONTRACT),
}


def gen_degenerate(ch: Chooser, kind: str, timeout: float) -> Case:
    """predict (and check, show) on schedules with no buffers, nothing on a rank, a world of 1,
    every rank empty."""
    decl, body, expect = DEGENERATE[kind]
    world = 1 if kind == "world_one" else ch.choice([1, 2]) if kind != "no_buffers" else ch.choice([1, 2])
    deco = f"ranks=({world},)" + (', expect=cw.allreduce("x")' if kind == "world_one" else "")
    source = schedule_source(deco=deco, body=body, decl=decl)
    command = ch.choice(["predict", "predict", "predict_json", "check", "show"])
    if command.startswith("predict"):
        args = ["predict", BODY_FILE, "-t", "h200x2-nv18", "--ranks", str(world), "--timeout", _fmt(timeout)]
        extra = ch.choice([[], ["--sizes", "1KiB"], ["--sizes", "1KiB..4KiB"], ["--scaling", "1", "2"]])
        args += extra
        if command.endswith("json"):
            args.append("--json")
        why = "no buffer: no message size to predict" if expect == REJECT else ""
    else:
        args = [command, BODY_FILE, "--ranks", str(world), "--timeout", _fmt(timeout)]
        expect, why = CONTRACT, ""  # checking or listing an empty program is fine
    mutation = {"kind": kind, "world": world, "source": source}
    if why:
        mutation["must"] = why
    return Case("degenerate", kind, args, {BODY_FILE: source.encode()}, mutation, expect, (BODY_FILE,))


# ------------------------------------------------------------------ family: schedule files that are not Python
SOURCE_KINDS = ("binary", "yaml_as_py", "json_as_py", "empty", "directory", "syntax_error", "indent_error",
                "bad_encoding", "bom_only", "text")


def gen_source(ch: Chooser, kind: str, timeout: float) -> Case:
    """A file that is not Python source given as the schedule: binary, YAML or JSON named .py,
    empty, a directory, a syntax error on line N (the message must name FILE:N)."""
    name = ch.choice(["sched.py", "sched_fuzz.py", "weird name.py"])
    files: dict[str, bytes] = {}
    dirs: list[str] = []
    blame: tuple[str, ...] = (name,)
    mutation: dict = {"kind": kind}
    if kind == "binary":
        data = ch.choice([b"\x7fELF\x02\x01\x01" + bytes(range(256)), b"\x89PNG\r\n\x1a\n\x00\x00",
                          b"\xff\xfe\xfd", b"PK\x03\x04\x14\x00", ch.bytes(64)])
        files[name] = data
    elif kind == "yaml_as_py":
        files[name] = ch.choice([_read(TOPOLOGY_DIR / "h200x2-nv18.yaml"), b"name: x\nranks: [1, 2]\n",
                                 b"- a\n- b\n", b"---\nkey: value\n"])
    elif kind == "json_as_py":
        files[name] = ch.choice([b'{"a": 1}', b"[1, 2, 3]", b'{"schedule": "ring", "ranks": [2]}\n', b"null"])
    elif kind == "empty":
        files[name] = ch.choice([b"", b"\n\n", b"# only a comment\n", b"   "])
    elif kind == "directory":
        dirs.append(name)
    elif kind in ("syntax_error", "indent_error"):
        lines = schedule_source().split("\n")
        at = ch.randint(1, len(lines) - 1)
        bad = ch.choice(["def (:", "x = = 1", "if True", "return )", "import", "@"]) if kind == "syntax_error" \
            else "      y = 1"
        lines.insert(at, bad)
        text = "\n".join(lines)
        files[name] = text.encode()
        try:
            compile(text, name, "exec", dont_inherit=True)
            line = None
        except SyntaxError as exc:
            line = exc.lineno
        blame = (f"{name}:{line}",) if line else (name,)
        mutation.update(line=line, inserted=bad)
    elif kind == "bad_encoding":
        files[name] = ch.choice([b"# -*- coding: bogus -*-\nx = 1\n", b"x = '\xff\xfe'\n",
                                 "x = 1\n".encode("utf-16"), b"\xef\xbb\xbf\xef\xbb\xbfx = 1\n"])
    elif kind == "bom_only":
        files[name] = b"\xef\xbb\xbf"
    elif kind == "text":
        files[name] = ch.choice([b"Hello, world.\nThis is not code.\n", b"ring allreduce on 2 ranks\n",
                                 b"<html><body>x</body></html>\n"])
    else:
        raise ValueError(kind)
    command = ch.choice(["check", "check_json", "show", "show_json", "predict", "predict_json"])
    args = _schedule_args(ch, name, timeout, (command,))
    if name in files:
        mutation["content"] = _excerpt(files[name], 400)
    mutation["must"] = "not a schedule file"
    return Case("source", kind, args, files, mutation, REJECT, blame, None, tuple(dirs))


# ------------------------------------------------- family: schedule functions that are not plain functions
CALLABLE_KINDS = ("async_def", "generator", "async_generator", "lambda", "class_call", "partial", "staticmethod",
                  "returns_generator", "rebind", "delete", "patch_cw", "patch_rank_class", "setattr_builtin")
REBINDS = ["r.world = 3", "r.rank = 5", "r.rank = (r.rank + 1) % n", "r.put = None", "r.all_reduce = r.barrier",
           "r.nodes = 7", "r._st = None", "r.ranks_per_node = 1", "r.__class__ = object"]
DELETES = ["del r.put", "del r.world", "del r.rank", "del r._st"]
SETATTRS = ["setattr(r, 'world', 3)", "setattr(r, 'all_reduce', lambda *a, **k: None)", "object.__setattr__(r, 'x', 1)"]
PATCHES = ["cw.allreduce = lambda *a, **k: None", "cw.schedule = None", "del cw.size", "cw.Rank = object",
           "setattr(cw, 'allreduce', None)"]
RANK_PATCHES = ["cw.Rank.all_reduce = cw.Rank.barrier", "type(r).all_reduce = type(r).barrier",
                "del cw.Rank.put"]
PLAIN = 'x = r.buffer("x", count=r.world * CHUNK, role="inout")\n    r.all_reduce(x)'


def gen_callable(ch: Chooser, kind: str, timeout: float) -> Case:
    """`async def`, generators, lambdas, classes with __call__, functools.partial, staticmethod as the
    schedule function; rebinding or deleting the rank handle's attributes; monkeypatching `cw`."""
    deco = DEFAULT_DECO
    marker = None
    expect, why = REJECT, ""
    if kind in ("async_def", "generator", "async_generator"):
        head = {"async_def": "async def fuzzed(r):\n", "generator": "def fuzzed(r):\n",
                "async_generator": "async def fuzzed(r):\n"}[kind]
        tail = {"async_def": "", "generator": "    yield\n", "async_generator": "    yield\n"}[kind]
        source = HEADER + f"\n@cw.schedule({deco})\n" + head + "    " + PLAIN + "\n" + tail
        marker, why = "@cw.schedule(", "its body never runs: it would trace nothing"
    elif kind == "lambda":
        source = HEADER + (f"\nfuzzed = cw.schedule({deco})(lambda r: r.all_reduce("
                           'r.buffer("x", count=r.world * CHUNK, role="inout")))\n')
        expect = CONTRACT  # documented: a lambda is a function of the handle, named `anonymous`
    elif kind in ("class_call", "partial", "staticmethod"):
        wrapped = {"class_call": "_F()", "partial": "functools.partial(_f, k=2)",
                   "staticmethod": "staticmethod(_g)"}[kind]
        source = (HEADER + "import functools\n\n\nclass _F:\n    def __call__(self, r):\n        "
                  + PLAIN.replace("\n    ", "\n        ")
                  + "\n\n\ndef _f(r, k):\n    " + PLAIN + "\n\n\ndef _g(r):\n    " + PLAIN
                  + f"\n\n\nfuzzed = cw.schedule({deco})({wrapped})\n")
        marker, why = "fuzzed = cw.schedule(", "not a plain function of the rank handle"
    elif kind == "returns_generator":
        source = (HEADER + "\n\ndef _gen(r):\n    " + PLAIN + "\n    yield\n\n\n"
                  + f"@cw.schedule({deco})\ndef fuzzed(r):\n    return _gen(r)\n")
        marker, why = "@cw.schedule(", "it returns a generator whose body never runs"
    else:
        stmt = ch.choice({"rebind": REBINDS, "delete": DELETES, "patch_cw": PATCHES, "patch_rank_class": RANK_PATCHES,
                          "setattr_builtin": SETATTRS}[kind])
        where = "module" if kind in ("patch_cw", "patch_rank_class") and "type(r)" not in stmt and ch.coin() else "body"
        spec = _placed(stmt, where)
        source = schedule_source(**spec)
        marker, why = stmt, "the rank handle and the cw API are read-only"
        if stmt.startswith("object.__setattr__"):
            expect, why, marker = CONTRACT, "", None  # a new attribute that nothing reads changes nothing
    lines = source.split("\n")
    line = next((i + 1 for i, text in enumerate(lines) if marker and text.strip().startswith(marker.strip())), None)
    blame = (f"{BODY_FILE}:{line}",) if line else (BODY_FILE,)
    args = _schedule_args(ch, BODY_FILE, timeout, ALL_COMMANDS)
    mutation = {"kind": kind, "source": _excerpt(source.encode())}
    if why:
        mutation["must"] = why + (f" (exit 2 naming {BODY_FILE}:{line})" if line else "")
    return Case("callable", kind, args, {BODY_FILE: source.encode()}, mutation, expect, blame)


# ------------------------------------------------------------------- family: numeric options at the edges
EDGE_KINDS = ("check", "show", "predict", "topology_show", "huge")
# (value, verdict) for each kind of numeric option; A: any exit in 0-3, R: exit 2 naming the option
EDGE_POSITIVE = [("-0", R), ("-0.0", R), ("1e3", R), ("1E-3", R), ("+2", A), ("0x10", R), ("1_0", A), (" 2 ", A),
                 ("\t2\n", A), ("\u0662", R), ("\uff12", R), ("nan", R), ("inf", R), ("-inf", R), ("2.0", R),
                 ("0", R), ("", R), ("2 2", R), ("0b10", R), ("1__0", R), ("_2", R), ("2_", R)]
EDGE_SECONDS = [("-0", A), ("-0.0", A), ("1e3", A), ("1E-3", A), ("+5", A), ("0x10", R), ("1_000", A), (" 5 ", A),
                ("\u0665", R), ("nan", R), ("NaN", R), ("-nan", R), ("inf", A), ("-inf", R), ("1e400", A),
                ("-1e-300", R), ("", R), ("5s", R)]
EDGE_STATES = [("-0", A), ("-0.0", A), ("1e3", A), ("1E-3", R), ("+5", A), ("0x10", R), ("1_000", A), (" 5 ", A),
               ("\u0665", R), ("nan", R), ("inf", A), ("-inf", R), ("1e400", A), ("2.5", R), ("", R)]
EDGE_SIZES = [("CHUNK=-0", R), ("CHUNK=1e3", R), ("CHUNK=+5", R), ("CHUNK=0x10", R), ("CHUNK=1_000", R),
              ("CHUNK= 5", R), ("CHUNK=\u0665", R), ("CHUNK=nan", R), ("CHUNK=inf", R), ("CHUNK=2.0", R),
              ("CHUNK=4", A)]
EDGE_HUGE = [("--ranks", "100000"), ("--ranks", "99999999999999999999"), ("--scaling", "100000"),
             ("--scale-nodes", "100000"), ("--scale-nodes", "5000"), ("--scale-nodes", str(2**63)),
             ("--nodes", "100000"), ("--nodes", "1000")]


def gen_edges(ch: Chooser, kind: str, timeout: float) -> Case:
    """Every numeric option of check, show, predict and topology show at its edges (-0, -0.0, 1e3,
    1E-3, +5, 0x10, 1_000, whitespace, other scripts' digits, nan, inf), and sizes far past a bound."""
    files: dict[str, bytes] = {"ring_allreduce.py": _ring()}
    if kind in ("check", "show"):
        base = [kind, "ring_allreduce.py", "--ranks", "2", "--timeout", _fmt(timeout)]
        options = {"--ranks": EDGE_POSITIVE, "--timeout": EDGE_SECONDS, "--size": EDGE_SIZES}
        if kind == "check":
            options["--max-states"] = EDGE_STATES
    elif kind == "predict":
        base = ["predict", "ring_allreduce.py", "-t", "h200x2-nv18", "--ranks", "2", "--sizes", "1KiB",
                "--timeout", _fmt(timeout)]
        options = {"--ranks": EDGE_POSITIVE, "--timeout": EDGE_SECONDS, "--size": EDGE_SIZES,
                   "--nodes": EDGE_POSITIVE, "--scaling": EDGE_POSITIVE, "--scale-nodes": EDGE_POSITIVE}
    elif kind == "topology_show":
        base = ["topology", "show", "dgx-h100-cluster"]
        options = {"--nodes": EDGE_POSITIVE}
    elif kind == "huge":
        option, value = ch.choice(EDGE_HUGE)
        if option == "--nodes" and value == "100000" and ch.coin():  # topology show loads what fits (5,194)
            args = ["topology", "show", "dgx-h100-cluster", "--nodes", value]
        elif option == "--ranks" and ch.coin():
            args = [ch.choice(["check", "show"]), "ring_allreduce.py", "--ranks", value, "--timeout", _fmt(timeout)]
        else:
            args = ["predict", "ring_allreduce.py", "-t", "dgx-h100-cluster", "--ranks", "16", "--sizes", "1KiB",
                    "--timeout", _fmt(timeout), option, value]
        mutation = {"option": option, "value": value, "must": "past a stated bound: exit 2 naming the option"}
        return Case("edges", kind, args, files, mutation, REJECT, (option, value, f"{int(value):,}"))
    else:
        raise ValueError(kind)
    option = ch.choice(sorted(options))
    value, verdict = ch.choice(options[option])
    if option in ("--nodes", "--scale-nodes") and kind == "predict":
        base = base[:3] + ["dgx-h100-cluster", "--ranks", "16"] + base[6:]
        if verdict == A and value.strip() not in ("+2", "2"):  # 10 nodes: fine too
            verdict = A
    args = _option(ch, base, option, value)
    if ch.coin(30):
        args.append("--json")
    expect = REJECT if verdict == R else CONTRACT
    mutation = {"option": option, "value": value}
    if verdict == R:
        mutation["must"] = "this option value is refused (exit 2 naming the option)"
    # "the schedule has 10 ranks but h200x2-nv18 has 2 GPUs" (--ranks 1_0) is clear too, and so is
    # "ring_allreduce.py:11: 1024 bytes is not reachable" at the 80 ranks of --scale-nodes 1_0
    blame = (option, value.split("=")[0] or option) + (("h200x2-nv18", "dgx-h100-cluster", "ring_allreduce.py:")
                                                       if kind == "predict" else ())
    return Case("edges", kind, args, files, mutation, expect, blame)


# ------------------------------------------------------------------------------------- generation
# The registry: family -> its kinds, family -> its generator (ch, kind, check_timeout) -> Case. Another
# module extends it (FAMILIES += ..., KINDS.update, GENERATORS.update), as fuzz_production does below.
KINDS = {"protocol": PROTOCOL_KINDS, "body": BODY_KINDS, "topology": TOPOLOGY_KINDS, "options": OPTION_KINDS,
         "topology_type": TOPOLOGY_TYPE_KINDS, "degenerate": DEGENERATE_KINDS, "source": SOURCE_KINDS,
         "callable": CALLABLE_KINDS, "edges": EDGE_KINDS}
GENERATORS = {"protocol": gen_protocol, "body": gen_body, "topology": gen_topology, "options": gen_options,
              "topology_type": gen_topology_type, "degenerate": gen_degenerate, "source": gen_source,
              "callable": gen_callable, "edges": gen_edges}

# The production families (run, codegen, build, validate, tune, --param): scripts/fuzz_production.py,
# whose own runner also sends signals mid-run and looks for processes, temporary files and writes
# left behind (python scripts/fuzz_production.py --family prod_run ...). Registered for generate() and
# make_case(); not in FAMILIES, so the default plan and its 30 s case bound stay as they were.
sys.path.insert(0, str(Path(__file__).resolve().parent))
import fuzz_production  # noqa: E402

KINDS.update(fuzz_production.KINDS)
GENERATORS.update({family: (lambda f: lambda ch, kind, timeout:
                            fuzz_production.GENERATORS[f](ch, kind, timeout))(family)
                   for family in fuzz_production.FAMILIES})


def generate(family: str, ch: Chooser, *, kind: str | None = None, seed: int | None = None,
             check_timeout: float = CHECK_TIMEOUT) -> Case:
    """One case of `family` (of sub-kind `kind`, else a chosen one), every choice made by `ch`."""
    kind = kind or ch.choice(KINDS[family])
    case = GENERATORS[family](ch, kind, check_timeout)
    case.seed = seed
    return case


def make_case(family: str, seed: int, check_timeout: float = CHECK_TIMEOUT) -> Case:
    """The case (family, seed): the same every time."""
    return generate(family, Chooser(random.Random(f"{family}:{seed}")), seed=seed, check_timeout=check_timeout)


def plan(cases: int, seed: int, families=FAMILIES) -> list[tuple[str, int]]:
    """(family, seed) of each of `cases` cases: families interleaved, case k of a family at seed S*10^6+k."""
    return [(families[i % len(families)], seed * SEED_STRIDE + i // len(families)) for i in range(cases)]


# ---------------------------------------------------------------------------------------- running
def _limit_resources() -> None:  # runs in the child, between fork and exec
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def materialise(case: Case, folder: Path) -> None:
    for name in case.dirs:
        (folder / name).mkdir(parents=True, exist_ok=True)
    for name, data in case.files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def cli_argv(case: Case) -> list[str]:
    # -P: the case's folder is not put on sys.path, as with the installed `clockworks` script.
    return [sys.executable, "-P", "-m", "clockworks_dist.cli", *case.args]


# Where a case may not write: the repository (but .git, and what engineers edit by hand while a run goes on:
# a source file that already exists may change under us) and the folder that holds the case folders.
WATCH_SKIP = {".git", "__pycache__", ".pytest_cache", ".hypothesis", ".mypy_cache", ".ruff_cache"}
EDITED_BY_HAND = (".py", ".md", ".yaml", ".json", ".cu", ".cuh", ".toml", ".sh", ".txt", ".jsonl", ".png")
_PARENT: Path | None = None


_PYCACHE: Path | None = None


def _pycache() -> Path:
    """One bytecode cache for this run's cases (PYTHONPYCACHEPREFIX), outside the repository: each case
    then loads the package's compiled modules instead of compiling them again (a quarter of a run)."""
    global _PYCACHE
    if _PYCACHE is None:
        _PYCACHE = Path(tempfile.mkdtemp(prefix="cwfuzz-pyc-"))
        __import__("atexit").register(shutil.rmtree, _PYCACHE, True)
    return _PYCACHE


def _case_parent() -> Path:
    """The folder this run makes its case folders in (one per fuzzing process): watched for writes."""
    global _PARENT
    if _PARENT is None:
        _PARENT = Path(tempfile.mkdtemp(prefix="cwfuzz-run-"))
        __import__("atexit").register(shutil.rmtree, _PARENT, True)
    return _PARENT


def snapshot(root: Path, skip=()) -> dict[str, tuple[int, int]]:
    """path -> (mtime_ns, size) of every file under `root`, leaving out WATCH_SKIP and `skip`."""
    found: dict[str, tuple[int, int]] = {}
    for folder, subdirs, names in os.walk(root):
        subdirs[:] = [d for d in subdirs if d not in WATCH_SKIP and not d.endswith(".egg-info")
                      and os.path.join(folder, d) not in skip]
        for name in names:
            path = os.path.join(folder, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            found[path] = (st.st_mtime_ns, st.st_size)
    return found


# The repository's folders a command could be made to write into (its inputs' and the package's); the
# repository's own results/ and tests/ are left out: engineers' runs create files there meanwhile.
WATCH_DIRS = ("protocols", "clockworks_dist", "topologies", "scripts")


def _watched() -> dict[str, tuple[int, int]]:
    parent = _case_parent()
    shot = {str(path): (0, 0) for path in REPO.iterdir() if path.is_file() or path.is_symlink()}
    for name in WATCH_DIRS:
        shot.update(snapshot(REPO / name, skip={str(REPO / "scripts" / "results")}))
    for entry in os.listdir(parent):  # the case folders themselves are each case's own
        if not entry.startswith("case-"):
            path = parent / entry
            shot.update(snapshot(path) if path.is_dir() else {str(path): (0, 0)})
    return shot


def outside_writes(before: dict, after: dict) -> list[str]:
    """Files created, or changed and not sources edited by hand, between two snapshots."""
    changed = []
    for path, stamp in after.items():
        if path not in before:
            changed.append(f"created {path}")
        elif before[path] != stamp and not path.endswith(EDITED_BY_HAND):
            changed.append(f"modified {path}")
    return sorted(changed)


def survivors(token: str) -> list[int]:
    """Processes still alive whose environment carries the case's token: its descendants."""
    found = []
    needle = f"CWFUZZ_CASE={token}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                if needle in handle.read().split(b"\0"):
                    with open(f"/proc/{entry}/stat", "rb") as stat:
                        if stat.read().rsplit(b")", 1)[-1].split()[0] != b"Z":  # not a zombie
                            found.append(int(entry))
        except OSError:
            continue
    return found


def run_case(case: Case, case_timeout: float = CASE_TIMEOUT, keep: str | os.PathLike | None = None) -> Result:
    """Run the case in a fresh folder (or `keep`), bounded by `case_timeout` seconds, and classify it.

    The case runs in its own session and process group, with HOME and TMPDIR inside its folder; after
    it exits, a process carrying its token still alive is a leftover (then killed), and a file made or
    changed in the repository or beside the case folders is an outside write."""
    folder = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="case-", dir=_case_parent()))
    folder.mkdir(parents=True, exist_ok=True)
    token = f"{os.getpid()}-{folder.name}-{time.monotonic_ns()}"
    extra: list[tuple[str, str]] = []
    try:
        materialise(case, folder)
        for name in (".home", ".tmp"):
            (folder / name).mkdir(exist_ok=True)
        # no empty entry in PYTHONPATH: it would put the case's folder on sys.path, where a case file named
        # json.py shadows the standard library (the installed `clockworks` script never sees the folder)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
                   PYTHONHASHSEED="0", PYTHONPYCACHEPREFIX=str(_pycache()), NO_COLOR="1", COLUMNS="120",
                   HOME=str(folder / ".home"), TMPDIR=str(folder / ".tmp"), TMP=str(folder / ".tmp"),
                   TEMP=str(folder / ".tmp"), XDG_CACHE_HOME=str(folder / ".home" / ".cache"),
                   MPLCONFIGDIR=str(folder / ".home" / ".mpl"), CWFUZZ_CASE=token)
        env.pop("PYTHONSTARTUP", None)
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # bytecode goes to _pycache(), never beside a source
        before = _watched()
        sink = open(case.stdout, "wb") if case.stdout else None  # noqa: SIM115
        start = time.monotonic()
        try:
            proc = subprocess.Popen(cli_argv(case), cwd=folder, env=env, stdin=subprocess.DEVNULL,
                                    stdout=sink or subprocess.PIPE, stderr=subprocess.PIPE,
                                    start_new_session=True, preexec_fn=_limit_resources)
            try:
                out, err = proc.communicate(timeout=case_timeout)
                timed_out = False
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)  # the case's own process group, nothing else
                except ProcessLookupError:
                    pass
                out, err = proc.communicate()
                timed_out = True
        finally:
            if sink:
                sink.close()
        seconds = time.monotonic() - start
        left = survivors(token)
        if left:
            extra.append(("leftover_process", f"{len(left)} process(es) of the case still alive after it "
                                              f"exited: {_commands(left)}"))
            for pid in left:
                with __import__("contextlib").suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        written = outside_writes(before, _watched())
        if written:
            extra.append(("outside_write", "; ".join(written[:5]) + (f" (+{len(written) - 5} more)"
                                                                     if len(written) > 5 else "")))
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)
    stdout = (out or b"").decode("utf-8", "replace")
    stderr = (err or b"").decode("utf-8", "replace")
    outcome, problems = classify(case, None if timed_out else proc.returncode, stdout, stderr, case_timeout, extra)
    return Result(case, outcome, problems, None if timed_out else proc.returncode, seconds, stdout, stderr)


def _commands(pids: list[int]) -> str:
    names = []
    for pid in pids[:3]:
        try:
            names.append(f"{pid} " + Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
                "utf-8", "replace")[:80].strip())
        except OSError:
            names.append(str(pid))
    return ", ".join(names)


def classify(case: Case, code: int | None, stdout: str, stderr: str, case_timeout: float = CASE_TIMEOUT,
             extra: list[tuple[str, str]] | None = None) -> tuple[str, list[tuple[str, str]]]:
    """The outcome of one run (None: it timed out) and every contract problem it shows (`extra`: what
    the runner saw around it, leftover processes and outside writes)."""
    problems: list[tuple[str, str]] = list(extra or [])
    if code is None:
        problems.append(("hang", f"still running after {case_timeout:g} s; killed"))
    else:
        text = stdout + "\n" + stderr
        if code == 4:
            problems.append(("internal_error", "exit 4 (internal error)"))
        if TRACEBACK in text:
            problems.append(("traceback", "a Python traceback in the output"))
        if code < 0:
            problems.append(("wrong_exit", f"killed by signal {-code}"))
        elif code not in CONTRACT and code != 4:
            problems.append(("wrong_exit", f"exit {code} is not one of 0, 1, 2, 3"))
        elif code in CONTRACT and code not in case.expect:
            why = case.mutation.get("must", "")
            # an input invalid by construction that got a verdict (0 verified, 1 violated, 3 incomplete)
            name = "wrong_verdict" if case.expect == REJECT and code in (0, 1) else "wrong_exit"
            problems.append((name, f"exit {code}, but this input must give "
                                           f"{' or '.join(map(str, case.expect))}" + (f" ({why})" if why else "")))
        if case.json and case.stdout is None:
            try:
                value = json.loads(stdout)
                if not isinstance(value, dict):
                    problems.append(("bad_json", f"--json printed a {type(value).__name__}, not an object"))
            except ValueError as exc:
                head = stdout.strip()[:60]
                problems.append(("bad_json", f"--json stdout is not one JSON object ({exc}); it starts {head!r}"))
        if code == 2 and case.blame and not any(token in text for token in case.blame):
            problems.append(("unnamed_file", f"exit 2 without naming {' or '.join(map(repr, case.blame))}"))
    outcome = min((p[0] for p in problems), key=PRECEDENCE.index, default="clean")
    return outcome, problems


# ---------------------------------------------------------------------------------------- reports
def _tail(text: str, limit: int) -> str:
    return text if len(text) <= limit else "..." + text[-limit:]


def example(result: Result) -> dict:
    case = result.case
    return {
        "id": case.id, "kind": case.kind, "command": case.command(),
        "replay": f"python scripts/fuzz_cli.py --replay {case.id} --keep /tmp/{case.family}-{case.seed}",
        "exit_code": result.exit_code, "seconds": round(result.seconds, 2),
        "problems": [f"{name}: {text}" for name, text in result.problems],
        "expect": list(case.expect), "files": sorted(case.files) + [d + "/" for d in case.dirs],
        "mutation": case.mutation, "stderr_tail": _tail(result.stderr, 1200), "stdout_tail": _tail(result.stdout, 400),
    }


def describe(result: Result) -> str:
    """Everything needed to understand and replay one result, as text."""
    case = result.case
    lines = [f"case {case.id} ({case.kind}): {result.outcome}",
             f"  run in a folder holding {sorted(case.files) + [d + '/' for d in case.dirs]}:",
             f"  $ {case.command()}",
             f"  exit {result.exit_code} after {result.seconds:.2f} s; allowed exits {list(case.expect)}"]
    lines += [f"  problem: {name}: {text}" for name, text in result.problems]
    for key, value in case.mutation.items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        if "\n" in text:
            lines.append(f"  {key}:")
            lines += ["    " + line for line in _tail(text, 3000).splitlines()]
        else:
            lines.append(f"  {key}: {_tail(text, 300)}")
    lines.append("  stderr:")
    lines += ["    " + line for line in _tail(result.stderr, 2000).splitlines()]
    if result.stdout.strip():
        lines.append("  stdout:")
        lines += ["    " + line for line in _tail(result.stdout, 800).splitlines()]
    return "\n".join(lines)


def summarise(results: list[Result], families, meta: dict) -> dict:
    counts = {f: {o: 0 for o in OUTCOMES} for f in families}
    by_kind: dict[str, dict[str, dict[str, int]]] = {f: {} for f in families}
    examples: dict[str, dict[str, list]] = {f: {} for f in families}
    for result in sorted(results, key=lambda r: (r.case.family, r.case.seed)):
        fam = result.case.family
        counts[fam][result.outcome] += 1
        kind = by_kind[fam].setdefault(result.case.kind, {})
        kind[result.outcome] = kind.get(result.outcome, 0) + 1
        if result.outcome != "clean":
            bucket = examples[fam].setdefault(result.outcome, [])
            if len(bucket) < EXAMPLES_PER_OUTCOME:
                bucket.append(example(result))
    totals = {o: sum(counts[f][o] for f in families) for o in OUTCOMES}
    return {**meta, "counts": counts, "totals": totals, "by_kind": by_kind, "examples": examples}


def markdown(summary: dict) -> str:
    head = "| family | cases | " + " | ".join(OUTCOMES) + " |"
    lines = ["# Fuzzing the clockworks command line", "",
             f"`{summary['command']}` at commit `{summary['commit']}`"
             f"{' (with uncommitted changes)' if summary.get('dirty') else ''}: {summary['cases']} cases in "
             f"{summary['seconds']:.0f} s, `check --timeout {summary['check_timeout']:g}`, each run bounded by "
             f"{summary['case_timeout']:g} s and {MEMORY_LIMIT // 1024**3} GiB. Outcomes as in "
             "`scripts/fuzz_cli.py`; clean means the run kept the contract.", "",
             head, "|" + "---|" * (len(OUTCOMES) + 2)]
    for fam, row in summary["counts"].items():
        lines.append(f"| {fam} | {sum(row.values())} | " + " | ".join(str(row[o]) for o in OUTCOMES) + " |")
    totals = summary["totals"]
    lines.append(f"| all | {sum(totals.values())} | " + " | ".join(str(totals[o]) for o in OUTCOMES) + " |")
    failing = [(fam, outcome, items) for fam, outcomes in summary["examples"].items()
               for outcome, items in outcomes.items()]
    if failing:
        lines += ["", "## Examples", "", "Replay one with its `replay` command (full details in fuzz_cli.json).", ""]
        for fam, outcome, items in failing:
            lines.append(f"**{fam} / {outcome}**")
            lines.append("")
            for item in items[:2]:
                problem = item["problems"][0] if item["problems"] else ""
                lines.append(f"- `{item['id']}` ({item['kind']}): `{_tail(item['command'], 200)}`: {problem}")
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=600, help="number of cases, spread over the families")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time")
    parser.add_argument("--family", action="append", choices=FAMILIES,
                        help="only this family (repeatable; default: all)")
    parser.add_argument("--check-timeout", type=float, default=CHECK_TIMEOUT, help="--timeout given to check")
    parser.add_argument("--case-timeout", type=float, default=CASE_TIMEOUT, help="seconds before a run is a hang")
    parser.add_argument("--out-dir", default=str(RESULTS_DIR), help="where fuzz_cli.json and fuzz_cli.md go")
    parser.add_argument("--no-write", action="store_true", help="print the summary only")
    parser.add_argument("--replay", metavar="FAMILY:SEED", help="run one case and print everything about it")
    parser.add_argument("--keep", metavar="DIR", help="with --replay: leave the case's files in DIR")
    parser.add_argument("--list", action="store_true", help="print the planned cases' commands, run nothing")
    args = parser.parse_args(argv)
    if args.replay:
        family, _, seed = args.replay.partition(":")
        case = make_case(family, int(seed), args.check_timeout)
        result = run_case(case, args.case_timeout, keep=args.keep)
        print(describe(result))
        if args.keep:
            print(f"files kept in {args.keep}; rerun there with: {case.command()}")
        return 0 if result.outcome == "clean" else 1
    families = tuple(args.family) if args.family else FAMILIES
    planned = plan(args.cases, args.seed, families)
    cases = [make_case(fam, seed, args.check_timeout) for fam, seed in planned]
    if args.list:
        for case in cases:
            print(f"{case.id}\t{case.kind}\t{_tail(case.command(), 200)}")
        return 0
    commit = _git("rev-parse", "--short", "HEAD")
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no", "--", "clockworks_dist"))
    start = time.monotonic()
    results: list[Result] = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(run_case, case, args.case_timeout) for case in cases]
        for i, future in enumerate(concurrent.futures.as_completed(futures), 1):
            results.append(future.result())
            if i % 50 == 0 or i == len(futures):
                bad = sum(r.outcome != "clean" for r in results)
                print(f"  {i}/{len(futures)} run, {bad} not clean, {time.monotonic() - start:.0f} s",
                      file=sys.stderr, flush=True)
    command = "python scripts/fuzz_cli.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    meta = {"command": command.strip(), "cases": len(cases), "seed": args.seed, "families": list(families),
            "check_timeout": args.check_timeout, "case_timeout": args.case_timeout,
            "memory_limit_bytes": MEMORY_LIMIT, "seconds": round(time.monotonic() - start, 1),
            "commit": commit, "dirty": dirty,
            "python": sys.version.split()[0]}
    summary = summarise(results, families, meta)
    table = markdown(summary)
    print(table)
    if not args.no_write:
        out = Path(args.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "fuzz_cli.json").write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n")
        (out / "fuzz_cli.md").write_text(table)
        print(f"wrote {out / 'fuzz_cli.json'} and {out / 'fuzz_cli.md'}", file=sys.stderr)
    return 0 if summary["totals"]["clean"] == len(cases) else 1


if __name__ == "__main__":
    sys.exit(main())
