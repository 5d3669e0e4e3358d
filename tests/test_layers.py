"""The package is layered, and its imports point down only.

Every import of our own package, read with `ast` from every module of clockworks_dist/ (module level
and inside functions; absolute and relative; not under `if TYPE_CHECKING:`), is an arrow from the
importing module's unit to the imported module's unit. A unit is the first component under the
package (`clockworks_dist.perf.simulate` -> `perf`, `clockworks_dist.tune` -> `tune`); the package's
own `__init__` is the unit `clockworks_dist` (the public facade) and `__main__` its own unit.

The rule: an arrow stays inside a unit, or goes to a unit of a strictly lower layer of `LAYERS`; two
different units of one layer do not import each other. And no module-level import cycle among
modules, even inside a unit. The analysis is scripts/layers.py's (`python scripts/layers.py` prints
the whole picture: units, arrows with counts, the upward ones, cycles), which reads `LAYERS` from
this file.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# The layers, top = highest: (layer, units, what they are). An import may point from a unit to the
# same unit or to a unit of a strictly lower layer, never up and never sideways. A new top-level module
# or package of clockworks_dist/ must be placed here (and in docs/layout.md). scripts/layers.py reads
# this constant with ast.literal_eval: keep it a literal.
LAYERS = (
    (11, ("__main__",), "`python -m clockworks_dist`: runs the command line"),
    (10, ("cli",), "the command line: argparse, output, exit codes (no engine imports it)"),
    (9, ("clockworks_dist",),
     "the package's facade (its __init__: check, predict, the DSL for `import clockworks_dist`)"),
    (8, ("tune", "prediction"), "the two composite applications"),
    (7, ("runtime", "torch"), "executors, mpirun harness, validate | the generated library from PyTorch"),
    (6, ("report",), "tables, plots, traces (renders results; runs nothing)"),
    (5, ("codegen",), "CUDA emitters, the library, build"),
    (4, ("perf",), "timed machine, costs, program models, prediction"),
    (3, ("dsl", "check", "topology", "lowering", "calibrate"),
     "tracing | search | machines | schedule->program | microbenchmarks"),
    (2, ("semantics", "importers"), "the one operational semantics | other tools' algorithm files, read into the IR"),
    (1, ("ir", "hygiene"), "frozen data | process hygiene (signals, process groups, output folders)"),
    (0, ("errors",), "the error types and exit codes every layer raises"),
)


def _load_layers_script():
    spec = importlib.util.spec_from_file_location("layers", ROOT / "scripts" / "layers.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["layers"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


layers = _load_layers_script()
TABLE = layers.layer_table(LAYERS)


def _analysis(package_dir: Path = ROOT / "clockworks_dist"):
    return layers.analyse(package_dir, TABLE)


def test_every_unit_is_placed_in_the_layer_table():
    unplaced = _analysis().unplaced()
    if unplaced:
        pytest.fail(
            "units of clockworks_dist/ that the layer table does not place:\n"
            + "\n".join(f"  {unit}: {', '.join(modules)}" for unit, modules in unplaced.items())
            + f"\n{layers.FIX_UNPLACED}")


def test_imports_point_down_the_layers():
    a = _analysis()
    upward = a.upward()
    if upward:
        pytest.fail(
            f"{len(upward)} imports point up or sideways in the layer table (LAYERS in tests/test_layers.py):\n"
            + "\n".join(f"  {a.describe(imp)}" for imp in upward) + f"\n{layers.FIX_ARROW}")


def test_no_import_cycles_among_modules():
    a = _analysis()
    if a.cycles:
        pytest.fail(
            f"{len(a.cycles)} import cycles among the modules of clockworks_dist/ (module-level imports):\n"
            + "\n".join("  " + a.describe_cycle(cycle).replace("\n", "\n  ") for cycle in a.cycles)
            + f"\n{layers.FIX_CYCLE}")


def test_no_import_cycles_hidden_in_functions():
    """A function-level import may defer loading a module (the command line starts fast), never close
    a cycle: `codegen.library` <-> `codegen.library_driver` and `perf.events` <-> `perf.network` did."""
    a = _analysis()
    if a.hidden_cycles:
        pytest.fail(
            f"{len(a.hidden_cycles)} import cycles close through function-level imports:\n"
            + "\n".join("  " + a.describe_cycle(c, functions=True).replace("\n", "\n  ") for c in a.hidden_cycles)
            + f"\n{layers.FIX_CYCLE}")


def test_the_table_places_each_unit_once_and_the_layers_descend():
    numbers = [layer for layer, _units, _what in LAYERS]
    assert numbers == sorted(numbers, reverse=True) and len(set(numbers)) == len(numbers)
    assert set(TABLE) == {unit for _layer, units, _what in LAYERS for unit in units}
    assert layers.layer_table(layers.read_layers(Path(__file__))) == TABLE


# The checker itself, on small packages written to tmp_path.

def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    package = tmp_path / "clockworks_dist"
    for name, text in {"__init__.py": "", **files}.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return package


def test_the_checker_reports_an_upward_import(tmp_path):
    package = _package(tmp_path, {
        "ir.py": "import os\n\n\ndef f():\n    from .perf import simulate\n    return simulate\n",
        "perf/__init__.py": "",
        "perf/simulate.py": "from .. import ir\n",
    })
    a = _analysis(package)
    assert [a.describe(imp) for imp in a.upward()] == [
        "clockworks_dist/ir.py:5 imports clockworks_dist.perf.simulate (unit ir, layer 1 -> unit perf, layer 4)"
        " [inside a function]"]
    assert not a.cycles     # the function-level import closes no cycle


def test_the_checker_reports_a_sideways_import_and_an_unplaced_unit(tmp_path):
    package = _package(tmp_path, {
        "tune.py": "from clockworks_dist.prediction import predict\n",
        "prediction.py": "def predict(): pass\n",
        "shiny.py": "from clockworks_dist import ir\n",
        "ir.py": "",
    })
    a = _analysis(package)
    assert [a.describe(imp) for imp in a.upward()] == [
        "clockworks_dist/tune.py:1 imports clockworks_dist.prediction (unit tune, layer 8 -> unit prediction, layer 8)"]
    assert a.unplaced() == {"shiny": ["clockworks_dist.shiny"]}


def test_the_checker_reports_a_two_module_cycle(tmp_path):
    package = _package(tmp_path, {
        "perf/__init__.py": "",
        "perf/events.py": "from . import network\n",
        "perf/network.py": "from .events import Event\n",
    })
    a = _analysis(package)
    assert a.cycles == [["clockworks_dist.perf.events", "clockworks_dist.perf.network"]]
    assert not a.upward()
    assert a.describe_cycle(a.cycles[0]).splitlines()[1:] == [
        "    clockworks_dist/perf/events.py:1 imports clockworks_dist.perf.network",
        "    clockworks_dist/perf/network.py:1 imports clockworks_dist.perf.events"]


def test_relative_imports_resolve_for_packages_and_modules(tmp_path):
    package = _package(tmp_path, {
        "ir.py": "",
        "errors.py": "",
        # `run` is a name that check/__init__ defines, not a module: no arrow
        "check/__init__.py": "from . import dfs\nfrom .dfs import search\nfrom .. import ir\nfrom . import run\n",
        "check/dfs.py": ("from . import bfs\nfrom .. import errors\nfrom ..ir import Schedule\n"
                         "import clockworks_dist.semantics.machine\nfrom clockworks_dist import check\n"),
        "check/bfs.py": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..perf import simulate\n"
                         "else:\n    from .. import ir\n"),
        "semantics/__init__.py": "",
        "semantics/machine.py": "",
        "perf/__init__.py": "",
        "perf/simulate.py": "",
    })
    a = _analysis(package)
    got = {(imp.src, imp.dst, imp.line) for imp in a.imports}
    assert got == {
        ("clockworks_dist.check", "clockworks_dist.check.dfs", 1),
        ("clockworks_dist.check", "clockworks_dist.check.dfs", 2),
        ("clockworks_dist.check", "clockworks_dist.ir", 3),
        ("clockworks_dist.check.dfs", "clockworks_dist.check.bfs", 1),
        ("clockworks_dist.check.dfs", "clockworks_dist.errors", 2),
        ("clockworks_dist.check.dfs", "clockworks_dist.ir", 3),
        ("clockworks_dist.check.dfs", "clockworks_dist.semantics.machine", 4),
        ("clockworks_dist.check.dfs", "clockworks_dist.check", 5),
        ("clockworks_dist.check.bfs", "clockworks_dist.ir", 5),    # the TYPE_CHECKING branch is skipped
    }
    assert a.cycles == [["clockworks_dist.check", "clockworks_dist.check.dfs"]]
    assert not a.upward() and not a.unplaced()
