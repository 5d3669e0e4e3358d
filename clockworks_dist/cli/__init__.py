"""The `clockworks` command: `show` a schedule's per-rank programs, `check` it for every interleaving,
`topology schema|show` for the machine descriptions.

Exit codes: 0 every property holds, 1 a property is violated, 2 bad input, 3 incomplete search,
4 an internal error (a bug in clockworks: never reported as a violation), 130 a real Ctrl-C.

The schedule file is Python we run, so what it does cannot decide the outcome (`dsl.guard`): an
exit (`sys.exit(0)`), a raised `KeyboardInterrupt` or any other exception is bad input (2) naming
its file:line and rank; what it prints goes to stderr; and `--timeout S` bounds loading and
tracing as well as the search. S applies to each (schedule, world size): loading the file, that
trace and that check together get S seconds from the start of the command, so a single check
finishes within S; a load or trace that runs out is incomplete (3). Output that cannot be written:
a closed pipe (`| head`) drops the rest quietly and keeps the verdict's exit code; any other write
error (a full disk) is exit 2 with the reason.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import signal
import sys
import time
from pathlib import Path
import traceback
from collections.abc import Callable, Sequence

from .. import _stopped_while_starting, hygiene, ir
from . import codegen as cli_codegen
from . import perf as cli_perf
from . import run as cli_run
from . import tune as cli_tune
from ..dsl import guard
from ..dsl import bounded
from ..errors import (
    EXIT_BAD_INPUT, EXIT_INCOMPLETE, EXIT_INTERNAL, EXIT_VERIFIED, EXIT_VIOLATED, CheckIncomplete, ClockworksError,
    ScheduleError, TopologyError, UsageError,
)

EXIT_INTERRUPTED = 130  # the shell's code for Ctrl-C
_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the package
DEFAULT_WORLDS = (2, 4, 8)
EPILOG = "exit codes: 0 verified, 1 violated, 2 bad input, 3 incomplete search, 4 internal error"
# Show the progress line only for searches that last longer than this many seconds.
PROGRESS_AFTER = 1.0
# The largest world `--ranks` accepts: far beyond what a search can cover, and it turns a typo
# (--ranks 99999999) into a clear error instead of a trace that fills the memory.
MAX_WORLD = 65_536
# A check whose loading and tracing used up --timeout still gets this long, for the static checks.
MIN_CHECK_S = 0.01
# The checker bounds itself; if a phase overruns --timeout by this much, the CLI stops it.
CHECK_BACKSTOP_S = 1.0


class OutputError(ClockworksError):
    """stdout cannot be written (a full disk, an I/O error)."""


class _UsageExit(Exception):
    """argparse rejected the command line; the message is already on stderr."""


# ------------------------------------------------------------------------------------- parsing
def _file_hint(text: str) -> str:
    """`--ranks 2 4 ring.py` swallows the file: say how to write it."""
    return " (write FILE before the options: clockworks check FILE --ranks 2 4)" if text.endswith(".py") else ""


# A whole number as the options take it: ASCII decimal digits, an optional leading +, spaces around
# and _ between digits as Python writes them (1_000). Exponents (1e3), hex (0x10), other scripts' digits,
# nan and inf are refused, naming the option.
_INTEGER = re.compile(r"^\s*([+-]?[0-9](?:_?[0-9])*)\s*$", re.ASCII)


def _integer(text: str) -> int:
    match = _INTEGER.match(text)
    if not match:
        raise ValueError(text)
    return int(match.group(1))


def _positive(text: str) -> int:
    """A positive integer option: decimal digits (see _INTEGER); -0 and 0 are refused."""
    try:
        value = _integer(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer in decimal digits, got {text!r}"
                                         f"{_file_hint(text)}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _world(text: str) -> int:
    """`--ranks`: a world size, 1..MAX_WORLD."""
    value = _positive(text)
    if value > MAX_WORLD:
        raise argparse.ArgumentTypeError(f"{value} ranks is more than clockworks checks (at most {MAX_WORLD:,})")
    return value


_UNBOUNDED = ("none", "inf", "+inf", "infinity", "+infinity")


def _seconds(text: str) -> float | None:
    """`--timeout`: seconds; 0 (also -0), 'none', 'inf' or an overflow such as 1e400 mean no bound;
    nan and negative numbers are errors."""
    if text.strip().lower() in _UNBOUNDED:
        return None
    try:
        if not text.isascii():  # float() reads other scripts' digits too: refused, as for integers
            raise ValueError(text)
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds or 'none', got {text!r}") from None
    if math.isnan(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative number of seconds (0 or 'none' for no bound), "
                                         f"got {text!r}")
    return None if value == 0 or math.isinf(value) else value


def _states(text: str) -> int | None:
    """`--max-states`: a whole number; 0 (also -0), 'none', 'inf' or an overflow mean no bound."""
    if text.strip().lower() in _UNBOUNDED:
        return None
    try:
        value = _integer(text)
    except ValueError:
        try:
            number = float(text) if text.isascii() else math.nan
        except ValueError:
            number = math.nan
        if math.isinf(number) and number > 0:
            return None
        if not number.is_integer():
            raise argparse.ArgumentTypeError(f"expected a whole number of states or 'none', got {text!r}") from None
        value = int(number)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative number of states (0 or 'none' for no bound), "
                                         f"got {text!r}")
    return value or None


_SIZE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(-?[0-9]+)$")


def _size(text: str) -> tuple[str, int]:
    match = _SIZE.match(text)
    if not match:
        raise argparse.ArgumentTypeError(
            f"expected NAME=VALUE with an integer value, e.g. CHUNK=8, got {text!r}{_file_hint(text)}")
    return match.group(1), int(match.group(2))


_PARAM = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=([A-Za-z0-9_-]+)$")


def _param(text: str) -> tuple[str, str]:
    """`--param NAME=VALUE`: a `cw.param` (an integer) or a `cw.choice` (an option); the schedule
    checks the value against the declared ones when it is traced."""
    match = _PARAM.match(text)
    if not match:
        raise argparse.ArgumentTypeError(
            f"expected NAME=VALUE, e.g. ALGO=twoshot or BLOCKS=16, got {text!r}{_file_hint(text)}")
    return match.group(1), match.group(2)


# The commands that trace FILE, and so take --param.
PARAM_COMMANDS = ("show", "check", "predict", "run", "codegen", "build", "validate")


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="a Python file defining @cw.schedule functions")
    parser.add_argument("--schedule", metavar="NAME", help="only the schedule NAME (default: every one in FILE)")
    parser.add_argument("--size", metavar="NAME=VALUE", type=_size, nargs="+", action="extend", default=[],
                        help="bind a symbolic size, e.g. --size CHUNK=8")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.add_argument("--debug", action="store_true", help="print tracebacks of errors in the input")


class _Parser(argparse.ArgumentParser):
    """argparse, except that a usage error reaches `main` (for --json) instead of exiting."""

    def error(self, message: str):
        _say(self.format_usage() + f"{self.prog}: error: {message}\n")
        raise _UsageExit(message)


def build_parser() -> argparse.ArgumentParser:
    """The argparse tree of `clockworks` and its subcommands."""
    parser = _Parser(
        prog="clockworks",
        description="Model-check multi-GPU communication schedules written in the clockworks DSL.",
        epilog=EPILOG)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    show = sub.add_parser("show", help="list each rank's program, declarations and postcondition",
                          description="Trace a schedule and list each rank's program.")
    _common(show)
    show.add_argument("--ranks", metavar="N", type=_world,
                      help="world size to trace (default: the schedule's first declared size, else 4)")
    show.add_argument("--timeout", metavar="S", type=_seconds, default=60.0,
                      help="stop loading and tracing after S seconds, 0 or 'none' for no bound (default: 60)")

    check = sub.add_parser("check", help="explore every interleaving and report violations",
                           description="Trace each schedule at each world size and model-check it.",
                           epilog=EPILOG)
    _common(check)
    check.add_argument("--ranks", metavar="N", type=_world, nargs="+", action="extend",
                       help="world sizes (default: the schedule's declared sizes, else 2 4 8)")
    order = check.add_mutually_exclusive_group()
    order.add_argument("--dfs", dest="strategy", action="store_const", const="dfs",
                       help="depth-first search (default)")
    order.add_argument("--bfs", dest="strategy", action="store_const", const="bfs",
                       help="breadth-first search: shortest counterexamples")
    check.set_defaults(strategy="dfs")
    check.add_argument("--max-states", metavar="N", type=_states, default=1_000_000,
                       help="stop after N states, 0 or 'none' for no bound (default: 1,000,000)")
    check.add_argument("--timeout", metavar="S", type=_seconds, default=60.0,
                       help="stop after S seconds per schedule and world size, loading and tracing "
                            "included; 0 or 'none' for no bound (default: 60)")
    check.add_argument("--no-reduction", dest="reduction", action="store_false",
                       help="explore every interleaving, without partial-order reduction")
    imports = sub.add_parser(
        "import", help="read another tool's algorithm file (MSCCL XML, MSCCL++ plan) into a schedule (JSON)",
        description="Read an MSCCL XML algorithm or an MSCCL++ execution plan into a schedule and write it as "
                    "JSON, which every command "
                    "takes (check, show, run). `clockworks check algo.xml` reads the file directly, with the "
                    "defaults below.")
    imports.add_argument("file", metavar="FILE", help="an MSCCL XML algorithm (as msccl-tools writes it, .xml) or an "
                         "MSCCL++ execution plan (as the MSCCL++ DSL writes it, .json)")
    imports.add_argument("-o", "--output", metavar="OUT.json", help="write the schedule here (default: stdout)")
    imports.add_argument("--slots", metavar="K", type=_positive, default=1,
                         help="messages each connection's FIFO holds, one per step (default: 1)")
    imports.add_argument("--chunk", metavar="N", type=_positive, default=None,
                         help="elements per chunk (default: 1 for MSCCL; for MSCCL++ the least that every "
                              "thread block group divides evenly)")
    imports.add_argument("--debug", action="store_true", help="print tracebacks of errors in the input")
    _topology_parser(sub)
    cli_perf.add_parsers(sub, _positive, _size, _seconds)
    cli_run.add_parser(sub, _positive, _size, _seconds)
    cli_codegen.add_parsers(sub, _positive, _size, _seconds)
    for name in PARAM_COMMANDS:
        sub.choices[name].add_argument(
            "--param", metavar="NAME=VALUE", type=_param, action="append", default=[],
            help="bind a parameter of a schedule family (cw.param, cw.choice), e.g. --param ALGO=twoshot; "
                 "repeat for several")
    cli_tune.add_parser(sub, _positive, _seconds)
    return parser


def _topology_parser(sub) -> None:
    topology = sub.add_parser("topology", help="machine descriptions: the file schema, a file's summary",
                              description="Topology files (YAML) describe the GPUs, switches, NICs and links "
                                          "of a machine or a cluster.", epilog=EPILOG)
    actions = topology.add_subparsers(dest="topology_command", metavar="ACTION")
    actions.required = True
    schema = actions.add_parser("schema", help="print the JSON schema of topology files",
                                description="Print the JSON schema of topology files.")
    schema.add_argument("--template", action="store_true",
                        help="the schema of cluster templates (files with a fabric: section) instead")
    schema.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    schema.set_defaults(json=True)
    show = actions.add_parser("show", help="summarise a topology: devices, links, per-GPU bandwidth, a route",
                              description="Load, validate and summarise a topology file.", epilog=EPILOG)
    show.add_argument("file", metavar="FILE",
                      help="a YAML topology file, or the name of a shipped one (e.g. dgx-h100, dgx-h100-cluster; "
                           "a name means its calibrated file when one ships, as for predict)")
    show.add_argument("--nodes", metavar="N", type=_positive,
                      help="expand a cluster template to N nodes (default: the template's own)")
    show.add_argument("--dot", metavar="OUT.dot", help="also write Graphviz DOT to OUT.dot")
    show.add_argument("--png", metavar="OUT.png", help="also draw a PNG (needs matplotlib: the [plot] extra)")
    show.add_argument("--json", action="store_true", help="print the (expanded) topology as JSON")
    show.add_argument("--debug", action="store_true", help="print tracebacks of errors in the input")
    detect = actions.add_parser(
        "detect", help="write this GPU node's topology file from what it reports (NVML, nvidia-smi)",
        description="Read this node's GPUs, NVLinks (and whether they meet at an NVSwitch), PCIe tree and NICs "
                    "from NVML and nvidia-smi, and write its topology file. The file has no fitted constants: "
                    "predictions with it use the cross-machine library constants and say what error to expect; "
                    "`clockworks calibrate` on the node fits its own.", epilog=EPILOG)
    detect.add_argument("--out", metavar="FILE.yaml", help="write the file here (default: print it)")
    detect.add_argument("--name", metavar="NAME", help="the topology's name (default: e.g. h200x4-nvswitch)")
    detect.add_argument("--facts", metavar="FILE.json",
                        help="read the node's facts from this file (as `--save-facts` wrote them) instead of "
                             "asking this node: describe a node you measured earlier")
    detect.add_argument("--save-facts", metavar="FILE.json", help="also write the facts read from the node here")
    detect.add_argument("--debug", action="store_true", help="print tracebacks of errors in the input")


# ------------------------------------------------------------------------------------- output
def _say(text: str) -> None:
    """A message on stderr; one that cannot be written (stderr closed or full) is dropped."""
    with contextlib.suppress(OSError, ValueError, AttributeError):  # AttributeError: no stderr at all (2>&-)
        sys.stderr.write(text)
        sys.stderr.flush()


def _silence_stdout() -> None:
    """Point file descriptor 1 at /dev/null, so that what is still buffered for stdout, and the
    interpreter's last flush, go nowhere instead of failing again."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        fd = sys.stdout.fileno()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)


