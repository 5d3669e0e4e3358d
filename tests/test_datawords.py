"""Waits on elements of a symmetric buffer (`dsl/datawords.py`): the buffer is an array of signal
words, so every engine runs it as it runs signal words; any other use of it is refused at its line."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import textwrap

import pytest

import clockworks_dist as cw
from clockworks_dist import ir
from clockworks_dist.check import check
from clockworks_dist.errors import ScheduleError
from clockworks_dist.semantics.rules import describe

HERE = os.path.basename(__file__)


def line_of(fn, marker: str = "# HERE") -> int:
    lines, first = inspect.getsourcelines(fn)
    return next(first + i for i, text in enumerate(lines) if marker in text)


def trace(body, world: int = 3) -> ir.Schedule:
    return cw.schedule(body, name="t").trace(world)


def counter(as_signal: bool, threshold_shift: int = 0):
    """Every other PE adds 1 to rank 0's counter after putting its x there; rank 0 waits for all."""
    def body(r):
        x = r.symmetric("x", count=1, role="input")
        inbox = r.symmetric("inbox", count=r.world, role="scratch")
        out = r.buffer("out", count=r.world, role="output")
        if as_signal:
            word = r.signal("count")[0]
        else:
            word = r.symmetric("count", count=1, dtype="uint64", role="scratch")[0]
        if r.rank != 0:
            r.put(0, inbox[r.rank], x)
            r.fence()
            r.atomic_add(0, word, 1)
        else:
            r.wait_until(word, "ge", r.world - 1 - threshold_shift)
            r.copy(out[1:], inbox[1:])
    return body


def test_the_waited_buffer_is_a_signal_array_and_its_atomics_target_its_words():
    sched = trace(counter(False))
    for p in sched.programs:
        assert [b.name for b in p.buffers] == ["x", "inbox", "out"]
        assert [(s.name, s.count) for s in p.signals] == [("count", 1)]
    atomics = [op for p in sched.programs for op in p.ops if isinstance(op, ir.Atomic)]
    assert len(atomics) == 2 and all(op.target == ir.SignalRef(signal="count", index=0) for op in atomics)
    wait = sched.programs[0].ops[0]
    assert isinstance(wait, ir.WaitUntil) and wait.signal == ir.SignalRef(signal="count", index=0)


@pytest.mark.parametrize("shift", [0, 1])
def test_a_wait_on_a_buffer_element_checks_as_the_same_wait_on_a_signal_word(shift):
    # shift 1: rank 0 waits for one add too few and may read an inbox still in flight
    data, signal = trace(counter(False, shift)), trace(counter(True, shift))
    assert [[describe(op) for op in p.ops] for p in data.programs] == \
        [[describe(op) for op in p.ops] for p in signal.programs]
    for strategy, reduction in [("dfs", True), ("dfs", False), ("bfs", True), ("bfs", False)]:
        a = check(data, strategy=strategy, reduction=reduction)
        b = check(signal, strategy=strategy, reduction=reduction)
        assert a.complete and b.complete
        assert (a.verdict, sorted(a.kinds()), a.states, a.terminal_states) == \
            (b.verdict, sorted(b.kinds()), b.states, b.terminal_states)
        assert a.verdict == ("verified" if shift == 0 else "violated")
        if shift:
            assert "data_race" in a.kinds()


def test_reduced_and_unreduced_searches_agree_on_the_corpus_twins():
    from clockworks_dist import load_file

    root = os.path.join(os.path.dirname(__file__), "..", "protocols")
    for path, verdict in [(os.path.join(root, "flag_in_data_array.py"), "verified"),
                          (os.path.join(root, "buggy", "flag_in_data_array_unfenced.py"), "violated")]:
        sched = load_file(path)[0].trace(2)
        results = [check(sched, strategy=s, reduction=red) for s in ("dfs", "bfs") for red in (True, False)]
        assert all(r.complete for r in results)
        assert {(r.verdict, tuple(sorted(r.kinds()))) for r in results} == \
            {(results[0].verdict, tuple(sorted(results[0].kinds())))}
        assert results[0].verdict == verdict


