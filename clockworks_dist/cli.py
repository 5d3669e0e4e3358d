"""The `clockworks` command: `show` a schedule's per-rank programs, `check` it for every interleaving,
`topology schema|show` for the machine descriptions.

Exit codes: 0 every property holds, 1 a property is violated, 2 bad input, 3 incomplete search,
4 an internal error (a bug in clockworks: never reported as a violation).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import traceback
from collections.abc import Callable, Sequence

from . import cli_perf, ir
from .dsl import ScheduleDef, load_file
from .errors import CheckIncomplete, ClockworksError, ScheduleError

EXIT_VERIFIED, EXIT_VIOLATED, EXIT_BAD_INPUT, EXIT_INCOMPLETE, EXIT_INTERNAL = 0, 1, 2, 3, 4
EXIT_INTERRUPTED = 130  # the shell's code for Ctrl-C
DEFAULT_WORLDS = (2, 4, 8)
EPILOG = "exit codes: 0 verified, 1 violated, 2 bad input, 3 incomplete search, 4 internal error"
# Show the progress line only for searches that last longer than this many seconds.
PROGRESS_AFTER = 1.0


class UsageError(ClockworksError):
    """A command line that names something the file does not have."""


# ------------------------------------------------------------------------------------- parsing
def _file_hint(text: str) -> str:
    """`--ranks 2 4 ring.py` swallows the file: say how to write it."""
    return " (write FILE before the options: clockworks check FILE --ranks 2 4)" if text.endswith(".py") else ""


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}{_file_hint(text)}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _limit(kind: Callable[[str], float | int]) -> Callable[[str], float | int | None]:
    """A bound where 0 or 'none' means unbounded."""

    def parse(text: str):
        if text.lower() in ("none", "0", "inf"):
            return None
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number or 'none', got {text!r}") from None
        if value < 0:
            raise argparse.ArgumentTypeError(f"expected a non-negative number, got {text!r}")
        return value

    return parse


_SIZE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(-?[0-9]+)$")


def _size(text: str) -> tuple[str, int]:
    match = _SIZE.match(text)
    if not match:
        raise argparse.ArgumentTypeError(
            f"expected NAME=VALUE with an integer value, e.g. CHUNK=8, got {text!r}{_file_hint(text)}")
    return match.group(1), int(match.group(2))


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="a Python file defining @cw.schedule functions")
    parser.add_argument("--schedule", metavar="NAME", help="only the schedule NAME (default: every one in FILE)")
    parser.add_argument("--size", metavar="NAME=VALUE", type=_size, nargs="+", action="extend", default=[],
                        help="bind a symbolic size, e.g. --size CHUNK=8")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.add_argument("--debug", action="store_true", help="print tracebacks of errors in the input")


def build_parser() -> argparse.ArgumentParser:
    """The argparse tree of `clockworks` and its subcommands."""
    parser = argparse.ArgumentParser(
        prog="clockworks",
        description="Model-check multi-GPU communication schedules written in the clockworks DSL.",
        epilog=EPILOG)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    show = sub.add_parser("show", help="list each rank's program, declarations and postcondition",
                          description="Trace a schedule and list each rank's program.")
    _common(show)
    show.add_argument("--ranks", metavar="N", type=_positive,
                      help="world size to trace (default: the schedule's first declared size, else 4)")

    check = sub.add_parser("check", help="explore every interleaving and report violations",
                           description="Trace each schedule at each world size and model-check it.",
                           epilog=EPILOG)
    _common(check)
    check.add_argument("--ranks", metavar="N", type=_positive, nargs="+", action="extend",
                       help="world sizes (default: the schedule's declared sizes, else 2 4 8)")
    order = check.add_mutually_exclusive_group()
    order.add_argument("--dfs", dest="strategy", action="store_const", const="dfs",
                       help="depth-first search (default)")
    order.add_argument("--bfs", dest="strategy", action="store_const", const="bfs",
                       help="breadth-first search: shortest counterexamples")
    check.set_defaults(strategy="dfs")
    check.add_argument("--max-states", metavar="N", type=_limit(int), default=1_000_000,
                       help="stop after N states, 0 or 'none' for no bound (default: 1,000,000)")
    check.add_argument("--timeout", metavar="S", type=_limit(float), default=60.0,
                       help="stop after S seconds per check, 0 or 'none' for no bound (default: 60)")
    check.add_argument("--no-reduction", dest="reduction", action="store_false",
                       help="explore every interleaving, without partial-order reduction")
    _topology_parser(sub)
    cli_perf.add_parsers(sub, _positive, _size)
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
                      help="a YAML topology file, or the name of a shipped one (e.g. dgx-h100, dgx-h100-cluster)")
    show.add_argument("--nodes", metavar="N", type=_positive,
                      help="expand a cluster template to N nodes (default: the template's own)")
    show.add_argument("--dot", metavar="OUT.dot", help="also write Graphviz DOT to OUT.dot")
    show.add_argument("--png", metavar="OUT.png", help="also draw a PNG (needs matplotlib: the [plot] extra)")
    show.add_argument("--json", action="store_true", help="print the (expanded) topology as JSON")
    show.add_argument("--debug", action="store_true", help="print tracebacks of errors in the input")


# ------------------------------------------------------------------------------------- output
class Output:
    """stdout for results, stderr for messages; colour only on a terminal."""

    def __init__(self) -> None:
        self.colour = sys.stdout.isatty()

    def text(self, text: str) -> None:
        if not self.colour:
            sys.stdout.write(text + "\n")
            return
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
        sys.stdout.write(json.dumps(value, indent=2) + "\n")

    @staticmethod
    def error(message: str) -> None:
        sys.stderr.write(f"clockworks: error: {message}\n")


class Progress:
    """A transient status line on stderr (states, states/s) for searches longer than a second."""

    def __init__(self, title: str, enabled: bool):
        self.title = title
        self.enabled = enabled and sys.stderr.isatty()
        self.status = None

    def __call__(self, states: int, transitions: int, seconds: float) -> None:
        if not self.enabled or seconds < PROGRESS_AFTER:
            return
        rate = states / seconds if seconds > 0 else 0.0
        message = f"{self.title}: {states:,} states ({rate:,.0f}/s), {seconds:.0f} s"
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


# ------------------------------------------------------------------------------------ commands
def _checker():
    """The model checker's entry point (imported late, so `show` works without it)."""
    from .check import check

    return check