class Output:
    """stdout for results, stderr for messages; colour only on a terminal.

    When stdout cannot be written, the rest is dropped: a closed pipe (the reader has what it
    wanted, `| head`) quietly, any other error (a full disk) raises `OutputError`."""

    def __init__(self) -> None:
        try:
            self.colour = sys.stdout.isatty()
        except (OSError, ValueError, AttributeError):  # AttributeError: no stdout at all (>&-)
            self.colour = False
        self.closed = False  # the reader closed the pipe

    def write(self, text: str) -> None:
        """Write `text` to stdout; what its encoding cannot hold (a file name that is not UTF-8) as
        backslash escapes."""
        self._guarded(lambda: self._write(text))

    @staticmethod
    def _write(text: str) -> None:
        try:
            sys.stdout.write(text)
        except UnicodeEncodeError:
            encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
            sys.stdout.write(text.encode(encoding, "backslashreplace").decode(encoding))

    def flush(self) -> None:
        """Flush stdout: a write error that the buffer held back surfaces here."""
        self._guarded(lambda: sys.stdout.flush())

    def _guarded(self, action: Callable[[], object]) -> None:
        if self.closed:
            return
        try:
            action()
        except BrokenPipeError:
            self.closed = True
            _silence_stdout()
        except (OSError, ValueError, AttributeError) as exc:  # ValueError: closed; AttributeError: no stdout
            self.closed = True
            _silence_stdout()
            reason = getattr(exc, "strerror", None) or ("stdout is closed" if sys.stdout is None else str(exc))
            raise OutputError(f"cannot write the output: {reason}") from None

    def text(self, text: str) -> None:
        if not self.colour:
            self.write(text + "\n")
            return
        self._guarded(lambda: self._rich(text.encode("utf-8", "backslashreplace").decode("utf-8")))

    @staticmethod
    def _rich(text: str) -> None:
        from rich.console import Console
        from rich.text import Text

        styled = Text(text)
        styled.highlight_regex(r"(?m)^(\S.*: )?verified.*$", "bold green")
        styled.highlight_regex(r"(?m)^(\S.*: )?violated.*$", "bold red")
        styled.highlight_regex(r"(?m)^(\S.*: )?no (violation|error) found, but.*$", "bold yellow")
        styled.highlight_regex(r"(?m)^error: .*$", "bold red")
        styled.highlight_regex(r"(?m)^warning: .*$", "bold yellow")
        styled.highlight_regex(r"(?m)^(schedule|rank \d+:) .*$", "bold")
        styled.highlight_regex(r"[\w./-]+\.py:\d+", "cyan")
        Console(highlight=False, soft_wrap=True).print(styled)

    def json(self, value) -> None:
        self.write(json.dumps(value, indent=2) + "\n")

    @staticmethod
    def error(message: str) -> None:
        _say(f"clockworks: error: {message}\n")

    @staticmethod
    def warning(message: str) -> None:
        _say(f"clockworks: warning: {message}\n")