def test_a_wait_until_all_on_buffer_elements_waits_on_each():
    def body(r):
        flag = r.symmetric("flag", count=r.world, dtype="uint64", role="scratch")
        for peer in range(r.world):
            if peer != r.rank:
                r.atomic_set(peer, flag[r.rank], 1)
        r.wait_until_all([flag[p] for p in range(r.world) if p != r.rank], "eq", 1)
    sched = trace(body)
    assert sched.programs[0].ops[-1].signals == (ir.SignalRef(signal="flag", index=1),
                                                 ir.SignalRef(signal="flag", index=2))
    assert check(sched).verdict == "verified"


# ------------------------------------------------------------------------------ refusals
def _refused(body, world: int = 2) -> ScheduleError:
    with pytest.raises(ScheduleError) as info:
        trace(body, world)
    assert str(info.value).startswith(f"{HERE}:"), str(info.value)
    return info.value


def test_a_put_into_a_waited_word_is_refused_at_its_line():
    def body(r):
        x = r.symmetric("x", count=1, dtype="uint64", role="input")
        flag = r.symmetric("flag", count=1, dtype="uint64", role="scratch")
        r.put(1 - r.rank, flag[0], x)  # HERE
        r.wait_until(flag[0], "ne", 0)
    err = _refused(body)
    assert (err.line, err.rank, err.op) == (line_of(body), 0, "put")
    assert "holds words a wait reads" in str(err) and "only atomics" in str(err)
    assert "atomic_add" in err.hint


@pytest.mark.parametrize("use", ["copy_out", "fill", "fetch_into"])
def test_plain_accesses_of_a_waited_buffer_are_refused(use):
    def body(r):
        flag = r.symmetric("flag", count=2, dtype="uint64", role="scratch")
        out = r.buffer("out", count=1, dtype="uint64", role="output")
        r.atomic_add(1 - r.rank, flag[0], 1)
        r.wait_until(flag[0], "ge", 1)
        if use == "copy_out":
            r.copy(out, flag[0])  # HERE
        elif use == "fill":
            r.fill(flag[1], 0)  # HERE
        else:
            r.fetch_add(1 - r.rank, flag[0], 1, into=flag[1])  # HERE
    err = _refused(body)
    assert err.line in [first for first in _here_lines(body)] and err.rank == 0
    assert "flag" in str(err) and "only atomics" in str(err)


def _here_lines(fn) -> list[int]:
    lines, first = inspect.getsourcelines(fn)
    return [first + i for i, text in enumerate(lines) if "# HERE" in text]


@pytest.mark.parametrize("kwargs, fragment", [
    (dict(dtype="int32", role="scratch"), "which is int32"),
    (dict(dtype="uint64", role="inout"), "has role 'inout'"),
])
def test_a_wait_on_a_word_the_machine_does_not_model_is_refused_at_the_wait(kwargs, fragment):
    def body(r):
        flag = r.symmetric("flag", count=1, **kwargs)
        r.atomic_add(1 - r.rank, flag[0], 1)
        r.wait_until(flag[0], "ge", 1)  # HERE
    err = _refused(body)
    assert err.line == line_of(body) and fragment in str(err), str(err)


def test_a_wait_on_several_elements_or_a_per_rank_buffer_is_refused():
    def wide(r):
        flag = r.symmetric("flag", count=2, dtype="uint64", role="scratch")
        r.wait_until(flag[0:2], "ge", 1)  # HERE
    err = _refused(wide)
    assert err.line == line_of(wide) and "has 2 elements" in str(err)

    def local(r):
        flag = r.buffer("flag", count=1, dtype="uint64", role="scratch")
        r.wait_until(flag[0], "ge", 1)  # HERE
    err = _refused(local)
    assert err.line == line_of(local) and "per-rank buffer" in str(err)


def test_the_command_line_refuses_it_with_exit_code_2_and_no_traceback(tmp_path):
    path = tmp_path / "user.py"
    path.write_text(textwrap.dedent("""
        import clockworks_dist as cw

        @cw.schedule(ranks=(2,))
        def bad(r):
            flag = r.symmetric("flag", count=1, dtype="uint64", role="scratch")
            r.fill(flag, 7)
            r.wait_until(flag[0], "eq", 7)
        """).lstrip())
    run = subprocess.run([sys.executable, "-m", "clockworks_dist", "check", str(path), "--ranks", "2"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stdout + run.stderr
    text = run.stdout + run.stderr
    assert "user.py:6:" in text and "Traceback" not in text and "only atomics" in text
