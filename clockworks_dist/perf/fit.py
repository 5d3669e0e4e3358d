"""Calibration: fit the model's constants to measured microbenchmarks, by least squares on
log-time, with the same simulator that predicts user schedules.

Cells are (op, bytes, mode[, blocks]) with a measured time: NCCL's calls, NVSHMEM puts and plain
kernels (`microbench.MICROBENCHMARKS`). The fit uses a training subset and the accuracy benchmark
reports on the cells it held out; a constant is fitted only when the run measured what tells it
apart (`needs`). `least_squares_fit` is the same fit over any measured items and any predictor
(`scripts/bench_predict_generated.py` fits a generated program's own costs with it). scipy is an
optional dependency (`pip install 'clockworks-dist[calibrate]'`), imported here only.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from ..errors import ClockworksError, MissingDependency
from ..topology.model import Constants
from .costs import RunConditions
from .microbench import KERNEL_OPS, MICROBENCHMARKS
from .predict import predict_sizes

# The kinds whose per-kind constants the measurements tell apart (reduce_to is not measured).
_FITTED_KINDS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "p2p", "all_to_all")
# (dotted path of a field of topology.Constants, lower bound, upper bound). LL128 is absent: NCCL's
# model never picks it on the machines measured so far (NVLink, 2 ranks), so no measurement could
# tell its constants.
PARAMETERS = [
    ("graph_launch_us", 0.5, 20.0),
    ("nccl_base_latency_us.LL", 0.01, 30.0),
    ("nccl_base_latency_us.Simple", 0.01, 40.0),
    ("nccl_step_latency_us.nvlink.LL", 0.01, 10.0),
    ("nccl_step_latency_us.nvlink.Simple", 0.01, 10.0),
    ("nccl_channel_GBs.LL", 0.5, 60.0),
    ("nccl_channel_GBs.Simple", 0.5, 60.0),
    *((f"nccl_kind_efficiency.{kind}", 0.2, 1.5) for kind in _FITTED_KINDS),
    ("nccl_p2p_base_latency_us.LL", 0.01, 30.0),
    ("nccl_p2p_base_latency_us.Simple", 0.01, 30.0),
    *((f"nccl_kind_base_us.{kind}", 0.01, 15.0) for kind in _FITTED_KINDS if kind != "p2p"),
    *((f"nccl_kind_link_efficiency.{kind}", 0.2, 1.0) for kind in _FITTED_KINDS),
    ("nvlink_reverse_share", 0.001, 1.0),
    ("nccl_copy_channel_GBs", 1.0, 1000.0),
    ("nccl_protocol_link_efficiency.LL", 0.05, 1.0),
    ("nvshmem_signal_latency_us", 0.001, 20.0),
    ("nvshmem_block_GBs", 1.0, 200.0),
    ("nvshmem_link_efficiency", 0.2, 1.0),
    ("nccl_exchange_ramp", 0.2, 1.0),
    ("local_graph_launch_us", 0.05, 20.0),
    ("hbm_efficiency", 0.3, 1.0),
    ("l2_GBs", 500.0, 50000.0),
]
EAGER = [("kernel_launch_us", 1.0, 60.0), ("p2p_launch_us", 1.0, 60.0), ("eager_launch_us", 0.01, 10.0),
         ("local_host_us", 0.5, 60.0), ("local_eager_launch_us", 0.01, 10.0)]
NCCL_OPS = ("allreduce", "allgather", "reducescatter", "broadcast", "alltoall", "sendrecv", "sendrecv_bidir")


def needs(path: str) -> tuple[str, ...]:
    """The microbenchmarks that tell the constant at `path` apart: it is fitted only if the cells
    hold one of them (else it keeps its starting value)."""
    if path.startswith("local_"):
        return ("kernel_empty", "kernel_spin")
    if path in ("hbm_efficiency", "l2_GBs"):
        return ("kernel_reduce",)
    if path.startswith("nvshmem_"):
        return ("put", "signal")
    if path == "nccl_exchange_ramp":
        return ("alltoall", "sendrecv_bidir")
    return NCCL_OPS


@dataclass(frozen=True)
class Cell:
    op: str
    nbytes: int
    mode: str  # graph | eager
    measured_us: float
    blocks: int = 1
    nccl_est_us: float | None = None
    max_channels: int | None = None  # NCCL_MAX_NCHANNELS of the run, if set
    ranks: int = 2  # the run's world size (mpirun -np)

    @property
    def key(self) -> tuple:
        return (self.op, self.nbytes, self.mode, self.blocks, self.max_channels, self.ranks)


def load_cells(path: str) -> tuple[list[Cell], dict]:
    """Read the microbenchmark results (one JSON object per line; other lines are log text)."""
    cells: list[Cell] = []
    provenance: dict = {}
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ClockworksError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            row = json.loads(line)
            cells += _cells_of(row, provenance)
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
            what = f"missing {exc}" if isinstance(exc, KeyError) else str(exc)
            raise ClockworksError(f"{path}:{number}: not a microbenchmark result: {what[:200]} (each line is one "
                                  "JSON object as the runner writes it; rerun with --run, or fix the line)") from None
    return cells, provenance


def _cells_of(row: dict, provenance: dict) -> list[Cell]:
    """The cells of one result line (none for rows the fit does not use); ValueError if malformed."""
    if not isinstance(row, dict):
        raise ValueError("not a JSON object")
    bench = row.get("bench")
    if bench == "provenance":
        provenance.update(row)
        return []
    if bench == "nccl" and row.get("op") in MICROBENCHMARKS and row.get("correct") is not False:
        channels = row.get("nchannels_env")
        found = []
        for mode in ("graph", "eager"):
            value = row.get(f"{mode}_us")
            if value:
                found.append(Cell(row["op"], _count(row["bytes"], "bytes"), mode, _time(value, f"{mode}_us"),
                                  nccl_est_us=row.get("nccl_est_us"),
                                  max_channels=_count(channels, "nchannels_env") if channels else None,
                                  ranks=_count(row.get("ranks", 2), "ranks")))
        return found
    if bench == "kernel" and row.get("op") in KERNEL_OPS and row.get("correct") is not False:
        return [Cell(row["op"], _count(row["bytes"], "bytes"), mode, _time(row[f"{mode}_us"], f"{mode}_us"))
                for mode in ("graph", "eager") if row.get(f"{mode}_us")]
    if bench == "nvshmem" and row.get("op") == "put_block" and row.get("us"):
        return [Cell("put", _count(row["bytes"], "bytes"), "graph", _time(row["us"], "us"),
                     blocks=_count(row.get("blocks", 1), "blocks"))]
    if bench == "nvshmem" and row.get("op") == "signal_pingpong" and row.get("us"):  # one way
        return [Cell("signal", 8, "graph", _time(row["us"], "us"))]
    return []


def _count(value, name: str) -> int:
    number = int(value)
    if number != float(value) or not 1 <= number <= 2**50:
        raise ValueError(f"{name} must be a whole number from 1 to 2**50, got {value!r}")
    return number


def _time(value, name: str) -> float:
    number = float(value)
    if not 0 < number < 1e12:  # also refuses nan and inf: log-time needs a positive, finite time
        raise ValueError(f"{name} must be a positive, finite time in us, got {value!r}")
    return number


def channels_from_log(path: str) -> tuple[int, int] | None:
    """NCCL's init line "24 coll channels, ..., 32 p2p channels per peer" of the default run."""
    import re

    try:
        text = open(path).read()
    except OSError:
        return None
    for match in re.finditer(r"(\d+) coll channels.*?(\d+) p2p channels per peer", text):
        coll, p2p = int(match.group(1)), int(match.group(2))
        if coll > 1:
            return coll, p2p
    return None