class Progress:
    """A transient status line on stderr for searches longer than a second: states, states/s,
    how far the current path is (of the actions of one complete execution, and the time left at
    this pace if the search does not branch from here) and the memory used so far."""

    def __init__(self, title: str, enabled: bool):
        self.title = title
        try:
            self.enabled = enabled and sys.stderr.isatty()
        except (OSError, ValueError, AttributeError):
            self.enabled = False
        self.status = None

    def __call__(self, states: int, transitions: int, seconds: float, depth: int | None = None,
                 length: int | None = None) -> None:
        if not self.enabled or seconds < PROGRESS_AFTER:
            return
        rate = states / seconds if seconds > 0 else 0.0
        message = f"{self.title}: {states:,} states ({rate:,.0f}/s), {seconds:.0f} s"
        if depth and length:
            left = (length - depth) / rate if rate > 0 else 0.0
            message += f", path {depth:,}/{length:,} actions (~{left:.0f} s left if it does not branch)"
        memory = _peak_memory_mb()
        if memory is not None:
            message += f", {memory:,.0f} MB"
        if self.status is None:
            from rich.console import Console

            self.status = Console(stderr=True).status(message)
            self.status.start()
        else:
            self.status.update(message)

    def stop(self) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None


def _peak_memory_mb() -> float | None:
    """The process's peak resident memory so far, in MB (None where the platform does not say)."""
    try:
        import resource
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


