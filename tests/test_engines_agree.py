"""The engines agree (DESIGN.md: one semantics): the simulator's run of a schedule is one of the
checker's executions. Its final positions and signal words are among the checker's terminal states,
so a schedule the checker verifies never deadlocks in the simulator, and a deadlock in the simulator
is one the checker finds. (The simulator tracks no data values: memory is compared by the checker
alone.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import assume, given, note, settings
from hypothesis.control import currently_in_test_context

from clockworks_dist import load_file
from clockworks_dist.check import terminal_outcomes
from clockworks_dist.perf.network import from_topology
from clockworks_dist.perf.simulate import PredictError, Simulator
from clockworks_dist.topology import load_topology

from test_por_properties import SETTINGS, build, matched, plans

ROOT = Path(__file__).resolve().parent.parent
TOPOLOGY = load_topology("dgx-h100")  # 8 GPUs on NVSwitch: every corpus schedule fits
CONSTANTS = TOPOLOGY.constants
CORRECT = sorted((ROOT / "protocols").glob("*.py"))
BUGGY = sorted((ROOT / "protocols" / "buggy").glob("*.py"))


def simulated_outcome(sched) -> tuple | None:
    """(finished, positions, signal words) at the end of the simulator's run; None if it deadlocks."""
    sim = Simulator(sched, from_topology(TOPOLOGY, sched.world), CONSTANTS)
    try:
        sim.run()
    except PredictError as exc:
        if "deadlocks" not in str(exc):
            raise
        return None
    return (True, tuple(sim.pc), tuple(tuple(row) for row in sim.signals))


def assert_agree(sched) -> None:
    outcomes = terminal_outcomes(sched)
    projected = {(done, positions, signals) for done, positions, _values, signals in outcomes}
    found = simulated_outcome(sched)
    if currently_in_test_context():
        note(f"simulator: {found}; checker: {sorted(projected)}")
    if found is None:
        assert any(not done for done, _, _ in projected), "the simulator deadlocks, the checker finds no deadlock"
    else:
        assert found in projected, (found, sorted(projected))


@pytest.mark.parametrize("path", CORRECT + BUGGY, ids=lambda p: p.relative_to(ROOT / "protocols").as_posix())
@pytest.mark.parametrize("world", [2, 4, 8])
def test_the_simulators_run_is_one_of_the_checkers_executions(path, world):
    for defn in load_file(str(path)):
        if defn.ranks and world not in defn.ranks:
            continue
        sched = defn.trace(world)
        if not matched(sched):  # a mismatch stops both engines before they run
            continue
        assert_agree(sched)


@settings(max_examples=200, **SETTINGS)
@given(plans())
def test_on_random_schedules_too(plan):
    sched = build(plan)
    assume(matched(sched))
    assert_agree(sched)


def test_the_semantics_package_imports_only_ir_and_the_engines_read_its_arithmetic():
    import ast

    package = ROOT / "clockworks_dist"
    for path in (package / "semantics").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level > 1:  # above the package: only ir
                names = [alias.name for alias in node.names]
                assert node.module == "ir" or (node.module is None and names == ["ir"]), \
                    f"{path.name} imports {'.' * node.level}{node.module or ''} {names}"
    # the simulator takes the arithmetic from semantics, not from the checker's internals
    source = (package / "perf" / "simulate.py").read_text()
    assert "from ..semantics.arithmetic import" in source and "from ..check." not in source