def held_out(cell: Cell) -> bool:
    """Every other power of two is held out of the fit (2 KiB, 8 KiB, 32 KiB, ...)."""
    return int(round(math.log2(max(cell.nbytes, 1)))) % 2 == 1


def get_value(consts: Constants, path: str) -> float:
    """The value of the field at a dotted path (`nccl_step_latency_us.nvlink.LL`)."""
    value = consts
    for name in path.split("."):
        value = value[name] if isinstance(value, dict) else getattr(value, name)
    return value


def with_values(consts: Constants, values: dict[str, float]) -> Constants:
    """A copy of `consts` with the fields at these dotted paths set (validated like a file's)."""
    data = consts.model_dump()
    for path, value in values.items():
        *parents, name = path.split(".")
        node = data
        for parent in parents:
            node = node[parent]
        node[name] = value
    return Constants.model_validate(data)


def conditions_of(cell: Cell) -> RunConditions:
    """How the cell's measurement was run: NVSHMEM thread blocks, NCCL's channel cap."""
    return RunConditions(nvshmem_blocks=cell.blocks, channel_cap=cell.max_channels or None)


def with_constants(topo, consts: Constants):
    """`topo` with `consts` where the network reads them from the topology (the HBM rate a
    streaming kernel reaches, `hbm_efficiency`); `topo` itself when they agree."""
    if consts.hbm_efficiency == topo.constants.hbm_efficiency:
        return topo
    return topo.model_copy(update={"constants": consts})