# ------------------------------------------------------------------------------------ commands
def _checker():
    """The model checker's entry point (imported late, so `show` works without it)."""
    from ..check import check

    return check


def cmd_show(args: argparse.Namespace, out: Output) -> int:
    """Trace and list the selected schedules."""
    from ..report.text import render_listing

    defs, spent = bounded.load(args)
    if args.json and len(defs) > 1:
        raise UsageError(f"{args.file} defines {len(defs)} schedules ({', '.join(d.name for d in defs)}); "
                         "pick one with --schedule NAME for --json")
    for i, defn in enumerate(defs):
        world = args.ranks or (defn.ranks[0] if defn.ranks else 4)
        [(sched, _seconds_taken)] = bounded.trace_all(args, [(defn, world)], spent)
        if args.json:
            out.write(sched.to_json(indent=2) + "\n")
        else:
            if i:
                out.text("")
            out.text(render_listing(sched))
    return EXIT_VERIFIED


def _exit_code(verdicts: Sequence[str]) -> int:
    if "violated" in verdicts:
        return EXIT_VIOLATED
    if "incomplete" in verdicts:
        return EXIT_INCOMPLETE
    return EXIT_VERIFIED


def cmd_check(args: argparse.Namespace, out: Output) -> int:
    """Trace each (schedule, world size), check it, print the results."""
    from ..report.text import render_result, render_summary

    defs, spent = bounded.load(args)
    jobs = [(defn, world) for defn in defs for world in (args.ranks or defn.ranks or DEFAULT_WORLDS)]
    # Trace everything first: bad input is reported before any long search starts.
    traced = bounded.trace_all(args, jobs, spent)
    check = _checker()
    results = []
    for i, (sched, trace_seconds) in enumerate(traced):
        left = bounded.left(args, spent + trace_seconds)
        timeout = None if left is None else max(left, MIN_CHECK_S)
        progress = Progress(f"checking {sched.name}, {sched.world} ranks", enabled=not args.json)
        check_started = time.monotonic()
        found: list = []  # the check's result so far (`check`'s `found`): kept, however it is stopped

        def report(found=found, i=i) -> tuple[int, str] | None:
            """What to print if the check cannot be stopped: what it found, with what came before."""
            if not found:
                return None
            done = results + found[-1:]
            text = _results_document(args, done) if args.json else \
                "\n".join([render_result(found[-1], timing=True)] + ([render_summary(done)] if len(done) > 1 else []))
            return _exit_code(_verdicts(done)), text + "\n"

        try:
            with bounded.bound(args, None if timeout is None else timeout + CHECK_BACKSTOP_S,
                        f"checking {sched.name} at {sched.world} ranks", report):
                result = check(sched, strategy=args.strategy, max_states=args.max_states, timeout=timeout,
                               reduction=args.reduction, progress=progress, found=found)
        except guard.TimeUp as exc:
            # The bound passed after the search: report what the check found (the result itself, or
            # what the phases it reached had found), not an empty "incomplete".
            result = found[-1] if found else _overran(sched, args, exc, time.monotonic() - check_started)
        finally:
            progress.stop()
        results.append(result)
        if not args.json:
            if i:
                out.text("")
            out.text(render_result(result, timing=True))
    if args.json:
        out.write(_results_document(args, results) + "\n")
    elif len(results) > 1:
        out.text("")
        out.text(render_summary(results))
    return _exit_code(_verdicts(results))


