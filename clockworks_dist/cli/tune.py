"""`clockworks tune FILE -t TOPOLOGY --np N --sizes RANGE [--dry] [--emit DIR]`: the fastest verified
variant of a schedule family per size (`clockworks_dist.tune`); with `--emit DIR`, the winners as a
library with a size dispatcher (`cw_<name>.h` + `.cu`, `codegen.library`), also from tune results
already made (`--from RESULTS`, without tuning again).

Exit codes: 0 done, 2 bad input (the file, an option, no GPU without --dry), 3 out of time, 4 an
internal error.
"""

from __future__ import annotations

import argparse
import math
import sys

from ..errors import ClockworksError


def add_parser(sub, positive, seconds) -> None:
    """The `tune` subcommand (`positive`, `seconds`: the CLI's argument types)."""
    from .. import tune

    cmd = sub.add_parser("tune", help="search a schedule family (cw.param, cw.choice) for the fastest verified "
                                      "variant per size",
                         description="Enumerate the variants of FILE's schedule family; check each (a variant that "
                                     "fails is rejected, never run); predict the rest at each size and rank them; "
                                     "without --dry, build and measure the top K with validate and accept a "
                                     "variant only above the noise. Every try is remembered in DIR/tune_memory.json.",
                         epilog="exit codes: 0 done, 2 bad input or no GPU without --dry, 3 out of time, "
                                "4 internal error. With --emit DIR: the winners as a library, cw_<name>.h + .cu (a "
                                "size dispatcher over their kernels), its test driver and cw_<name>.json; --from "
                                "RESULTS (repeatable) emits from tune results already made, without tuning.")
    cmd.add_argument("file", metavar="FILE", help="a Python file defining a @cw.schedule family")
    cmd.add_argument("--topology", "-t", metavar="T",
                     help="a shipped name (e.g. h200x2-nv18: its calibrated file when one ships, else its "
                          "uncalibrated one, with a warning), or a topology file, loaded as it is (required unless "
                          "--from)")
    cmd.add_argument("--np", "--ranks", dest="np", metavar="N", type=positive,
                     help="world size (required unless --from)")
    cmd.add_argument("--sizes", metavar="RANGE", default="1KiB..1GiB",
                     help="bytes per rank: 1KiB..1GiB (powers of two) or a list 8KiB,1MiB (default 1KiB..1GiB)")
    cmd.add_argument("--schedule", metavar="NAME", help="the schedule NAME of FILE (default: its only one)")
    cmd.add_argument("--dry", action="store_true", help="check, predict and rank only: build and run nothing")
    cmd.add_argument("--top", metavar="K", type=positive, default=tune.DEFAULT_TOP,
                     help=f"measure the K best predicted variants per size (default {tune.DEFAULT_TOP})")
    cmd.add_argument("--noise", metavar="F", type=_fraction, default=tune.DEFAULT_NOISE,
                     help="accept a variant only if it is faster by this fraction, or by the measured spread if "
                          f"larger (default {tune.DEFAULT_NOISE})")
    cmd.add_argument("--out", metavar="DIR", default="tune-results",
                     help="where tune.json, tune.md and tune_memory.json go (default tune-results)")
    cmd.add_argument("--mode", choices=("graph", "eager"), default="graph", help="predicted launch mode")
    cmd.add_argument("--calls", metavar="K", type=positive, default=1,
                     help="check, predict and measure each variant as K back-to-back calls (epoch signal words, "
                          "no reset), with the cheapest separator the checker verifies; times per call (default 1)")
    cmd.add_argument("--fuse-calls", action="store_true",
                     help="with --calls: measure the K calls inside one kernel per rank (no launch between calls) "
                          "instead of one kernel per call, as a library call would launch")
    cmd.add_argument("--packets", metavar="SIZES", type=_packet_limits, default=[],
                     help="also try each variant with its put_signals of at most SIZE bytes sent as flag-in-data "
                          "packets, for each SIZE of the list (e.g. 16KiB,64KiB); the rewritten schedule is what is "
                          "checked, predicted and measured, and each lowering's top K is measured")
    cmd.add_argument("--copy-engine", metavar="SIZES", type=_packet_limits, default=[],
                     help="also try each variant with its puts and put_signals of at least SIZE bytes issued from the "
                          "host on the copy engine, for each SIZE of the list (e.g. 16MiB); the schedule is the "
                          "variant's, and each lowering's top K is measured")
    cmd.add_argument("--timeout", metavar="S", type=seconds, default=tune.CHECK_TIMEOUT_S,
                     help=f"loading FILE, and the tracing and the check of each variant, each stop after S seconds "
                          f"(default {tune.CHECK_TIMEOUT_S:g}); a variant whose tracing runs out is rejected")
    cmd.add_argument("--max-variants", metavar="N", type=positive, default=None,
                     help=f"the most candidates (variants x --packets/--copy-engine lowerings) to try (default "
                          f"{tune.MAX_VARIANTS}); a larger family is refused before anything is listed, traced or run")
    cmd.add_argument("--emit", metavar="DIR",
                     help="write the winners as a library into DIR: cw_<name>.h + cw_<name>.cu (a size dispatcher "
                          "over their NVSHMEM kernels, one kernel per call), cw_<name>_test.cu and cw_<name>.json; "
                          "in a --dry run the predicted winners, labelled so")
    cmd.add_argument("--from", dest="from_dirs", metavar="RESULTS", action="append", default=[],
                     help="with --emit: take the winners from this tune results folder (tune.json and "
                          "tune_memory.json, e.g. an earlier --out) instead of tuning; repeatable (one folder per "
                          "size range)")
    cmd.add_argument("--reset-every", metavar="K", type=positive, default=None,
                     help="with --emit: the library restores its start state every K calls of one size (default "
                          "32); every prefix of K calls is checked with the caller's accesses between calls")
    cmd.add_argument("--calls-without-end", action="store_true",
                     help="with --emit: no reset after a number of calls for each size whose calls the checker "
                          "proves safe however many run (one kernel for every call, the call counted on the "
                          "device); the other sizes reset every K calls")
    cmd.add_argument("--json", action="store_true", help="print tune.json on stdout")
    cmd.add_argument("--debug", action="store_true", help="print tracebacks of errors in the input")


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction such as 0.02, got {text!r}") from None
    if math.isnan(value) or not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 1), such as 0.02, got {text!r}")
    return value