def _select(defs: list[ScheduleDef], name: str | None, path: str) -> list[ScheduleDef]:
    if name is None:
        return defs
    chosen = [d for d in defs if d.name == name]
    if not chosen:
        raise UsageError(f"{path}: no schedule named {name!r}; it defines {', '.join(d.name for d in defs)}")
    return chosen


def _trace(defn: ScheduleDef, world: int, sizes: list[tuple[str, int]]) -> ir.Schedule:
    return defn.trace(world, sizes=dict(sizes) or None)


def cmd_show(args: argparse.Namespace, out: Output) -> int:
    """Trace and list the selected schedules."""
    from .report.text import render_listing

    defs = _select(load_file(args.file), args.schedule, args.file)
    if args.json and len(defs) > 1:
        raise UsageError(f"{args.file} defines {len(defs)} schedules ({', '.join(d.name for d in defs)}); "
                         "pick one with --schedule NAME for --json")
    for i, defn in enumerate(defs):
        world = args.ranks or (defn.ranks[0] if defn.ranks else 4)
        sched = _trace(defn, world, args.size)
        if args.json:
            sys.stdout.write(sched.to_json(indent=2) + "\n")
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
    from .report.text import overall_verdict, render_result, render_summary

    defs = _select(load_file(args.file), args.schedule, args.file)
    jobs = [(defn, world) for defn in defs for world in (args.ranks or defn.ranks or DEFAULT_WORLDS)]
    # Trace everything first: bad input is reported before any long search starts.
    schedules = [_trace(defn, world, args.size) for defn, world in jobs]
    check = _checker()
    results = []
    for i, sched in enumerate(schedules):
        progress = Progress(f"checking {sched.name}, {sched.world} ranks", enabled=not args.json)
        try:
            result = check(sched, strategy=args.strategy, max_states=args.max_states, timeout=args.timeout,
                           reduction=args.reduction, progress=progress)
        finally:
            progress.stop()
        results.append(result)
        if not args.json:
            if i:
                out.text("")
            out.text(render_result(result, timing=True))
    verdicts = [r.verdict if r.complete or r.verdict == "violated" else "incomplete" for r in results]
    if args.json:
        if len(results) == 1:
            out.json(results[0].to_json())
        else:
            out.json({"verdict": overall_verdict(results), "results": [r.to_json() for r in results]})
    elif len(results) > 1:
        out.text("")
        out.text(render_summary(results))
    return _exit_code(verdicts)