def _verdicts(results: list) -> list[str]:
    return [r.verdict if r.complete or r.verdict == "violated" else "incomplete" for r in results]


def _results_document(args: argparse.Namespace, results: list) -> str:
    """The one JSON document of `check --json`: one result, or every result and the overall verdict."""
    from ..report.text import overall_verdict

    if len(results) == 1:
        return json.dumps(results[0].to_json(), indent=2)
    return json.dumps({"verdict": overall_verdict(results), "results": [r.to_json() for r in results]}, indent=2)


def _overran(sched: ir.Schedule, args: argparse.Namespace, exc: guard.TimeUp, seconds: float):
    """The result of a check the CLI had to stop: incomplete, naming the phase that overran."""
    from ..check import CheckResult

    phase = "the checker"
    checker_dir = os.path.join(_HERE, "check")
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if os.path.abspath(code.co_filename).startswith(checker_dir):
            phase = f"{os.path.relpath(code.co_filename, os.path.dirname(_HERE))} ({code.co_name})"
        tb = tb.tb_next
    Output.warning(f"{sched.name}, {sched.world} ranks: the check overran --timeout {args.timeout:g} s in {phase}; "
                   "stopped it")
    return CheckResult(schedule=sched, verdict="incomplete", violations=[], states=0, transitions=0,
                       seconds=seconds, complete=False, stopped_by="timeout",
                       strategy=args.strategy, reduction=args.reduction)


