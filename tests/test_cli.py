"""The `clockworks` command, called in-process: `main([...])` returns the exit code."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from clockworks_dist import cli, ir, load_file
from clockworks_dist.check.result import CheckResult, OpRef, Violation
from clockworks_dist.semantics.rules import describe

ROOT = Path(__file__).resolve().parent.parent
RING = str(ROOT / "protocols" / "ring_allreduce.py")


def write(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body).lstrip())
    return str(path)


# ---------------------------------------------------------------------------------------- show
def test_show_lists_each_rank(capsys):
    assert cli.main(["show", RING, "--ranks", "4"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "schedule ring_allreduce  (ring_allreduce.py:8): 4 ranks, 1 node"
    assert "  CHUNK = 4  (min 1; set with --size CHUNK=VALUE)" in lines
    assert "    ranks 0..3: x[0:16] = sum(x[0:16] on ranks 0..3)" in lines
    for rank in range(4):
        assert f"rank {rank}: 9 ops" in lines
    start = lines.index("rank 0: 9 ops")
    assert lines[start + 1:start + 5] == [
        "  0    ring_allreduce.py:16  group:",
        "  0.0  ring_allreduce.py:17    send(peer=1, x[0:4])",
        "  0.1  ring_allreduce.py:18    recv(peer=3, tmp[0:4])",
        "  1    ring_allreduce.py:19  x[12:16] = x[12:16] + tmp[0:4]",
    ]
    assert "\x1b[" not in out  # plain text when stdout is not a terminal


def test_show_size_binding(capsys):
    assert cli.main(["show", RING, "--ranks", "2", "--size", "CHUNK=8"]) == 0
    out = capsys.readouterr().out
    assert "  x: 16 (= 2*CHUNK) x float32, inout, per-rank  (ring_allreduce.py:11)" in out


def test_show_json_round_trips(capsys):
    assert cli.main(["show", RING, "--ranks", "4", "--json"]) == 0
    text = capsys.readouterr().out
    sched = ir.Schedule.from_json(text)
    assert sched == load_file(RING)[0].trace(4)
    assert json.loads(sched.to_json()) == json.loads(text)


def test_show_json_needs_one_schedule(tmp_path, capsys):
    path = write(tmp_path, "two.py", """
        import clockworks_dist as cw

        @cw.schedule
        def first(r):
            r.barrier()

        @cw.schedule
        def second(r):
            r.barrier()
    """)
    assert cli.main(["show", path, "--json"]) == 2
    assert "pick one with --schedule NAME" in capsys.readouterr().err
    assert cli.main(["show", path, "--json", "--schedule", "second"]) == 0
    assert ir.Schedule.from_json(capsys.readouterr().out).name == "second"
    assert cli.main(["show", path, "--schedule", "third"]) == 2
    assert "no schedule named 'third'; it defines first, second" in capsys.readouterr().err


# ----------------------------------------------------------------------------------- bad input
BAD_INPUTS = {
    "raises.py": ("""
        import clockworks_dist as cw
        raise RuntimeError("boom")
    """, "raises.py:2: the file raised RuntimeError while loading: boom"),
    "empty.py": ("""
        import clockworks_dist as cw
        X = 1
    """, "empty.py: defines no schedule (decorate a function with @cw.schedule)"),
    "strpeer.py": ("""
        import clockworks_dist as cw

        @cw.schedule
        def f(r):
            x = r.buffer("x", 4)
            r.send("1", x)
    """, "strpeer.py:6: rank 0: send: peer must be an integer rank, got str '1'"),
    "typo.py": ("""
        import clockworks_dist as cw

        @cw.schedule
        def f(r):
            x = r.bufer("x", 4)
    """, "typo.py:5: rank 0: unknown op or attribute r.bufer (did you mean r.buffer?)"),
    "nobuf.py": ("""
        import clockworks_dist as cw

        @cw.schedule
        def f(r):
            r.buffer("x", 4)
            r.send((r.rank + 1) % r.world, y)
    """, "nobuf.py:6: rank 0: the schedule raised NameError: name 'y' is not defined"),
}


@pytest.mark.parametrize("command", ["show", "check"])
@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_bad_input_exits_2_with_file_and_line(tmp_path, capsys, name, command):
    body, message = BAD_INPUTS[name]
    path = write(tmp_path, name, body)
    assert cli.main([command, path, "--ranks", "2"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("clockworks: error: " + message)
    assert "Traceback" not in captured.err


def test_bad_input_debug_prints_traceback(tmp_path, capsys):
    path = write(tmp_path, "strpeer.py", BAD_INPUTS["strpeer.py"][0])
    assert cli.main(["show", path, "--debug"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and "ScheduleError" in err


def test_bad_input_json(tmp_path, capsys):
    path = write(tmp_path, "strpeer.py", BAD_INPUTS["strpeer.py"][0])
    assert cli.main(["check", path, "--ranks", "2", "--json"]) == 2
    report = json.loads(capsys.readouterr().out)
    assert report["verdict"] == "error"
    assert (report["error"]["file"], report["error"]["line"], report["error"]["rank"]) == ("strpeer.py", 6, 0)


def test_missing_file_and_bad_arguments(capsys):
    assert cli.main(["show", "no/such/file.py"]) == 2
    assert "no/such/file.py: no such file" in capsys.readouterr().err
    assert cli.main(["show", RING, "--size", "CHUNK"]) == 2
    assert "expected NAME=VALUE" in capsys.readouterr().err
    assert cli.main(["show", RING, "--size", "NOPE=2"]) == 2
    assert "unknown size 'NOPE'; this schedule declares CHUNK" in capsys.readouterr().err
    assert cli.main(["check", RING, "--ranks", "0"]) == 2
    assert cli.main([]) == 2


# ---------------------------------------------------- check, with a stand-in for the checker
def fake_checker(verdict_of):
    """A checker returning `verdict_of(world)` ("verified", "violated", "incomplete") and recording calls."""
    calls = []

    def check(sched, *, strategy, max_states, timeout, reduction, progress, found=None):
        calls.append(dict(world=sched.world, strategy=strategy, max_states=max_states, timeout=timeout,
                          reduction=reduction))
        progress(10, 20, 2.0)  # stderr is not a terminal: must print nothing
        verdict = verdict_of(sched.world)
        violations = []
        if verdict == "violated":
            op = sched.programs[0].ops[0].ops[0]
            ref = OpRef(rank=0, index=0, sub=0, kind=op.kind, loc=op.loc, text=describe(op))
            violations.append(Violation(kind="deadlock", message="stuck", ranks=(0,), ops=(ref,)))
        return CheckResult(schedule=sched, verdict=verdict, violations=violations, states=100, transitions=150,
                           seconds=0.5, complete=verdict != "incomplete",
                           stopped_by="max_states" if verdict == "incomplete" else None, strategy=strategy,
                           reduction=reduction)

    check.calls = calls
    return check


@pytest.mark.parametrize("verdict, code", [("verified", 0), ("violated", 1), ("incomplete", 3)])
def test_check_exit_codes(monkeypatch, capsys, verdict, code):
    checker = fake_checker(lambda world: verdict)
    monkeypatch.setattr(cli, "_checker", lambda: checker)
    assert cli.main(["check", RING, "--ranks", "4"]) == code
    captured = capsys.readouterr()
    assert captured.err == ""
    first = captured.out.splitlines()[0]
    if verdict == "incomplete":
        assert first == ("ring_allreduce, 4 ranks: no violation found, but the search is incomplete "
                         "(stopped at 100 states)")
        assert "verified" not in captured.out
    else:
        assert first == f"ring_allreduce, 4 ranks: {verdict}" + (" (1 error)" if verdict == "violated" else "")
    if verdict == "violated":
        assert "    ring_allreduce.py:17  rank 0 #0.0  send(peer=1, x[0:4])" in captured.out


def test_check_options_reach_the_checker(monkeypatch, capsys):
    checker = fake_checker(lambda world: "verified")
    monkeypatch.setattr(cli, "_checker", lambda: checker)
    assert cli.main(["check", RING, "--bfs", "--max-states", "500", "--timeout", "0", "--no-reduction"]) == 0
    assert checker.calls == [dict(world=w, strategy="bfs", max_states=500, timeout=None, reduction=False)
                             for w in (2, 4, 8)]  # the schedule's declared sizes
    assert "summary: verified" in capsys.readouterr().out
    checker.calls.clear()
    assert cli.main(["check", RING, "--ranks", "3", "5"]) == 0
    assert [c["world"] for c in checker.calls] == [3, 5]
    assert checker.calls[0]["strategy"] == "dfs" and checker.calls[0]["max_states"] == 1_000_000
    assert checker.calls[0]["reduction"] is True
    # --timeout (60) covers loading and tracing too: the check gets what they left of it
    assert all(50 < c["timeout"] < 60 for c in checker.calls)


def test_check_json_single_and_several(monkeypatch, capsys):
    checker = fake_checker(lambda world: "violated" if world == 8 else ("incomplete" if world == 4 else "verified"))
    monkeypatch.setattr(cli, "_checker", lambda: checker)
    assert cli.main(["check", RING, "--ranks", "2", "--json"]) == 0
    single = json.loads(capsys.readouterr().out)
    assert single["verdict"] == "verified" and single["world"] == 2 and "results" not in single
    assert cli.main(["check", RING, "--ranks", "2", "4", "--json"]) == 3
    several = json.loads(capsys.readouterr().out)
    assert several["verdict"] == "incomplete"
    assert [r["world"] for r in several["results"]] == [2, 4]
    assert cli.main(["check", RING, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["verdict"] == "violated"
    violation = report["results"][2]["violations"][0]
    assert violation["kind"] == "deadlock"
    assert (violation["ops"][0]["file"], violation["ops"][0]["line"]) == ("ring_allreduce.py", 17)


def test_checker_crash_is_not_a_violation(monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise RuntimeError("bug")
    monkeypatch.setattr(cli, "_checker", lambda: broken)
    assert cli.main(["check", RING, "--ranks", "2"]) == 4
    assert "internal error" in capsys.readouterr().err


# ------------------------------------------------------------------------- the real checker
def test_ring_allreduce_verifies_at_4_ranks(capsys):
    assert cli.main(["check", RING, "--ranks", "4"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "ring_allreduce, 4 ranks: verified"
    assert cli.main(["check", RING, "--ranks", "4", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {"verdict", "violations", "states", "seconds", "complete", "schedule", "world"} <= set(report)
    assert report["verdict"] == "verified" and report["violations"] == [] and report["world"] == 4


def test_deadlock_exits_1_with_blocked_ops(tmp_path, capsys):
    path = write(tmp_path, "headtohead.py", """
        import clockworks_dist as cw

        @cw.schedule(ranks=(2,))
        def head_to_head(r):
            x = r.buffer("x", 4)
            peer = 1 - r.rank
            r.send(peer, x)
            r.recv(peer, x)
    """)
    assert cli.main(["check", path]) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "head_to_head, 2 ranks: violated (1 error)"
    assert "error: deadlock (ranks 0, 1)" in out
    assert "    headtohead.py:7  rank 0 #0  send(peer=1, x[0:4])" in out
    end = [line for line in out.splitlines() if line.startswith("  end ")]
    assert [c.strip() for c in end[0].split("|")] == [
        "end", "blocked: send(peer=1, x[0:4]) :7", "blocked: send(peer=0, x[0:4]) :7"]
    assert cli.main(["check", path, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["verdict"] == "violated"
    assert [(v["kind"], v["ranks"]) for v in report["violations"]] == [("deadlock", [0, 1])]
    assert {(o["file"], o["line"]) for o in report["violations"][0]["ops"]} == {("headtohead.py", 7)}


def test_bounded_search_is_incomplete_not_verified(capsys):
    assert cli.main(["check", RING, "--ranks", "8", "--max-states", "5"]) == 3
    out = capsys.readouterr().out
    assert "no violation found, but the search is incomplete (stopped at" in out
    assert "verified" not in out