def cmd_topology(args: argparse.Namespace, out: Output) -> int:
    """`topology schema`: the JSON schema; `topology show FILE`: a summary, DOT, PNG or JSON."""
    from . import topology

    if args.topology_command == "schema":
        model = topology.ClusterTemplate if args.template else topology.Topology
        out.json(model.model_json_schema())
        return EXIT_VERIFIED
    topo = topology.load_topology(args.file, nodes=args.nodes)
    if args.dot:
        _write(args.dot, topology.to_dot(topo))
    if args.png:
        try:
            topology.draw_png(topo, args.png)
        except OSError as exc:
            raise UsageError(f"cannot write {args.png}: {exc.strerror or exc}") from None
        sys.stderr.write(f"wrote {args.png}\n")
    if args.json:
        sys.stdout.write(topo.model_dump_json(indent=2) + "\n")
    else:
        out.text(topology.summary(topo))
    return EXIT_VERIFIED


def _write(path: str, text: str) -> None:
    try:
        with open(path, "w") as handle:
            handle.write(text)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
    sys.stderr.write(f"wrote {path}\n")


COMMANDS = {"show": cmd_show, "check": cmd_check, "topology": cmd_topology,
            "predict": cli_perf.cmd_predict, "calibrate": cli_perf.cmd_calibrate}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `clockworks` console script; returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error argparse has already printed
        return exc.code if isinstance(exc.code, int) else EXIT_BAD_INPUT
    out = Output()
    try:
        return COMMANDS[args.command](args, out)
    except CheckIncomplete as exc:
        if args.debug:
            traceback.print_exc()
        out.error(f"the search is incomplete: {exc}")
        if args.json:
            out.json({"verdict": "incomplete", "error": {"message": str(exc)}})
        return EXIT_INCOMPLETE
    except ClockworksError as exc:
        if args.debug:
            traceback.print_exc()
        out.error(str(exc))
        if args.json:
            out.json({"verdict": "error", "error": _error_json(exc)})
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        out.error("interrupted")
        return EXIT_INTERRUPTED
    except Exception:  # a bug of ours: say so, and keep it apart from "violated" (exit 1)
        traceback.print_exc()
        out.error("internal error: this is a bug in clockworks, not in your schedule; please report it "
                  "with the traceback above")
        return EXIT_INTERNAL


def _error_json(exc: ClockworksError) -> dict:
    info = {"type": type(exc).__name__, "message": str(exc)}
    if isinstance(exc, ScheduleError):
        info.update(file=exc.file, line=exc.line, rank=exc.rank, op=exc.op, hint=exc.hint)
    return info


def run() -> None:
    """`python -m clockworks_dist.cli`."""
    sys.exit(main())


if __name__ == "__main__":
    run()