def cmd_topology(args: argparse.Namespace, out: Output) -> int:
    """`topology schema`: the JSON schema; `topology show FILE`: a summary, DOT, PNG or JSON."""
    from .. import topology

    if args.topology_command == "schema":
        model = topology.ClusterTemplate if args.template else topology.Topology
        out.json(model.model_json_schema())
        return EXIT_VERIFIED
    if args.topology_command == "detect":
        return _detect(args, out)
    for option, value in (("--dot", args.dot), ("--png", args.png)):
        if value is not None and not value.strip():
            raise UsageError(f"{option} needs a file name, got {value!r}")
    chosen = topology.choose_topology(args.file, nodes=args.nodes)  # what predict would use for args.file
    topo = chosen.topology
    if args.dot:
        _write(args.dot, topology.to_dot(topo))
    if args.png:
        try:
            topology.draw_png(topo, args.png)
        except OSError as exc:
            raise UsageError(f"cannot write {args.png}: {exc.strerror or exc}") from None
        _say(f"wrote {args.png}\n")
    if args.json:
        out.write(topo.model_dump_json(indent=2) + "\n")
        return EXIT_VERIFIED
    try:
        text = topology.summary(topo)
    except TopologyError as exc:  # found while routing (two GPUs with no route): name the file
        message = str(exc)
        raise TopologyError(message if message.startswith(args.file) else f"{args.file}: {message}") from None
    heading, _, rest = text.partition("\n")
    out.text(f"{heading}\n  file: {chosen.describe()}\n{rest}")
    return EXIT_VERIFIED


