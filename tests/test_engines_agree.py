"""The engines agree (DESIGN.md: one semantics): the simulator's run of a schedule is one of the
checker's executions. Its final positions, memory values and signal words are among the checker's
terminal states, so a schedule the checker verifies never deadlocks in the simulator, and a deadlock
in the simulator is one the checker finds. (The simulator runs the checker's machine, so memory
compares as value trees, exact but for the order of a commutative node's two operands, which are
the same bits either way.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import assume, given, note, settings
from hypothesis.control import currently_in_test_context

from clockworks_dist import ir, load_file
from clockworks_dist.check import compile_schedule
from clockworks_dist.check.dfs import depth_first
from clockworks_dist.semantics.values import COMMUTATIVE, render_term
from clockworks_dist.perf.network import from_topology
from clockworks_dist.perf.simulate import PredictError, Simulator
from clockworks_dist.topology import load_topology

from test_por_properties import SETTINGS, build, matched, plans

ROOT = Path(__file__).resolve().parent.parent
TOPOLOGY = load_topology("dgx-h100")  # 8 GPUs on NVSwitch: every corpus schedule fits
CONSTANTS = TOPOLOGY.constants
CORRECT = sorted((ROOT / "protocols").glob("*.py"))
BUGGY = sorted((ROOT / "protocols" / "buggy").glob("*.py"))


def canonical(values, vid: int) -> str:
    """A value tree as text, the operands of commutative nodes sorted: `Values.combine` orders them
    by interning id, and two machines of one schedule intern in different orders."""
    term = values.terms[vid]
    if term[0] == "op" and term[1] in COMMUTATIVE:
        return f"{term[1]}({', '.join(sorted(canonical(values, c) for c in term[2]))})"
    return render_term(term, lambda c: canonical(values, c))


def outcome(model, state) -> tuple:
    """(finished, positions, values, signal words) of a final state."""
    values = tuple(tuple(canonical(model.values, v) for v in row) for row in state.memory)
    return (model.done(state), state.pcs, values, state.signals)


def checker_outcomes(sched) -> set[tuple]:
    """The outcome of every terminal state of the checker's search (as `check.terminal_outcomes`)."""
    model = compile_schedule(sched)
    found = depth_first(model, reduction=True, max_states=200_000)
    assert found.complete
    return {outcome(model, state) for state in found.terminals}


def simulated_outcome(sched) -> tuple | None:
    """The outcome of the simulator's run; None if it deadlocks."""
    sim = Simulator(sched, from_topology(TOPOLOGY, sched.world), CONSTANTS)
    try:
        sim.run()
    except PredictError as exc:
        if "deadlocks" not in str(exc):
            raise
        return None
    return outcome(sim.model, sim.state)


def assert_agree(sched) -> None:
    outcomes = checker_outcomes(sched)
    found = simulated_outcome(sched)
    if currently_in_test_context():
        note(f"simulator: {found}; checker: {sorted(outcomes)}")
    if found is None:
        assert any(not done for done, *_ in outcomes), "the simulator deadlocks, the checker finds no deadlock"
    else:
        assert found in outcomes, (found, sorted(outcomes))


@pytest.mark.parametrize("path", CORRECT + BUGGY, ids=lambda p: p.relative_to(ROOT / "protocols").as_posix())
@pytest.mark.parametrize("world", [2, 4, 8])
def test_the_simulators_run_is_one_of_the_checkers_executions(path, world):
    for defn in load_file(str(path)):
        if defn.ranks and world not in defn.ranks:
            continue
        sched = defn.trace(world)
        if not matched(sched):  # a mismatch stops both engines before they run
            continue
        if any(isinstance(op, ir.Group) and any(m.kind in ir.GROUP_COLLECTIVE_KINDS for m in op.ops)
               for p in sched.programs for op in p.ops):
            # the simulator does not price a collective inside a group: it refuses, naming the group's line
            with pytest.raises(PredictError, match=rf"^{path.name}:\d+: a collective inside a group is not priced"):
                Simulator(sched, from_topology(TOPOLOGY, sched.world), CONSTANTS).run()
            continue
        assert_agree(sched)


THREADED = [ROOT / "protocols" / name for name in (
    "blocks_reduce_after_recv.py", "streams_flag_per_stream.py", "kernel_end_quiet.py", "fifo_allpairs_allgather.py")]


@pytest.mark.parametrize("path", THREADED, ids=lambda p: p.name)
def test_the_simulator_times_threads_as_one_of_the_checkers_executions(path):
    """A rank's threads are actors of their own in both engines: the simulator finishes (no false
    deadlock) in a state the checker reaches, with each thread's ops on its own timeline."""
    for defn in load_file(str(path)):
        for world in (2, 4):
            if defn.ranks and world not in defn.ranks:
                continue
            sched = defn.trace(world)
            assert_agree(sched)
            assert simulated_outcome(sched) is not None
            threads = {(t.name) for p in sched.programs for t in p.threads}
            sim = Simulator(sched, from_topology(TOPOLOGY, sched.world), CONSTANTS)
            timeline = sim.run()
            assert {r.thread for r in timeline.records} - {None} == threads
            assert all(0 <= r.rank < world for r in timeline.records)


# MSCCL algorithms (`importers.msccl`): thread blocks, FIFO connections, flags between blocks; the
# files the checker explores within a few seconds, and the seeded bugs (races, a wrong offset: both
# engines still run them to the end)
CORPUS = ROOT / "corpus" / "msccl"
XMLS = [CORPUS / name for name in ("msccl_allreduce_small_8gpu_ll.xml", "msccl_tools_allreduce_ring_8gpu_ll128.xml",
                                   "rccl_alltoall_8gpu_ll.xml", "scheduler_allgather_hier_4gpu_ll.xml",
                                   "scheduler_allreduce_tree_4gpu_ll.xml")] + sorted((CORPUS / "buggy").glob("*.xml"))


@pytest.mark.parametrize("path", XMLS, ids=lambda p: p.relative_to(CORPUS).as_posix())
def test_the_simulators_run_of_an_msccl_algorithm_is_one_of_the_checkers_executions(path):
    defn = load_file(str(path))[0]
    sched = defn.trace(defn.ranks[0])
    assert matched(sched)
    assert_agree(sched)
    assert simulated_outcome(sched) is not None


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
    # the simulator takes the signal arithmetic from the semantics' rules, not from the checker's internals
    source = (package / "perf" / "simulate.py").read_text()
    assert "from ..semantics.rules import" in source and "signal_effect" in source and "from ..check." not in source
