"""`repeat`: K back-to-back calls with epoch signal words, and `validate --calls` (CPU only: the
transform, the checker's verdicts on the K-call schedules, the per-call report, the generated code)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from clockworks_dist import ir
from clockworks_dist.check import check
from clockworks_dist.runtime import validate
from clockworks_dist.dsl import load_file, params
from clockworks_dist.lowering.repeat import RepeatError, epochs, repeat

ROOT = Path(__file__).resolve().parent.parent
PROTOCOLS = ROOT / "protocols"


def trace(name: str, world: int = 2, params: dict | None = None, text: str | None = None, tmp_path=None):
    path = PROTOCOLS / f"{name}.py"
    if text is not None:
        path = tmp_path / f"{name}.py"
        path.write_text(textwrap.dedent(text))
    return load_file(str(path))[0].trace(world, params=params)


def waits(sched: ir.Schedule, rank: int) -> list[tuple[str, int]]:
    return [(op.cmp, op.value) for op in sched.programs[rank].ops if isinstance(op, ir.WaitUntil)]


def test_set_words_advance_by_one_more_than_the_largest_value_set():
    sched = trace("nvshmem_allreduce_family", params={"ALGO": "oneshot"})
    assert epochs(sched) == {(1, "ready", 0): ("set", 2), (0, "ready", 1): ("set", 2)}
    three = repeat(sched, 3, "barrier")
    puts = [op.value for op in three.programs[0].ops if isinstance(op, ir.PutSignal)]
    assert puts == [1, 3, 5]  # call k sets 1 + 2k
    assert waits(three, 0) == [("eq", 1), ("eq", 3), ("eq", 5)]
    kinds = [op.kind for op in three.programs[0].ops]
    assert kinds.count("barrier_all") == 2 and kinds[0] != "barrier_all" and kinds[-1] != "barrier_all"
    assert [op.loc for op in three.programs[0].ops if op.kind == "put_signal"] == \
        [op.loc for op in sched.programs[0].ops if op.kind == "put_signal"] * 3  # the user's lines


def test_add_words_start_each_call_at_what_the_calls_before_added(tmp_path):
    text = """
        import clockworks_dist as cw

        @cw.schedule(expect=cw.allgather("x", "out"))
        def counted(r):
            n, me = r.world, r.rank
            x = r.symmetric("x", count=4, role="input")
            out = r.symmetric("out", count=n * 4, role="output")
            got = r.signal("got", count=1)
            for pe in range(n):
                if pe != me:
                    r.put_signal(pe, out.chunk(me, n), x, got[0], value=2, op="add")
            r.copy(out.chunk(me, n), x)
            r.wait_until(got[0], "ge", 2 * (n - 1))
    """
    sched = trace("counted", world=3, text=text, tmp_path=tmp_path)
    assert epochs(sched)[(0, "got", 0)] == ("add", 4)  # two peers add 2 each per call
    four = repeat(sched, 4, "barrier")
    assert waits(four, 0) == [("ge", 4), ("ge", 8), ("ge", 12), ("ge", 16)]
    assert check(four, timeout=60).verdict == "verified"
    # with nothing between the calls, one fast peer's next call can bring the count to 4 before the
    # slow peer's data of this call has landed: the checker finds it
    assert check(repeat(sched, 4, "none"), timeout=60).verdict == "violated"


@pytest.mark.parametrize("between, verdict", [("barrier", "verified"), ("sync", "verified"),
                                              ("alternate", "verified"), ("none", "violated")])
def test_the_checker_decides_what_may_separate_the_calls(between, verdict):
    """One-shot: without a separator a fast rank's next call overwrites a word its peer still waits
    for with eq (a deadlock the checker finds); with a barrier, a sync, or two copies of its scratch
    and signal words used by call parity it is verified."""
    sched = repeat(trace("nvshmem_allreduce_family", params={"ALGO": "oneshot"}), 20, between)
    result = check(sched, timeout=120)
    assert result.verdict == verdict
    if verdict == "violated":
        assert result.violations[0].kind == "deadlock"


def test_alternate_gives_odd_calls_the_second_copies_and_counts_epochs_per_copy():
    sched = trace("nvshmem_allreduce_family", params={"ALGO": "oneshot"})
    four = repeat(sched, 4, "alternate")
    program = four.programs[0]
    assert [d.name for d in program.buffers] == ["x", "out", "slots", "slots_alt"]  # x, out: not scratch
    assert [d.name for d in program.signals] == ["ready", "ready_alt"]
    puts = [(op.dst.buffer, op.signal.signal, op.value) for op in program.ops if isinstance(op, ir.PutSignal)]
    assert puts == [("slots", "ready", 1), ("slots_alt", "ready_alt", 1), ("slots", "ready", 3),
                    ("slots_alt", "ready_alt", 3)]  # call k: copy k % 2, its epoch k // 2
    assert not any(op.kind in ("barrier_all", "sync_all") for op in program.ops)
    reduces = [op for op in program.ops if isinstance(op, ir.LocalReduce)]
    assert [src.buffer for src in reduces[1].srcs] == ["x", "slots_alt"] and reduces[1].dst.buffer == "out"


def test_alternate_does_not_cover_outputs():
    """A put into an output buffer from two calls in a row still races: only scratch alternates."""
    result = check(repeat(trace("nvshmem_put_bandwidth"), 4, "alternate"), timeout=60)
    assert result.verdict == "violated" and result.violations[0].kind == "data_race"


def test_two_shot_needs_nothing_between_calls():
    sched = repeat(trace("nvshmem_allreduce_family", params={"ALGO": "twoshot"}), 20, "none")
    assert check(sched, timeout=120).verdict == "verified"


def test_a_call_that_changes_its_own_input_is_a_wrong_result_not_hidden():
    """The ring all-reduce works in place: a second call reduces the first call's sums."""
    result = check(repeat(trace("ring_allreduce"), 2, "none"), timeout=120)
    assert result.verdict == "violated" and result.violations[0].kind == "wrong_result"


