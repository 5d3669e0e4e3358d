"""`clockworks predict` and `clockworks calibrate`: the performance half of the command line."""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys

from ..errors import CheckIncomplete, ClockworksError, ScheduleError

EXIT_OK, EXIT_BAD_INPUT, EXIT_INCOMPLETE = 0, 2, 3
# predict's default bound: a sweep of 21 sizes at 64 ranks takes minutes; a hang never ends
PREDICT_TIMEOUT_S = 600.0
# If the code running ignores the bound this much longer (it swallows the timeout), the process ends.
STUCK_S = 5.0


# The largest world and cluster `predict` simulates: a simulation of 512 GPUs already takes minutes
# here, so past these bounds a typo (--scale-nodes 100000) is a clear error (exit 2), not a run that
# only --timeout ends.
MAX_PREDICT_WORLD = 4_096
MAX_PREDICT_NODES = 512


def _at_most(positive, bound: int, what: str):
    def parse(text: str) -> int:
        value = positive(text)
        if value > bound:
            raise argparse.ArgumentTypeError(f"{value:,} {what} is more than predict simulates (at most {bound:,})")
        return value

    parse.__name__ = positive.__name__  # argparse names the type in its messages
    return parse


def add_parsers(sub, positive, size_arg, seconds) -> None:
    world = _at_most(positive, MAX_PREDICT_WORLD, "ranks")
    nodes = _at_most(positive, MAX_PREDICT_NODES, "nodes")
    predict = sub.add_parser("predict", help="predict a schedule's runtime on a topology",
                             description="Simulate the schedule on a topology: time, algbw/busbw, the critical "
                                         "path, the busiest links, a size sweep and a scaling sweep.")
    predict.add_argument("file", metavar="FILE", help="a Python file defining @cw.schedule functions")
    predict.add_argument("--topology", "-t", required=True, metavar="T",
                         help="a shipped name (e.g. h200x2-nv18, dgx-h100): its calibrated file "
                              "(measured/NAME.yaml) when one ships, else its uncalibrated one, with a warning; "
                              "or a topology file, loaded as it is (NAME.yaml: the shipped uncalibrated file)")
    predict.add_argument("--ranks", metavar="N", type=world,
                         help=f"world size (default: the topology's GPUs; at most {MAX_PREDICT_WORLD:,})")
    predict.add_argument("--nodes", metavar="N", type=nodes,
                         help=f"nodes, for a cluster template (at most {MAX_PREDICT_NODES})")
    predict.add_argument("--schedule", metavar="NAME", help="the schedule NAME of FILE (default: the first)")
    predict.add_argument("--sizes", metavar="RANGE",
                         help="message sizes per rank: 1KiB..1GiB (powers of two; the default) or a list 4KiB,1MiB")
    predict.add_argument("--size", metavar="NAME=VALUE", type=size_arg, nargs="+", action="extend", default=[],
                         help="bind a symbolic size, e.g. --size CHUNK=8, as for check; binding the one that "
                              "scales the main buffer predicts that one size (no --sizes then)")
    predict.add_argument("--mode", choices=("graph", "eager"), default="graph",
                         help="CUDA-graph launches (default) or eager launches from the host")
    predict.add_argument("--scaling", metavar="N", type=world, nargs="+",
                         help=f"also predict at these world sizes, at the largest size (at most {MAX_PREDICT_WORLD:,})")
    predict.add_argument("--scale-nodes", metavar="N", type=nodes, nargs="+",
                         help="with a cluster template: also predict on N nodes (all their GPUs), at the "
                              f"largest size (at most {MAX_PREDICT_NODES})")
    predict.add_argument("--timeout", metavar="S", type=seconds, default=PREDICT_TIMEOUT_S,
                         help="stop after S seconds (loading, tracing and simulating; exit 3), 0 or 'none' "
                              f"for no bound (default: {PREDICT_TIMEOUT_S:g})")
    predict.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    predict.add_argument("--trace", metavar="OUT.json", help="write the timeline of the largest size "
                         "as a Chrome/Perfetto trace")
    predict.add_argument("--plot", metavar="OUT.png", help="plot time and busbw against size (matplotlib)")
    predict.add_argument("--debug", action="store_true", help="print tracebacks of errors in the input")

    calibrate = sub.add_parser("calibrate", help="measure a GPU machine and fit the model's constants",
                               description="Run the NCCL and NVSHMEM microbenchmarks under mpirun (--run; "
                                           "NVLink multicast stays off: NCCL_NVLS_ENABLE=0), or "
                                           "take earlier results (--raw), fit the constants by least squares "
                                           "on log-time, and write a calibrated topology file.")
    calibrate.add_argument("--topology", "-t", required=True, metavar="T",
                           help="the uncalibrated topology of this machine, whose links the output keeps (e.g. "
                                "h200x2-nv18: here a name is the shipped file itself, never its calibrated one); "
                                "with --across, the machine to predict (e.g. the file `topology detect` wrote)")
    source = calibrate.add_mutually_exclusive_group(required=True)
    source.add_argument("--run", metavar="DIR", help="run the microbenchmarks here, writing results to DIR")
    source.add_argument("--raw", metavar="DIR", help="a directory with calibration_raw.jsonl (and run.log)")
    source.add_argument("--across", nargs="+", metavar="DIR=TOPOLOGY",
                        help="fit the library's constants across several machines at once: each DIR holds one "
                             "machine's calibration_raw.jsonl, TOPOLOGY describes that machine (e.g. the file "
                             "`topology detect` wrote there); the output is -t's machine with those constants. "
                             "With --with-shipped, the machines measured here join the fit")
    calibrate.add_argument("--max-evaluations", type=int, default=60, metavar="N",
                           help="with --across: at most N evaluations of the model per fitted constant set "
                                "(default 60; fewer: a quicker, rougher fit)")
    calibrate.add_argument("--with-shipped", action="store_true",
                           help="with --across: also fit on the machines whose runs ship "
                                "(measured/machines/index.yaml)")
    calibrate.add_argument("--out", required=True, metavar="FILE.yaml", help="the calibrated topology to write")
    calibrate.add_argument("--start", metavar="FILE.yaml", help="start the fit from this topology's constants "
                           "(e.g. an earlier calibration of the same machine; a shipped name means its calibrated "
                           "file when one ships) instead of the defaults")
    calibrate.add_argument("--json", action="store_true", help="print the fit summary as JSON")
    calibrate.add_argument("--debug", action="store_true", help="print tracebacks")


