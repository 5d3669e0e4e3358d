"""The protocol corpus: every correct protocol verifies, every seeded bug gets the verdict its file
declares, pointing at the line marked `# BUG`, whatever the search strategy and with or without
the partial-order reduction."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

from clockworks_dist import load_file
from clockworks_dist.check import check
from clockworks_dist.check.result import WARNING_KINDS, CheckResult

ROOT = Path(__file__).resolve().parent.parent
CORRECT = sorted((ROOT / "protocols").glob("*.py"))
BUGGY = sorted((ROOT / "protocols" / "buggy").glob("*.py"))


def _only_schedule(path: Path):
    found = load_file(str(path))
    assert len(found) == 1, f"{path.name} defines {len(found)} schedules, expected one"
    return found[0]


def _expect(path: Path) -> dict:
    """The file's `EXPECT = {...}` literal, read without running the file."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "EXPECT" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{path.name} declares no EXPECT")


def _bug_line(path: Path) -> int:
    lines = [i for i, text in enumerate(path.read_text().splitlines(), start=1) if "# BUG" in text]
    assert len(lines) == 1, f"{path.name} marks {len(lines)} lines with '# BUG', expected exactly one"
    return lines[0]


@functools.lru_cache(maxsize=None)
def _checked(path: Path, world: int, strategy: str = "dfs", reduction: bool = True) -> CheckResult:
    return check(_only_schedule(path).trace(world), strategy=strategy, reduction=reduction)


# --------------------------------------------------------------------------- correct protocols
def test_corpus_is_not_empty():
    assert len(CORRECT) >= 10 and len(BUGGY) >= 20


@pytest.mark.parametrize("world", [2, 4, 8])
@pytest.mark.parametrize("path", CORRECT, ids=lambda p: p.stem)
def test_protocol_verifies(path, world):
    defn = _only_schedule(path)
    assert defn.ranks == (2, 4, 8), f"{path.name} should declare ranks=(2, 4, 8)"
    result = _checked(path, world)
    assert result.complete, f"{path.name} at {world} ranks: search stopped by {result.stopped_by}"
    assert result.errors == [], "\n".join(v.message for v in result.errors)
    assert result.verdict == "verified"
    assert result.states > 0 and result.terminal_states > 0


# ------------------------------------------------------------------------------ seeded bugs
def _assert_seeded_bug(path: Path, result: CheckResult) -> None:
    expect, line = _expect(path), _bug_line(path)
    kind = expect["kind"]
    assert result.complete, f"{path.name}: search stopped by {result.stopped_by}"
    if kind in WARNING_KINDS:
        warnings = [v for v in result.violations if v.kind == kind]
        assert warnings and all(v.severity == "warning" for v in warnings), sorted(result.kinds())
    else:
        assert result.verdict == "violated"
    assert kind in result.kinds(), f"{path.name}: expected {kind}, got {sorted(result.kinds())}"
    pointing = [v for v in result.violations if v.kind == kind
                and any(o.loc is not None and o.loc.file == path.name and o.loc.line == line for o in v.ops)]
    assert pointing, (f"{path.name}: no {kind} violation names line {line}; found:\n"
                      + "\n".join(f"{v.kind}: {[str(o.loc) for o in v.ops]}" for v in result.violations))


@pytest.mark.parametrize("path", BUGGY, ids=lambda p: p.stem)
def test_seeded_bug_is_found(path):
    expect = _expect(path)
    assert set(expect) == {"kind", "ranks"}
    _assert_seeded_bug(path, _checked(path, expect["ranks"]))


@pytest.mark.parametrize("config", ["bfs", "unreduced"])
@pytest.mark.parametrize("path", BUGGY, ids=lambda p: p.stem)
def test_seeded_bug_is_found_by_every_search(path, config):
    """BFS and the unreduced search give the same verdict and the same kinds as the default."""
    world = _expect(path)["ranks"]
    if config == "bfs":
        result = _checked(path, world, strategy="bfs")
    else:
        result = _checked(path, world, reduction=False)
    _assert_seeded_bug(path, result)
    default = _checked(path, world)
    assert result.verdict == default.verdict
    assert result.kinds() == default.kinds()


# ------------------------------------------------------------------------------ state counts
# Exact state counts of the default (DFS, reduced) search, pinned like stateright's
# `unique_state_count`. A change here means the reduction or the model changed: explain why in
# the commit that updates the number (a smaller count must come with an argument that it is sound).
PINNED_STATES = [
    ("ring_allreduce", 4, 61),
    ("ring_allreduce", 8, 281),
    ("nvshmem_oneshot_allreduce", 4, 82),
    ("dissemination_barrier", 4, 81),
    ("nvshmem_fenced_dispatch", 8, 465),
    ("grouped_allreduce_two_comms", 8, 19),
]


@pytest.mark.parametrize("name, world, states", PINNED_STATES, ids=[f"{n}-{w}" for n, w, _ in PINNED_STATES])
def test_pinned_state_count(name, world, states):
    result = _checked(ROOT / "protocols" / f"{name}.py", world)
    assert result.verdict == "verified"
    assert result.states == states