def _packet_limits(text: str) -> list[int]:
    """--packets SIZES: a list of byte sizes (16KiB,64KiB), each above 0."""
    from .codegen import _packet_limit

    limits = [_packet_limit(part.strip()) for part in text.split(",") if part.strip()]
    if not limits or 0 in limits:
        raise argparse.ArgumentTypeError(f"{text!r}: one or more sizes above 0, such as 16KiB,64KiB")
    return limits


def cmd_tune(args: argparse.Namespace, out) -> int:
    from .. import tune
    from ..perf.predict import parse_sizes

    def say(text: str) -> None:
        sys.stderr.write(f"tune: {text}\n")

    from .. import hygiene

    if args.emit is not None:
        hygiene.check_out_dir(args.emit, "--emit")
    if (args.reset_every is not None or args.calls_without_end) and not args.emit:
        raise ClockworksError("--reset-every and --calls-without-end are the emitted library's: add --emit DIR")
    if args.from_dirs:
        if not args.emit:
            raise ClockworksError("--from RESULTS: add --emit DIR (it emits the library of those results)")
        hygiene.prepare_out_dir(args.emit, "--emit")
        found = tune.emit(args.file, args.emit, results=args.from_dirs, reset_every=args.reset_every,
                          schedule_name=args.schedule, say=say, check_timeout=args.timeout,
                          endless=args.calls_without_end)
        _said_emit(found, args, out)
        return 0
    if args.topology is None or args.np is None:
        raise ClockworksError("--topology T and --np N are required (unless --emit DIR --from RESULTS)")
    try:
        sizes = parse_sizes(args.sizes)
    except ValueError as exc:
        raise ClockworksError(f"--sizes: {exc}") from None
    hygiene.check_out_dir(args.out, "--out")

    report = tune.tune(args.file, args.topology, args.np, sizes, args.out, schedule_name=args.schedule,
                       top=args.top, noise=args.noise, dry=args.dry, mode=args.mode, check_timeout=args.timeout,
                       say=say, calls=args.calls, packets=args.packets, fuse_calls=args.fuse_calls,
                       copy_engine=args.copy_engine, max_variants=args.max_variants)
    if args.json:
        out.json(report)
    else:
        out.text(tune.render_markdown(report).rstrip("\n"))
        out.text(f"wrote {args.out}/tune.json, {args.out}/tune.md, {args.out}/{tune.MEMORY_FILE}")
    if args.emit:
        hygiene.prepare_out_dir(args.emit, "--emit")
        _said_emit(tune.emit(args.file, args.emit, results=[args.out], reset_every=args.reset_every,
                             schedule_name=args.schedule, say=say, check_timeout=args.timeout,
                             endless=args.calls_without_end), args, out)
    return 0


def _said_emit(found: dict, args: argparse.Namespace, out) -> None:
    """What --emit wrote: the dispatcher's table, in words (or the JSON with --json)."""
    if args.json:
        out.json(found)
        return
    kind = "measured" if found["measured"] else "PREDICTED, not measured (a --dry run)"
    lines = [f"# {found['library']}: {len(found['sizes'])} size(s), {kind} winners", "",
             "| bytes per rank | kernel | between calls | calls | us per call |", "|---:|---|---|---|---:|"]
    for row in found["sizes"]:
        time = f"{row['time_us']:.2f}" if row["time_us"] is not None else "-"
        calls = ("any number (proven), no reset" if row.get("calls_without_end") else
                 f"a reset every {found['reset_every']}")
        lines.append(f"| {_size(row['bytes'])} | {row['label']} | {row['between']} | {calls} | {time} |")
    if found["not_tuned"]:
        lines += ["", "No kernel (the library refuses these sizes): " + ", ".join(found["not_tuned"])]
    lines += ["", "wrote " + ", ".join(found["written"])]
    out.text("\n".join(lines))


def _size(nbytes: int) -> str:
    from ..tune import _size_text

    return _size_text(nbytes)
