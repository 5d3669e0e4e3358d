"""`cw.predict`: a schedule's predicted runtime on a topology, as `clockworks predict` computes it.

    defn = cw.load_file("protocols/ring_allreduce.py")[0]
    result = cw.predict(defn, "h200x2-nv18", ranks=2, sizes="1KiB,1MiB")
    result.topology_file, result.calibrated      # 'measured/h200x2-nv18.yaml', True
    [(p.nbytes, p.time_us, p.busbw_GBs, p.bound) for p in result.predictions]
"""

from __future__ import annotations

import contextlib

import os
from collections.abc import Iterable

from .dsl import ScheduleDef
from .dsl import params as params_mod
from .errors import ClockworksError, TopologyError
from .importers.imported import is_imported
from .ir import DTYPE_BYTES
from .perf.costs import RunConditions
from .perf.predict import (
    imported_conditions, imported_pricing, imported_sizes, main_buffer, parse_sizes, pinned_bytes, predict_sizes,
)
from .report.perf import PredictionReport
from .topology import choose_topology, gpus

DEFAULT_SIZES = "1KiB..1GiB"


def predict(defn: ScheduleDef, topology: str | os.PathLike, *, ranks: int | None = None,
            sizes: str | Iterable[int] | None = None, symbols: dict[str, int] | None = None,
            params: dict[str, int | str] | None = None, mode: str = "graph", nodes: int | None = None,
            scaling: Iterable[int] = (), scale_nodes: Iterable[int] = ()) -> PredictionReport:
    """Predict `defn` (from `cw.load_file` or `@cw.schedule`) on `topology`: a shipped name, which
    means its calibrated file when one ships, or a path, loaded as it is (`topology/calibrated.py`).

    `sizes`: bytes per rank, a list or text (`"1KiB..1GiB"`, powers of two; `"4KiB,1MiB"`); default
    1KiB..1GiB. `symbols` binds size symbols (`{"CHUNK": 8}`, as `--size`); binding the one that
    scales the main buffer fixes the message size, so it predicts that one size and `sizes` must be
    left out. `params`: a variant of a family (`{"ALGO": "twoshot"}`). `ranks`: the world (default:
    the schedule's largest declared one, else the topology's GPUs). `scaling`: world sizes, and
    `scale_nodes`: node counts of a cluster template, also predicted at the largest size.

    The result (`report.perf.PredictionReport`) holds each size's time, algbw, busbw, bound and
    timeline, the scaling sweep, the topology file used and whether it is calibrated (`warning`
    says what to do when it is not)."""
    imported = is_imported(defn)  # an MSCCL XML file or an MSCCL++ plan (`importers.imported`)
    if not isinstance(defn, ScheduleDef) and not imported:
        raise ClockworksError(f"predict takes a schedule (cw.load_file(FILE)[0], or a @cw.schedule function), "
                              f"got {type(defn).__name__}")
    sizes = _sizes(sizes)
    symbols = dict(symbols or {})
    # params=None keeps a binding made around the call (the CLI's --param binds it that way)
    with params_mod.bind(params) if params is not None else contextlib.nullcontext():
        chosen = choose_topology(topology, nodes=nodes)
        topo = chosen.topology
        world = ranks or (defn.ranks[-1] if defn.ranks else len(gpus(topo)))
        scaling, scale_nodes = list(scaling), list(scale_nodes)
        available = len(gpus(topo))
        for n, option in [(world, None)] + [(n, "--scaling") for n in scaling]:
            if n > available:
                what = f"{option} {n}: {n} ranks" if option else f"the schedule has {n} ranks"
                if imported and not option:  # the file fixes its world: name it
                    what = f"{defn.loc.file}:{defn.loc.line}: {what}"
                raise TopologyError(f"{what} but {topo.name} has {available} GPUs (use a larger topology, or "
                                    "--nodes with a cluster template)")
        bigger = [choose_topology(topology, nodes=count).topology for count in scale_nodes]
        per_node = defn.ranks_per_node

        # an imported file's thread blocks move every step with its protocol, each put is one block's
        conditions = imported_conditions(defn) if imported else RunConditions()

        def at(topo, world: int, sizes: list[int], per_node: int | None):
            try:
                return predict_sizes(defn, topo, world, sizes, mode=mode, ranks_per_node=per_node, symbols=symbols,
                                     conditions=conditions)
            except TopologyError as exc:  # found while routing (no route between two GPUs): name the file
                text = str(exc)
                raise TopologyError(text if text.startswith(chosen.asked) else f"{chosen.asked}: {text}") from None

        fixed = _fixed_size(defn, world, per_node, symbols)
        if fixed and sizes is not None:
            raise ClockworksError(_sweep_and_binding(defn, world, per_node, symbols))
        if sizes is None and imported:  # whole numbers of the file's chunks
            sizes = imported_sizes(defn, world, per_node)
        results = at(topo, world, [fixed] if fixed else sizes or parse_sizes(DEFAULT_SIZES), per_node)

        def largest(world: int, per_node: int | None) -> list[int]:
            """The size the scaling sweep predicts at: the largest, or the one `symbols` fix there."""
            return [_fixed_size(defn, world, per_node, symbols)] if fixed else [results[-1].nbytes]

        found = PredictionReport(defn.name, topo.name, world, mode, results, topology_file=chosen.file,
                                 calibrated=chosen.calibrated, warning=chosen.warning(), symbols=symbols,
                                 priced=imported_pricing(defn) if imported else "")
        found.scaling += [(n, at(topo, n, largest(n, per_node), per_node)[0]) for n in scaling]
        for other in bigger:
            count, other_per_node = len(gpus(other)), len(gpus(other)) // max(other.nodes, 1)
            found.scaling.append((count, at(other, count, largest(count, other_per_node), other_per_node)[0]))
    return found


def _sizes(sizes: str | Iterable[int] | None) -> list[int] | None:
    """`sizes` as a list of bytes per rank (None: not given)."""
    if sizes is None:
        return None
    if isinstance(sizes, str):
        try:
            return parse_sizes(sizes)
        except ValueError as exc:
            raise ClockworksError(f"sizes: {exc}") from None
    sizes = list(sizes)
    if not sizes or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in sizes):
        raise ClockworksError(f"sizes: bytes per rank, whole numbers from 1 (or text such as '1KiB..1GiB'), "
                              f"got {sizes!r}")
    return sizes


def _fixed_size(defn: ScheduleDef, world: int, per_node: int | None, symbols: dict[str, int]) -> int | None:
    """The message size `symbols` fix at `world` ranks (they bind the main buffer's size symbol), or None."""
    return pinned_bytes(defn.trace(world, per_node, sizes=symbols), symbols) if symbols else None


def _sweep_and_binding(defn: ScheduleDef, world: int, per_node: int | None, symbols: dict[str, int]) -> str:
    """Why a binding of the message-size symbol and a sweep of sizes cannot go together."""
    buf = main_buffer(defn.trace(world, per_node, sizes=symbols))
    name = next(name for name, _ in buf.count_sym.terms if name in symbols)
    nbytes = buf.count * DTYPE_BYTES[buf.dtype]
    return (f"{name}={symbols[name]} (--size) fixes the message size, {nbytes} bytes per rank at {world} ranks "
            f"({buf.name} holds {buf.count_sym} elements), and --sizes sweeps it: give one of them, not both")
