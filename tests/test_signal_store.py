"""A plain store to a signal word (`r.signal_store`, `ir.SignalStore`): it sets the rank's own word
when it runs, it races with an update of the word that may land concurrently and with a wait that may
read it (a plain write races with anything), in both searches and with or without the reduction; the
DSL and the JSON loader refuse a store to another rank's word; engines that cannot run it say why."""

from __future__ import annotations

import inspect
import os

import pytest

import clockworks_dist as cw
from clockworks_dist import ir
from clockworks_dist.check import check
from clockworks_dist.dsl import validate_json
from clockworks_dist.errors import ScheduleError
from clockworks_dist.semantics.backends import BACKENDS, Unsupported

HERE = os.path.basename(__file__)


def line_of(fn, marker: str = "# HERE") -> int:
    lines, first = inspect.getsourcelines(fn)
    return next(first + i for i, text in enumerate(lines) if marker in text)


def trace(body, world: int = 2) -> ir.Schedule:
    return cw.schedule(body, name="t").trace(world)


def signal_then_store(ordered: bool):
    """Rank 1 sets rank 0's flag; rank 0 stores 0 into it, after waiting for the flag (`ordered`) or not."""
    def body(r):
        flag = r.signal("flag")
        if r.rank == 1:
            r.signal_op(0, flag, 1)
            r.quiet()
        else:
            if ordered:
                r.wait_until(flag, "eq", 1)
            r.signal_store(flag, 0)  # HERE
    return body


@pytest.mark.parametrize("strategy", ["dfs", "bfs"])
@pytest.mark.parametrize("reduction", [True, False])
def test_a_store_races_with_an_update_that_can_land_concurrently(strategy, reduction):
    body = signal_then_store(ordered=False)
    result = check(trace(body), strategy=strategy, reduction=reduction)
    races = [v for v in result.violations if v.kind == "data_race"]
    assert races, sorted(result.kinds())
    assert "signal word flag[0]" in races[0].message and "plain write" in races[0].message
    assert any(o.loc.line == line_of(body) for o in races[0].ops)


@pytest.mark.parametrize("reduction", [True, False])
def test_a_store_after_the_wait_that_saw_the_update_is_ordered(reduction):
    result = check(trace(signal_then_store(ordered=True)), reduction=reduction)
    assert result.verdict == "verified", [v.message for v in result.violations]


def test_the_store_sets_the_word_for_the_waits_after_it():
    def body(r):
        flag = r.signal("flag")
        r.signal_store(flag, 5)
        r.wait_until(flag, "eq", 5)  # satisfied by the rank's own store
        r.signal_store(flag, 0)
        r.wait_until(flag, "eq", 5)  # HERE never again: a deadlock

    result = check(trace(body))
    found = [v for v in result.violations if v.kind == "deadlock"]
    assert found and any(o.loc.line == line_of(body) for o in found[0].ops)


def test_a_store_races_with_a_wait_of_another_thread():
    def body(r):
        flag = r.signal("flag")
        with r.thread("a"):
            r.signal_store(flag, 1)  # HERE
        with r.thread("b"):
            r.wait_until(flag, "ge", 0)

    races = [v for v in check(trace(body)).violations if v.kind == "data_race"]
    assert races and any(o.loc.line == line_of(body) for o in races[0].ops)


def test_the_dsl_refuses_a_value_beyond_a_word():
    def body(r):
        flag = r.signal("flag")
        r.signal_store(flag, 2**64)  # HERE

    with pytest.raises(ScheduleError) as info:
        trace(body)
    assert (info.value.file, info.value.line, info.value.op) == (HERE, line_of(body), "signal_store")


def test_the_json_loader_refuses_a_store_to_another_ranks_word(tmp_path):
    sched = trace(signal_then_store(ordered=True))
    text = sched.to_json().replace('"kind":"signal_store","pe":0', '"kind":"signal_store","pe":1')
    assert text != sched.to_json()
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ScheduleError, match="a plain store writes the rank's own signal word"):
        validate_json.load(str(path))
    assert ir.Schedule.from_json(sched.to_json()) == sched


@pytest.mark.parametrize("name", ["nccl-codegen", "cupy"])
def test_engines_that_cannot_run_a_store_say_why(name):
    import clockworks_dist.codegen.nccl  # noqa: F401  (backends register when their module loads)
    import clockworks_dist.codegen.nvshmem  # noqa: F401
    import clockworks_dist.runtime.cupy_nccl  # noqa: F401

    op = ir.SignalStore(pe=0, signal=ir.SignalRef(signal="flag"), value=0, loc=ir.SourceLoc(file="f.py", line=4))
    with pytest.raises(Unsupported, match="f.py:4"):
        BACKENDS[name].lookup(op)