def _detect(args: argparse.Namespace, out: Output) -> int:
    """`topology detect`: the node's facts (or a saved record of them) -> a checked topology file."""
    import yaml

    from ..topology import detect, model

    if args.facts:
        try:
            facts = json.loads(Path(args.facts).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read {args.facts}: {getattr(exc, 'strerror', None) or exc}") from None
        except ValueError as exc:
            raise UsageError(f"{args.facts}: not JSON ({exc}); give a file `topology detect --save-facts` "
                             "wrote") from None
        if not isinstance(facts, dict):
            raise UsageError(f"{args.facts}: not a facts record (a JSON object with a gpus list)")
    else:
        facts = detect.probe_node()
    if args.save_facts:
        _write(args.save_facts, json.dumps(facts, indent=1) + "\n")
    document = detect.document(facts, name=args.name)
    where = Path(args.out or f"{document['name']}.yaml")
    model.validate_document(document, where)  # the file it writes loads as a topology
    text = (f"# Written by `clockworks topology detect` from what the node reported (NVML, nvidia-smi).\n"
            + yaml.safe_dump(document, sort_keys=False, width=110))
    if args.out:
        _write(args.out, text)
    else:
        out.text(text.rstrip("\n"))
    return EXIT_VERIFIED


def _write(path: str, text: str) -> None:
    try:
        with open(path, "w") as handle:
            handle.write(text)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
    _say(f"wrote {path}\n")


def cmd_import(args: argparse.Namespace, out: Output) -> int:
    """Read an MSCCL XML algorithm or an MSCCL++ execution plan and write its schedule as JSON."""
    from ..importers import mscclpp_json
    from ..importers.msccl import ImportedDef
    from ..importers.mscclpp import ImportedPlan

    if args.file.endswith(".xml"):
        defn = ImportedDef(args.file, chunk=args.chunk or 1, slots=args.slots)
        sched = defn.trace(defn.alg.ngpus)
        per = f"{defn.slots} slot(s) per connection"
    elif args.file.endswith(".json") and mscclpp_json.looks_like_plan(text := mscclpp_json.read_text(args.file)):
        plan = ImportedPlan(args.file, chunk=args.chunk, text=text)
        sched = plan.trace(plan.world)
        per = "from an MSCCL++ execution plan"
    else:
        raise UsageError(f"{args.file}: clockworks import reads MSCCL XML algorithms (.xml files) and MSCCL++ "
                         "execution plans (.json files with \"gpus\" and \"collective\")")
    text = sched.to_json(indent=2) + "\n"
    if args.output is None:
        out.write(text)
        return EXIT_VERIFIED
    try:
        with open(args.output, "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as exc:
        raise UsageError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    threads = sum(len(p.threads) for p in sched.programs)
    _say(f"wrote {args.output}: {sched.name}, {sched.world} ranks, {threads} thread blocks, "
         f"{per}; check it with: clockworks check {args.output}\n")
    return EXIT_VERIFIED


COMMANDS = {"show": cmd_show, "check": cmd_check, "topology": cmd_topology, "import": cmd_import,
            "predict": cli_perf.cmd_predict, "calibrate": cli_perf.cmd_calibrate, "run": cli_run.cmd_run,
            "codegen": cli_codegen.cmd_codegen, "build": cli_codegen.cmd_build, "validate": cli_codegen.cmd_validate,
            "tune": cli_tune.cmd_tune}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `clockworks` console script; returns the exit code."""
    started = time.monotonic()
    argv = sys.argv[1:] if argv is None else list(argv)
    out = Output()
    try:
        args = build_parser().parse_args(argv)
    except _UsageExit as exc:
        if "--json" in argv:
            out.json({"verdict": "error", "error": {"type": "UsageError", "message": str(exc)}})
        return _finish(out, EXIT_BAD_INPUT)
    except SystemExit as exc:  # --help
        return _finish(out, exc.code if isinstance(exc.code, int) else EXIT_BAD_INPUT)
    except OSError as exc:  # --help, but stdout cannot be written
        out.error(f"cannot write the output: {exc.strerror or exc}")
        _silence_stdout()
        return EXIT_BAD_INPUT
    args.started = started
    if signal.getsignal(signal.SIGINT) is _stopped_while_starting:  # the package has loaded: Ctrl-C as usual
        signal.signal(signal.SIGINT, signal.default_int_handler)
    with guard.catch_sigint(), hygiene.on_signals(guard.mark_interrupted):
        code = _run(args, out)
        return _finish(out, code)


def _run(args: argparse.Namespace, out: Output) -> int:
    """Run the command; every way it can end becomes an exit code and a message."""
    try:
        hygiene.check_params(args)
        return COMMANDS[args.command](args, out)
    except CheckIncomplete as exc:
        _debug(args)
        out.error(f"incomplete: {exc}")
        _json_error(args, out, {"verdict": "incomplete", "error": {"message": str(exc)}})
        return EXIT_INCOMPLETE
    except ClockworksError as exc:
        _debug(args)
        out.error(str(exc))
        _json_error(args, out, {"verdict": "error", "error": _error_json(exc)})
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        out.error("interrupted")
        return hygiene.exit_code(EXIT_INTERRUPTED)
    except guard.TimeUp as exc:  # the bound passed just as a phase ended
        out.error(f"incomplete: {exc} (--timeout)")
        _json_error(args, out, {"verdict": "incomplete", "error": {"message": f"{exc} (--timeout)"}})
        return EXIT_INCOMPLETE
    except Exception:  # a bug of ours: say so, and keep it apart from "violated" (exit 1)
        with contextlib.suppress(OSError, ValueError):
            traceback.print_exc()
        out.error("internal error: this is a bug in clockworks, not in your schedule; please report it "
                  "with the traceback above")
        _json_error(args, out, {"verdict": "error", "error": {"type": "InternalError",
                                                               "message": "internal error in clockworks"}})
        return EXIT_INTERNAL


def _debug(args: argparse.Namespace) -> None:
    if getattr(args, "debug", False):
        with contextlib.suppress(OSError, ValueError):
            traceback.print_exc()


def _json_error(args: argparse.Namespace, out: Output, report: dict) -> None:
    """With --json, an error is still one JSON object on stdout (unless stdout is what failed)."""
    if getattr(args, "json", False):
        try:
            out.json(report)
        except OutputError:
            pass


def _finish(out: Output, code: int) -> int:
    """Flush stdout; a closed pipe keeps `code`, any other write error is exit 2."""
    try:
        out.flush()
    except OutputError as exc:
        out.error(str(exc))
        return EXIT_BAD_INPUT
    return code


def _error_json(exc: ClockworksError) -> dict:
    info = {"type": type(exc).__name__, "message": str(exc)}
    if isinstance(exc, ScheduleError):
        info.update(file=exc.file, line=exc.line, rank=exc.rank, op=exc.op, hint=exc.hint)
    return info
