"""Golden files for counterexample output: the rendered violations of seeded bugs, and the
replayability of their traces.

Regenerate after an intended change with `CW_UPDATE_GOLDEN=1 python -m pytest tests/test_golden.py`
and review the diff: a changed counterexample is a change users see.
"""

import os
from pathlib import Path

import pytest

import clockworks_dist as cw
from clockworks_dist.check.actions import ReplayError, replay
from clockworks_dist.semantics.match import match
from clockworks_dist.semantics.machine import Model
from clockworks_dist.report.text import render_violation

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).resolve().parent / "golden"
CASES = [
    ("ring_allreduce_no_group", 4),
    ("signal_without_fence", 2),
    ("double_counted_rank", 3),
    ("lost_wakeup_set_signal", 2),
    ("collective_order_swapped", 3),
    ("put_nbi_source_reuse", 2),
]


def _result(name: str, ranks: int):
    defn = cw.load_file(str(ROOT / "protocols" / "buggy" / f"{name}.py"))[0]
    return cw.check(defn.trace(ranks))


@pytest.mark.parametrize("name,ranks", CASES)
def test_counterexample_matches_golden(name, ranks):
    result = _result(name, ranks)
    text = "\n\n".join(render_violation(v, world=ranks) for v in result.violations) + "\n"
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("CW_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.exists(), f"missing golden file {path.name}: run with CW_UPDATE_GOLDEN=1"
    assert text == path.read_text()


@pytest.mark.parametrize("name,ranks", CASES)
def test_counterexample_replays(name, ranks):
    """Every trace replays from the initial state, and ends where the violation was seen."""
    result = _result(name, ranks)
    schedule = result.schedule
    matches, problems = match(schedule)
    if problems:
        assert all(not v.trace for v in result.violations)  # static findings carry no trace
        return
    model = Model(schedule, matches)
    for violation in result.violations:
        states, _writers = replay(model, [step.action for step in violation.trace])
        if violation.kind == "deadlock":
            assert not model.enabled(states[-1]) and not model.done(states[-1])
        if violation.kind == "data_race":
            enabled = model.enabled(states[-1])
            assert len(enabled) >= 2


def test_replay_names_nondeterminism_when_a_step_is_not_enabled():
    result = _result("ring_allreduce_no_group", 4)
    model = Model(result.schedule, match(result.schedule)[0])
    with pytest.raises(ReplayError, match="nondeterministic"):
        replay(model, [("step", 0, 0)])
