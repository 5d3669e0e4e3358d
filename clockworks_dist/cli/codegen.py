"""`clockworks codegen`, `clockworks build` and `clockworks validate`: generated CUDA, compiled, and
run on GPUs under mpirun with every element checked (`codegen`).

- `codegen FILE --backend nccl|nvshmem --ranks N -o DIR`: one `.cu` per schedule of FILE
  (`DIR/<schedule>_<backend>_<N>.cu`), readable and self-contained.
- `build FILE --backend ... --ranks N -o DIR`: the same, compiled (`codegen.build`); `build --check`
  says what the machine has (nvcc, NCCL, NVSHMEM, MPI) and how to get what is missing.
- `validate FILE --np N --backend nccl|nvshmem|cupy [--sizes ...]`: builds, runs under mpirun,
  checks bit for bit, times eager and as a CUDA graph, predicts the same cells, measures NCCL's
  own collective, and writes a results folder (`runtime.validate`).

Exit codes: 0 success (validate: every result matches), 1 validate: a mismatch, hang or crash, 2 bad
input (the file, an option, an op the backend cannot generate, a missing tool), 3 out of time, 4 an
internal error.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex

from .. import hygiene, ir
from ..dsl import bounded
from ..errors import ClockworksError

BACKENDS = ("nccl", "nvshmem")
VALIDATE_BACKENDS = ("nccl", "nvshmem", "cupy")


def add_parsers(sub, positive, size_arg, seconds) -> None:
    """The `codegen`, `build` and `validate` subcommands."""
    for name, helptext in (("codegen", "write the CUDA program of each schedule (NCCL or NVSHMEM)"),
                           ("build", "write and compile the CUDA program of each schedule")):
        cmd = sub.add_parser(name, help=helptext, description=helptext[0].upper() + helptext[1:] + ".",
                             epilog="exit codes: 0 done, 2 bad input or a missing tool, 4 internal error")
        cmd.add_argument("file", metavar="FILE", nargs="?" if name == "build" else None,
                         help="a Python file defining @cw.schedule functions, or a schedule as JSON")
        cmd.add_argument("--backend", metavar="NAME", choices=BACKENDS, default="nccl",
                         help="nccl (host-driven) or nvshmem (device-initiated); default nccl")
        cmd.add_argument("--ranks", "--np", dest="np", metavar="N", type=positive,
                         help="world size (default: the schedule's first declared size, else 2)")
        cmd.add_argument("--schedule", metavar="NAME", help="only the schedule NAME (default: every one in FILE)")
        cmd.add_argument("--size", metavar="NAME=VALUE", type=size_arg, nargs="+", action="extend", default=[],
                         help="bind a symbolic size, e.g. --size CHUNK=1024")
        cmd.add_argument("-o", "--out", metavar="DIR", default=".",
                         help="where to write (default: .): a folder, created if missing; clockworks writes nothing "
                              "outside it and refuses a folder that holds a symlink")
        cmd.add_argument("--max-ranks", metavar="N", type=positive, default=None,
                         help=f"the largest world to generate for (default {hygiene.MAX_RANKS}; a larger --ranks is "
                              f"refused unless this allows it); a generated file above "
                              f"{hygiene.MAX_SOURCE_BYTES // 2**20} MiB is refused")
        cmd.add_argument("--timeout", metavar="S", type=seconds, default=None, help=argparse.SUPPRESS)
        cmd.add_argument("--json", action="store_true", help="print one JSON object on stdout")
        cmd.add_argument("--debug", action="store_true", help="print tracebacks of errors in the input")
        _lowering_flags(cmd, "the rewritten schedule is checked first")
        if name == "build":
            cmd.add_argument("--check", action="store_true",
                             help="only say what this machine has to build with (nvcc, NCCL, NVSHMEM, MPI)")
            cmd.add_argument("--arch", metavar="SM",
                             help="GPU architecture, e.g. sm_90 (default: the GPU's, else sm_90)")
    val = sub.add_parser("validate", help="build, run under mpirun on GPUs, check bit for bit, time, predict, "
                                          "compare with NCCL",
                         description="Generate, build and run each schedule of FILE on GPUs under mpirun; check "
                                     "every element against the checker's values; time it eager and as a CUDA graph; "
                                     "predict the same sizes; measure NCCL's own collective; write a results folder "
                                     "(JSON, a Markdown table, a plot).",
                         epilog="exit codes: 0 every result matches, 1 a mismatch, hang or crash, 2 bad input or a "
                                "missing tool, 3 out of time, 4 internal error")
    val.add_argument("file", metavar="FILE", help="a Python file defining @cw.schedule functions")
    val.add_argument("--backend", metavar="NAME", choices=VALIDATE_BACKENDS, default="nccl",
                     help="nccl, nvshmem (generated CUDA) or cupy (the CuPy executor); default nccl")
    val.add_argument("--np", "--ranks", dest="np", metavar="N", type=positive, help="ranks, one GPU each (default 2)")
    val.add_argument("--schedule", metavar="NAME", help="only the schedule NAME")
    val.add_argument("--size", metavar="NAME=VALUE", type=size_arg, nargs="+", action="extend", default=[],
                     help="bind a symbolic size")
    val.add_argument("--sizes", metavar="RANGE", help="bytes per rank of the main buffer: 1KiB..1GiB or a list")
    val.add_argument("--iters", metavar="K", type=positive, default=20, help="timed runs per mode (default 20)")
    val.add_argument("--warmup", metavar="W", type=int, default=2, help="untimed runs first (default 2)")
    val.add_argument("--no-graph", action="store_true", help="do not time the ops as a CUDA graph")
    val.add_argument("--timeout", metavar="S", type=seconds, default=120.0,
                     help="each run's bound: a hang is reported with each rank's op and ended (default 120)")
    val.add_argument("--out", metavar="DIR", default="validate-results",
                     help="the results folder (created if missing; clockworks writes nothing outside it and refuses "
                          "a folder that holds a symlink)")
    val.add_argument("--max-ranks", metavar="N", type=positive, default=None,
                     help=f"the largest --np to accept (default {hygiene.MAX_RANKS})")
    val.add_argument("--launcher", choices=("mpirun", "slurm"), default="mpirun",
                     help="mpirun here (default), or write an sbatch script for a Slurm cluster")
    val.add_argument("--topology", metavar="NAME|FILE",
                     help="the topology for the prediction: a shipped name means its calibrated file when one ships "
                          "(default: the shipped calibrated topology of the GPUs here)")
    val.add_argument("--no-check", action="store_true",
                     help="run even a schedule the checker does not verify (to see a bug happen)")
    val.add_argument("--no-nccl", action="store_true", help="do not measure NCCL's own collective")
    val.add_argument("--share-gpus", action="store_true",
                     help="nvshmem: let the ranks share the GPUs here (several PEs on one GPU, NVSHMEM's multiple "
                          "processes per GPU), to check the results on a machine with fewer GPUs than ranks; the "
                          "times are then not a machine's with a GPU per rank, and NCCL is not measured")
    val.add_argument("--calls", metavar="K", type=positive, default=1,
                     help="time K back-to-back calls per run, as a library call runs: signal words carry an "
                          "epoch instead of a reset, the K-call schedule is what the checker verifies, and times "
                          "and predictions are per call (default 1)")
    val.add_argument("--between", choices=("barrier", "sync", "alternate", "none"), default="barrier",
                     help="what separates the calls of --calls: a barrier_all (default), a sync_all, nothing but "
                          "two copies of every scratch buffer and signal array used by call parity (alternate), "
                          "or nothing (the checker says whether the schedule allows it)")
    val.add_argument("--fuse-calls", action="store_true",
                     help="nvshmem, with --calls: run the K calls inside one kernel per rank (no launch between "
                          "calls) instead of one kernel per call, as a library call would launch")
    _lowering_flags(val, "the rewritten schedule is what is checked and run")
    val.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    val.add_argument("--debug", action="store_true", help="print tracebacks of errors in the input")


def _lowering_flags(cmd, packets_checked: str) -> None:
    """--packets and --copy-engine, the NVSHMEM lowerings (`lowering.Build`) a command builds with."""
    cmd.add_argument("--packets", metavar="SIZE", type=_packet_limit, default=0,
                     help="nvshmem: send each put_signal of at most SIZE bytes whose word only its wait reads as "
                          f"flag-in-data packets (e.g. 64KiB); {packets_checked}")
    cmd.add_argument("--copy-engine", metavar="SIZE", type=_packet_limit, default=0,
                     help="nvshmem: issue each put and put_signal of at least SIZE bytes (e.g. 16MiB) from the host on "
                          "the copy engine between two kernels, instead of from the kernel's blocks (peers over NVLink "
                          "only)")


def _packet_limit(text: str) -> int:
    """--packets SIZE: bytes (1KiB, 65536, 0 = off)."""
    from ..dsl.message import parse_size

    try:
        value = parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a size in bytes, 0 for no packets")
    return value


# How to run a built program by hand, NVLink multicast off in every rank: the Open MPI form (-x passes
# a variable on to the ranks); MPICH's mpiexec passes the environment itself and takes no -x
RUN_ENV = "NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1"
RUN_X = "-x NCCL_NVLS_ENABLE -x NVSHMEM_DISABLE_NVLS -x TORCH_SYMM_MEM_DISABLE_MULTICAST"


def _schedules(args: argparse.Namespace) -> list[ir.Schedule]:
    args.sizes = None
    schedules, _nbytes = bounded.schedules(args)
    return schedules


def file_name(sched: ir.Schedule, backend: str) -> str:
    """`<schedule>_<backend>_<world>` (a validated name: safe as a file name)."""
    return f"{sched.name}_{backend}_{sched.world}"


def _write_all(args: argparse.Namespace) -> list[tuple[ir.Schedule, str]]:
    from ..codegen import program
    from ..lowering import Build, LoweringError, lower
    from ..semantics.backends import Unsupported

    schedules = _schedules(args)
    hygiene.prepare_out_dir(args.out, "-o/--out")
    written = []
    try:
        build = Build(args.backend, packets=getattr(args, "packets", 0) or 0,
                      copy_engine=getattr(args, "copy_engine", 0) or 0)
    except LoweringError as exc:
        raise ClockworksError(str(exc)) from None
    for sched in schedules:
        lowered = lower(sched, build)
        if build.packets:
            from ..runtime import validate

            sched = lowered.sched
            try:
                validate.verify(sched, args.timeout)
            except validate.ValidateError as exc:
                raise ClockworksError(f"{exc} [with --packets: the schedule as packets; without --packets it keeps "
                                      "separate signals]") from None
        try:
            text = program.generate(lowered)
        except Unsupported as exc:
            others = [b for b in BACKENDS if b != args.backend and not program.unsupported(sched, b)]
            hint = f"; --backend {others[0]} can generate it" if others else ""
            raise ClockworksError(f"{sched.name}: {exc}{hint}") from None
        if len(text.encode("utf-8")) > hygiene.MAX_SOURCE_BYTES:
            raise ClockworksError(f"{sched.name} at {sched.world} ranks: the generated program is "
                                  f"{len(text.encode('utf-8')) / 2**20:.1f} MiB, more than the "
                                  f"{hygiene.MAX_SOURCE_BYTES // 2**20} MiB codegen writes (use fewer ranks)")
        path = os.path.join(args.out, file_name(sched, args.backend) + ".cu")
        hygiene.write_new(args.out, path, text, "-o/--out")
        written.append((sched, path))
    return written


def cmd_codegen(args: argparse.Namespace, out) -> int:
    written = _write_all(args)
    if args.json:
        out.json({"verdict": "written", "files": [{"schedule": s.name, "world": s.world, "backend": args.backend,
                                                   "path": p} for s, p in written]})
    else:
        for sched, path in written:
            out.text(f"{path}: {sched.name} at {sched.world} ranks, {args.backend} backend")
    return 0


def cmd_build(args: argparse.Namespace, out) -> int:
    from ..codegen import build

    if args.check or not args.file:
        found = build.find_toolchain(args.backend, arch=args.arch)
        if args.json:
            out.json({"verdict": "ok" if not found.missing_for(args.backend) else "missing",
                      "toolchain": json.loads(json.dumps(found.__dict__, default=str))})
        else:
            out.text(build.describe(found))
        return 0 if not found.missing_for(args.backend) else 2
    hygiene.check_out_dir(args.out, "-o/--out")  # a bad output folder is named first, toolchain or not
    toolchain = build.find_toolchain(args.backend, arch=args.arch)
    toolchain.require(args.backend)
    built = []
    for sched, path in _write_all(args):
        binary = build.compile_program(path, args.backend, args.out, toolchain=toolchain)
        built.append((sched, path, str(binary)))
    if args.json:
        out.json({"verdict": "built", "programs": [{"schedule": s.name, "world": s.world, "source": p, "program": b}
                                                   for s, p, b in built]})
    else:
        for sched, _path, binary in built:
            out.text(f"{binary}: {sched.name} at {sched.world} ranks; run (NVLink multicast off): {RUN_ENV} "
                     f"mpirun -np {sched.world} {RUN_X} {shlex.quote(str(binary))}")
    return 0


def cmd_validate(args: argparse.Namespace, out) -> int:
    from ..dsl import params
    from ..report import validate as report_validate

    hygiene.check_ranks(args.np or 2, args.max_ranks or hygiene.MAX_RANKS, f"validate {args.file}")
    hygiene.check_out_dir(args.out, "--out")
    with params.bind(dict(getattr(args, "param", None) or ())):
        summary = _validate(args)
    if args.json:
        out.json(summary)
    else:
        for line in report_validate.summary_lines(summary):
            out.text(line)
    return 0 if summary.get("verdict") in ("match", "written") else 1


def _validate(args: argparse.Namespace) -> dict:
    from ..runtime import validate

    return validate.validate_file(
        args.file, backend=args.backend, ranks=args.np or 2, sizes=args.sizes, timeout=args.timeout,
        out_dir=args.out, iters=args.iters, warmup=args.warmup, graph=not args.no_graph, launcher=args.launcher,
        topology=args.topology, schedule_name=args.schedule, no_check=args.no_check,
        size_bindings=dict(args.size), nccl=not args.no_nccl, calls=args.calls, between=args.between,
        packets=args.packets, fuse_calls=args.fuse_calls, copy_engine=args.copy_engine,
        share_gpus=args.share_gpus)