@pytest.mark.parametrize("body, message", [
    ('r.wait_until(s[0], "lt", 3)', "would be satisfied by a value an earlier call left"),
    ('r.wait_until(s[0], "ne", 0)', "would be satisfied by a value an earlier call left"),
])
def test_waits_an_old_epoch_satisfies_are_refused(tmp_path, body, message):
    text = f"""
        import clockworks_dist as cw

        @cw.schedule()
        def waiter(r):
            s = r.signal("s", count=1)
            r.signal_op((r.rank + 1) % r.world, s[0], 1)
            {body}
    """
    sched = trace("waiter", text=text, tmp_path=tmp_path)
    with pytest.raises(RepeatError, match=message):
        repeat(sched, 2)


def test_a_word_both_set_and_added_to_is_refused(tmp_path):
    text = """
        import clockworks_dist as cw

        @cw.schedule()
        def mixed(r):
            s = r.signal("s", count=1)
            peer = (r.rank + 1) % r.world
            r.signal_op(peer, s[0], 1)
            r.signal_op(peer, s[0], 1, op="add")
            r.wait_until(s[0], "ge", 1)
    """
    with pytest.raises(RepeatError, match="both set and added to"):
        repeat(trace("mixed", text=text, tmp_path=tmp_path), 2)


def test_one_call_is_the_schedule_itself_and_bad_arguments_are_refused():
    sched = trace("nvshmem_put_bandwidth")
    assert repeat(sched, 1) is sched
    with pytest.raises(RepeatError, match="at least one call"):
        repeat(sched, 0)
    with pytest.raises(RepeatError, match="one of barrier, sync, alternate, none"):
        repeat(sched, 2, "fence")
    with pytest.raises(RepeatError, match="one of barrier, sync, alternate, none"):
        repeat(sched, 2, "twice")


def test_validate_calls_writes_the_k_call_program_and_reports_per_call(tmp_path):
    """--launcher slurm writes the job (no GPU needed): the program is the 8-call schedule, the
    expected values are the checker's for it; `_per_call` divides a run's times by the calls."""
    out = tmp_path / "v"
    with params.bind({"ALGO": "twoshot"}):
        report = validate.validate_file(str(PROTOCOLS / "nvshmem_allreduce_family.py"), backend="nvshmem", ranks=2,
                                        sizes=[8192], out_dir=str(out), launcher="slurm", calls=8, between="none",
                                        nccl=False)
    assert report["verdict"] == "written"
    manifest = json.loads((out / "validate.json").read_text())
    assert manifest["calls"] == 8 and manifest["between"] == "none"
    source = (out / "build" / "8192" / "nvshmem_allreduce_family.cu").read_text()
    # the reduce-scatter put, once a call in each of the two ranks' kernels
    assert source.count("nvshmem_allreduce_family.py:38: put_signal") == 2 * 8
    assert manifest["params"] == {"ALGO": "twoshot"}
    result = {"verdict": "match", "time": {"median_us": 80.0, "min_us": 72.0, "max_us": 96.0, "iterations": 10},
              "graph_time": None}
    scaled, predicted = validate._per_call(result, {"eager_us": 40.0, "graph_us": 24.0}, 8)
    assert scaled["time"] == {"median_us": 10.0, "min_us": 9.0, "max_us": 12.0, "iterations": 10}
    assert predicted == {"eager_us": 5.0, "graph_us": 3.0} and scaled["graph_time"] is None
    with pytest.raises(validate.ValidateError, match="--calls 2: .*would be satisfied"):
        bad = tmp_path / "bad.py"
        bad.write_text(textwrap.dedent("""
            import clockworks_dist as cw

            @cw.schedule()
            def bad(r):
                r.symmetric("x", count=4, role="input")
                s = r.signal("s", count=1)
                r.signal_op((r.rank + 1) % r.world, s[0], 1)
                r.wait_until(s[0], "ne", 0)
        """))
        validate.validate_file(str(bad), backend="nvshmem", ranks=2, out_dir=str(tmp_path / "b"),
                               launcher="slurm", calls=2)