def _pick(defs, name):
    if name is None:
        return defs[0]
    for defn in defs:
        if defn.name == name:
            return defn
    raise ScheduleError(f"no schedule named {name!r}; the file defines {', '.join(d.name for d in defs)}",
                        file=defs[0].loc.file)


def check_writable(path: str, option: str) -> None:
    """Fail now, before minutes of work, if `path` cannot be written (the folder is missing, it is
    a folder, no permission); a file this creates is removed again."""
    existed = os.path.lexists(path)
    try:
        # O_NONBLOCK: a FIFO with no reader fails at once instead of blocking
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, 0o666)
    except OSError as exc:
        raise ClockworksError(_cannot_write(path, option, exc)) from None
    os.close(fd)
    if not existed:
        os.remove(path)


def _cannot_write(path: str, option: str, exc: OSError) -> str:
    text = f"cannot write {path}: {exc.strerror or exc} ({option}"
    folder = os.path.dirname(path)
    if exc.errno == errno.ENOENT and folder:
        text += f"; create the folder {folder} first, or write elsewhere"
    return text + ")"


def _write_json(path: str, value, option: str) -> None:
    try:
        with open(path, "w") as handle:
            json.dump(value, handle)
    except OSError as exc:
        raise ClockworksError(_cannot_write(path, option, exc)) from None


def cmd_predict(args: argparse.Namespace, out) -> int:
    """`clockworks predict`, within `--timeout`: loading and tracing run the user's code, and a
    large schedule simulates for minutes, so all of it is bounded (exit 3 when the bound passes)."""
    from ..dsl import guard, params

    what = f"predicting {os.path.basename(args.file)}"

    def stuck() -> None:
        message = (f"{what} did not finish within {args.timeout:g} s (--timeout), and the code running does "
                   "not let itself be stopped (it catches the timeout, or it is stuck in C code)")
        text = json.dumps({"verdict": "incomplete", "error": {"type": "TimeUp", "message": message}}) + "\n"
        guard.end_process(EXIT_INCOMPLETE, f"clockworks: error: {message}\n", text if args.json else None)

    try:
        # --param: every trace of the schedule (each size, each scaling world) is that variant
        with guard.time_bound(args.timeout, on_stuck=stuck, grace=STUCK_S), \
                params.bind(dict(getattr(args, "param", None) or ())):
            return _predict(args, out)
    except guard.TimeUp as exc:
        where = f"{exc.where}: " if exc.where else ""
        raise CheckIncomplete(f"{where}{what} did not finish within {args.timeout:g} s (--timeout; raise it, "
                              "or 0 for no bound)") from None