def predict_cell(cell: Cell, topo, consts: Constants) -> float:
    """The predicted time of one measured cell, at the cell's world size."""
    defn = MICROBENCHMARKS[cell.op]
    return predict_sizes(defn, with_constants(topo, consts), cell.ranks, [cell.nbytes], consts, mode=cell.mode,
                         conditions=conditions_of(cell))[0].time_us


# What the worker processes of one fit evaluate (set before the pool forks; read-only after).
_JOB: dict = {}


def _residuals(x) -> list[float]:
    """log(predicted) - log(measured) over the job's items, with the parameters set to exp(x)."""
    base, params, items, predict = _JOB["base"], _JOB["params"], _JOB["items"], _JOB["predict"]
    consts = with_values(base, {path: math.exp(value) for (path, _, _), value in zip(params, x)})
    return [math.log(predict(item, consts)) - math.log(measured) for item, measured in items]


def _pool(workers: int):
    """A process pool of `workers` forked from this process (None: evaluate in this process)."""
    import multiprocessing
    import os

    if workers <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        return None
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(max_workers=min(workers, os.cpu_count() or 1),
                               mp_context=multiprocessing.get_context("fork"))


def least_squares_fit(items: list[tuple[object, float]], predict, params: list[tuple[str, float, float]],
                      base: Constants, workers: int | None = None, max_nfev: int = 200) -> tuple[Constants, dict]:
    """The constants at the dotted paths of `params` ((path, lower, upper) bounds) that minimise the
    squared log error of `predict(item, consts)` against each item's measured time (`items`:
    (item, measured us) pairs), starting from `base`; the other constants stay as in `base`.
    Returns the fitted constants (rounded to 4 digits) and a summary.

    The Jacobian is taken by forward differences, one parameter per worker process (`workers`,
    default: every CPU), so a fit of ~30 constants takes minutes on a laptop and less on a server."""
    try:
        import numpy as np
        from scipy.optimize import least_squares
    except ImportError as exc:
        raise MissingDependency("calibration needs scipy: pip install 'clockworks-dist[calibrate]'") from exc
    import os

    x0 = np.array([math.log(min(max(get_value(base, p), lo * 1.01), hi * 0.99)) for p, lo, hi in params])
    lower = np.array([math.log(lo) for _, lo, _ in params])
    upper = np.array([math.log(hi) for _, _, hi in params])
    _JOB.update(base=base, params=params, items=items, predict=predict)
    pool = _pool(workers if workers is not None else (os.cpu_count() or 1))
    try:
        def evaluate(points):
            return list(pool.map(_residuals, points)) if pool else [_residuals(p) for p in points]

        def jacobian(x):
            steps = []
            for i, value in enumerate(x):  # a forward step, backwards at an upper bound
                h = 1e-3 * max(1.0, abs(value))
                steps.append(h if value + h <= upper[i] else -h)
            points = [x] + [x + h * np.eye(len(x))[i] for i, h in enumerate(steps)]
            rows = evaluate(points)
            f0 = np.array(rows[0])
            return np.column_stack([(np.array(r) - f0) / h for r, h in zip(rows[1:], steps)])

        result = least_squares(lambda x: np.array(_residuals(x)), x0, jac=jacobian, bounds=(lower, upper),
                               max_nfev=max_nfev, ftol=1e-10, xtol=1e-10, x_scale="jac")
    finally:
        if pool:
            pool.shutdown()
        _JOB.clear()
    fitted = with_values(base, {path: round(math.exp(value), 4) for (path, _, _), value in zip(params, result.x)})
    return fitted, {"cells": len(items), "cost": float(result.cost), "evaluations": int(result.nfev),
                    "jacobians": int(result.njev)}


def fit(cells: list[Cell], topo, start: Constants | None = None, workers: int | None = None,
        parameters: dict[str, list] | None = None) -> tuple[Constants, dict]:
    """Least squares on log-time over the training cells (`held_out` ones excluded), graph cells
    first, then eager ones for the host's constants; returns the constants and a summary. A
    constant is fitted only when the cells hold a microbenchmark that tells it apart (`needs`);
    `parameters` ({"graph": [...], "eager": [...]}) replaces PARAMETERS and EAGER."""
    base = start or Constants()
    train = [c for c in cells if not held_out(c)]
    measured_ops = {c.op for c in train}
    summary = {}
    lists = parameters or {"graph": PARAMETERS, "eager": EAGER}
    for mode in ("graph", "eager"):
        subset = [c for c in train if c.mode == mode]
        params = [p for p in lists.get(mode, []) if measured_ops & set(needs(p[0]))]
        if not subset or not params:
            continue
        base, summary[mode] = least_squares_fit([(c, c.measured_us) for c in subset],
                                                lambda c, consts: predict_cell(c, topo, consts),
                                                params, base, workers)
    return base, summary