def _predict(args: argparse.Namespace, out) -> int:
    from ..dsl import load_file
    from ..perf.predict import parse_sizes
    from ..prediction import predict
    from ..report import perf as report

    # Everything that can be wrong with the command line is found before the first simulation.
    for option, value in (("--trace", args.trace), ("--plot", args.plot)):
        if value == "":
            raise ClockworksError(f"{option}: an empty path; give the file to write")
    if args.trace:
        check_writable(args.trace, "--trace")
    if args.plot:
        report.check_plot_format(args.plot)
        check_writable(args.plot, "--plot")
    try:
        sizes = parse_sizes(args.sizes) if args.sizes is not None else None
    except ValueError as exc:
        raise ClockworksError(f"--sizes: {exc}") from None
    defn = _pick(load_file(args.file), args.schedule)
    found = predict(defn, args.topology, ranks=args.ranks, sizes=sizes, symbols=dict(args.size), mode=args.mode,
                    nodes=args.nodes, scaling=args.scaling or (), scale_nodes=args.scale_nodes or ())
    if found.warning:
        sys.stderr.write(f"clockworks: warning: {found.warning}\n")
    if args.trace:
        _write_json(args.trace, report.chrome_trace(found.last.timeline), "--trace")
        sys.stderr.write(f"wrote {args.trace}\n")
    if args.plot:
        try:
            report.plot(found, args.plot)
        except OSError as exc:
            raise ClockworksError(_cannot_write(args.plot, "--plot", exc)) from None
        sys.stderr.write(f"wrote {args.plot}\n")
    if args.json:
        out.json(report.to_json(found))
    else:
        out.text(report.render_text(found))
    return EXIT_OK


def _calibrate_across(args: argparse.Namespace, out) -> int:
    """`calibrate --across DIR=TOPOLOGY ...`: the library's constants fitted on several machines."""
    from ..perf.calibration import calibrate_across
    from ..perf.library import load_machine, shipped_machines

    machines = []
    for item in args.across:
        folder, sep, topology = item.partition("=")
        if not sep or not folder or not topology:
            raise ClockworksError(f"--across {item!r}: give DIR=TOPOLOGY (a folder with calibration_raw.jsonl, the "
                                  "machine's topology file or shipped name)")
        raw = os.path.join(folder, "calibration_raw.jsonl")
        if not os.path.exists(raw):
            raise ClockworksError(f"{raw}: not found (--across {item}: run `clockworks calibrate --run DIR` on that "
                                  "machine first)")
        machines.append(load_machine(os.path.basename(os.path.normpath(folder)) or folder, raw, topology))
    if args.with_shipped:
        machines += shipped_machines()
    if args.max_evaluations < 1:
        raise ClockworksError(f"--max-evaluations {args.max_evaluations}: give at least 1")
    summary = calibrate_across(machines, args.topology, args.out, args.max_evaluations)
    if args.json:
        out.json({"out": args.out, "fit": summary})
    else:
        out.text(f"wrote {args.out}: the library's constants fitted across {', '.join(summary['machines'])} "
                 f"({summary['cells']} cells)")
    return EXIT_OK


def cmd_calibrate(args: argparse.Namespace, out) -> int:
    import os

    from ..perf.calibration import calibrate, run_microbenchmarks
    from ..topology import choose_topology, load_topology
    from ..topology.model import _resolve as locate

    for option, value in (("--raw", args.raw), ("--run", args.run), ("--out", args.out)):
        if value == "":
            raise ClockworksError(f"{option}: an empty path; give a folder (--raw, --run) or a file (--out)")
    out_folder = os.path.dirname(args.out)
    try:  # fail now, not after the benchmarks and the fit, if the result cannot be written
        os.makedirs(out_folder or ".", exist_ok=True)
    except OSError as exc:
        raise ClockworksError(f"cannot write {args.out}: cannot create the folder {out_folder}: "
                              f"{exc.strerror or exc} (--out)") from None
    check_writable(args.out, "--out")
    if args.across:
        return _calibrate_across(args, out)
    if args.with_shipped:
        raise ClockworksError("--with-shipped goes with --across (a fit across machines)")
    topo = load_topology(args.topology)
    folder = args.raw or args.run
    raw = os.path.join(folder, "calibration_raw.jsonl")
    if args.run:
        run_microbenchmarks(args.run)
    if not os.path.exists(raw):
        raise ClockworksError(f"{raw}: not found (run with --run DIR on the GPU machine first)")
    log = os.path.join(folder, "run.log")
    start = choose_topology(args.start).topology if args.start else None
    summary = calibrate(raw, topo, str(locate(args.topology)), args.out, log if os.path.exists(log) else None,
                        start=start)
    load_topology(args.out)  # what we wrote must load
    if args.json:
        out.json({"out": args.out, "fit": summary})
    else:
        out.text(f"wrote {args.out}: fit {summary}")
    return EXIT_OK
