"""Hostile input to `clockworks check` and `show`, family by family (from the user study). The contract:
exit 0/1 only for a verdict, 2 for bad input (the user's file named), 3 for a bound, never 4; no
traceback without --debug; with --json, stdout is one JSON object; nothing outlives --timeout."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from clockworks_dist import cli

ROOT = Path(__file__).resolve().parent.parent
RING = str(ROOT / "protocols" / "ring_allreduce.py")
BUGGY = str(ROOT / "protocols" / "buggy" / "ring_allreduce_no_group.py")


def write(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body).lstrip())
    return str(path)


def schedule_file(tmp_path: Path, statement: str, where: str = "body", name: str = "hostile.py") -> str:
    """A two-rank schedule file running `statement` at import, line 3 ("module"), or in rank 1's
    trace, line 10 ("body")."""
    module = statement if where == "module" else "pass"
    body = textwrap.indent(statement if where == "body" else "pass", " " * 8)
    lines = ["import os, sys, time", "import clockworks_dist as cw", module, "", "",
             "@cw.schedule(ranks=(2,))", "def hostile(r):", '    x = r.buffer("x", 4)', "    if r.rank == 1:",
             body, "    r.barrier()", ""]
    path = tmp_path / name
    path.write_text("\n".join(lines))
    return str(path)


def run_cli(capsys, args: list[str]) -> tuple[int, str, str]:
    code = cli.main(args)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    return code, captured.out, captured.err


def run_json(capsys, args: list[str]) -> tuple[int, dict, str]:
    code, out, err = run_cli(capsys, args + ["--json"])
    return code, json.loads(out), err


def clockworks(*args: str, timeout: float = 60, **kwargs) -> subprocess.CompletedProcess:
    """The real command in a fresh process, bounded by a wall clock."""
    return subprocess.run([sys.executable, "-m", "clockworks_dist.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, **kwargs)


@pytest.fixture(autouse=True)
def timer_left_clean():
    """Every command disarms its SIGALRM timer and puts the handlers back."""
    before = signal.getsignal(signal.SIGALRM), signal.getsignal(signal.SIGINT)
    yield
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert (signal.getsignal(signal.SIGALRM), signal.getsignal(signal.SIGINT)) == before


# ------------------------------------------------------------- 1. user code picks the verdict
EXITS = {  # statement -> what the message says it did
    "sys.exit(0)": "called sys.exit(0)",
    "sys.exit(1)": "called sys.exit(1)",
    "sys.exit()": "called sys.exit()",
    "exit(3)": "called sys.exit(3)",
    "raise SystemExit('bye')": "called sys.exit('bye')",
    "os._exit(0)": "called os._exit(0)",
    "raise KeyboardInterrupt": "raised KeyboardInterrupt",
    "raise GeneratorExit('x')": "raised GeneratorExit: x",
    "raise BaseException('base')": "raised BaseException: base",
    "raise BaseExceptionGroup('g', [KeyboardInterrupt()])": "raised BaseExceptionGroup: g (1 sub-exception)",
}


@pytest.mark.parametrize("statement", sorted(EXITS))
def test_exit_or_base_exception_in_the_schedule_is_bad_input(tmp_path, capsys, statement):
    path = schedule_file(tmp_path, statement)
    for command in ("check", "show"):
        code, out, err = run_cli(capsys, [command, path])
        assert code == 2, err
        assert out == ""
        assert err.startswith(f"clockworks: error: hostile.py:10: rank 1: the schedule {EXITS[statement]}")
    code, report, _ = run_json(capsys, ["check", path])
    assert code == 2 and report["verdict"] == "error"
    assert (report["error"]["file"], report["error"]["line"], report["error"]["rank"]) == ("hostile.py", 10, 1)


@pytest.mark.parametrize("statement", ["sys.exit(0)", "raise KeyboardInterrupt", "os._exit(0)",
                                       "raise GeneratorExit"])
def test_exit_at_import_is_bad_input(tmp_path, capsys, statement):
    path = schedule_file(tmp_path, statement, where="module")
    code, out, err = run_cli(capsys, ["check", path])
    assert code == 2 and out == ""
    what = EXITS.get(statement, "raised GeneratorExit")
    assert err.startswith(f"clockworks: error: hostile.py:3: the file {what.split(':')[0]} while loading")


def test_exit_in_a_custom_postcondition_is_bad_input(tmp_path, capsys):
    path = write(tmp_path, "post.py", """
        import sys
        import clockworks_dist as cw

        def expected(world):
            sys.exit(0)

        @cw.schedule(expect=cw.custom(expected), ranks=(2,))
        def post(r):
            r.buffer("x", 4)
    """)
    code, out, err = run_cli(capsys, ["check", path])
    assert code == 2 and out == ""
    assert "post.py:5: the schedule called sys.exit(0) while it was traced" in err


def test_our_error_classes_raised_by_the_user_name_the_users_line(tmp_path, capsys):
    path = schedule_file(tmp_path, "raise cw.ScheduleError('impostor', file='elsewhere.py', line=1)")
    code, _, err = run_cli(capsys, ["check", path])
    assert code == 2
    assert err.startswith("clockworks: error: hostile.py:10: rank 1: the schedule raised ScheduleError")
    path = schedule_file(tmp_path, "raise cw.CheckIncomplete('impostor bound')", name="bound.py")
    code, _, err = run_cli(capsys, ["check", path])
    assert code == 2 and "bound.py:10: rank 1: the schedule raised CheckIncomplete: impostor bound" in err


def test_unprintable_and_huge_exceptions(tmp_path, capsys):
    path = write(tmp_path, "weird.py", """
        import clockworks_dist as cw

        class Weird(Exception):
            def __str__(self):
                raise RuntimeError("no str")

        @cw.schedule(ranks=(2,))
        def weird(r):
            raise Weird()
    """)
    code, _, err = run_cli(capsys, ["check", path])
    assert code == 2 and "weird.py:9: rank 0: the schedule raised Weird: <the exception cannot be printed>" in err
    path = schedule_file(tmp_path, "raise ValueError('x' * 10**6)", name="huge.py")
    code, _, err = run_cli(capsys, ["check", path])
    assert code == 2 and len(err) < 1000 and "huge.py:10" in err


def test_real_ctrl_c_is_130_and_not_bad_input(tmp_path):
    path = schedule_file(tmp_path, "while True: pass")
    proc = subprocess.Popen([sys.executable, "-m", "clockworks_dist.cli", "check", path, "--timeout", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(3)  # inside the endless trace by now
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert err == "clockworks: error: interrupted\n" and out == ""


# ------------------------------------------------------------------ 2. output under --json
PRINTS = ['print("hello {")', 'sys.stdout.write("[1, 2]\\n")', 'print(end="x", flush=True)',
          'os.write(1, b"raw bytes on fd 1\\n")', 'sys.__stdout__.write("under the hood\\n")',
          'sys.stdout = open(os.devnull, "w")']


@pytest.mark.parametrize("where", ["module", "body"])
@pytest.mark.parametrize("statement", PRINTS)
def test_printing_user_code_does_not_corrupt_json(tmp_path, capfd, where, statement):
    path = schedule_file(tmp_path, statement, where=where)
    assert cli.main(["check", path, "--json"]) == 0
    captured = capfd.readouterr()
    assert json.loads(captured.out)["verdict"] == "verified"
    assert "Traceback" not in captured.err
    assert cli.main(["show", path, "--json"]) == 0
    assert json.loads(capfd.readouterr().out)["name"] == "hostile"
    assert sys.stdout is not None and not sys.stdout.closed


def test_exit_handlers_of_the_user_do_not_run_after_our_output(tmp_path):
    path = schedule_file(tmp_path, 'import atexit; atexit.register(print, "garbage"); '
                                   'atexit.register(os._exit, 0)', where="module")
    proc = clockworks("check", path, "--json", "--ranks", "2", "3")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["verdict"] == "verified"


# ---------------------------------------------------------------------- 3. the time bound
@pytest.mark.parametrize("command", ["check", "show"])
def test_endless_trace_stops_at_the_timeout(tmp_path, capsys, command):
    path = schedule_file(tmp_path, "while True: pass")
    started = time.monotonic()
    code, out, err = run_cli(capsys, [command, path, "--timeout", "0.5"])
    assert time.monotonic() - started < 5
    assert code == 3 and out == ""
    assert err.startswith("clockworks: error: incomplete: hostile.py:10: rank 1: tracing hostile at 2 ranks did not "
                          "finish within 0.5 s (--timeout")
    code, report, _ = run_json(capsys, [command, path, "--timeout", "0.5"])
    assert code == 3 and report["verdict"] == "incomplete" and "hostile.py:10" in report["error"]["message"]


@pytest.mark.parametrize("statement", ["while True: pass", "time.sleep(3600)",
                                       "while True:\n    try:\n        time.sleep(1)\n"
                                       "    except Exception:\n        pass"])
def test_endless_import_stops_at_the_timeout(tmp_path, capsys, statement):
    path = write(tmp_path, "slow.py", "import time\n" + statement + "\n")
    started = time.monotonic()
    code, _, err = run_cli(capsys, ["check", path, "--timeout", "0.5"])
    assert time.monotonic() - started < 5
    assert code == 3
    assert "slow.py:" in err and "loading the file did not finish within 0.5 s (--timeout" in err


def test_predict_is_bounded_too(tmp_path, capsys):
    path = schedule_file(tmp_path, "while True: pass")
    started = time.monotonic()
    code, out, err = run_cli(capsys, ["predict", path, "-t", "h200x2-nv18", "--ranks", "2", "--timeout", "0.5"])
    assert time.monotonic() - started < 5
    assert code == 3 and out == ""
    assert "hostile.py:10: predicting hostile.py did not finish within 0.5 s (--timeout" in err
    # a legal schedule whose simulation runs long: 64 ranks take seconds per size
    code, report, _ = run_json(capsys, ["predict", RING, "-t", "dgx-h100-cluster", "--nodes", "8", "--ranks", "64",
                                        "--timeout", "0.5"])
    assert time.monotonic() - started < 10
    assert code == 3 and report["verdict"] == "incomplete"


def test_huge_legal_program_stops_at_the_timeout(tmp_path, capsys):
    path = write(tmp_path, "big.py", """
        import clockworks_dist as cw

        @cw.schedule(ranks=(2,))
        def big(r):
            x = r.buffer("x", 4)
            for _ in range(200_000):
                r.fill(x, 1.0)
    """)
    started = time.monotonic()
    code, _, err = run_cli(capsys, ["check", path, "--timeout", "1"])
    assert time.monotonic() - started < 6
    assert code == 3 and "big.py:" in err and "did not finish within 1 s" in err


def test_the_check_gets_what_loading_and_tracing_left(monkeypatch, tmp_path, capsys):
    path = write(tmp_path, "slowtrace.py", """
        import time
        import clockworks_dist as cw

        @cw.schedule(ranks=(2, 4))
        def slow(r):
            time.sleep(0.2)
            r.barrier()
    """)
    timeouts = []

    def checker(sched, *, timeout, **kwargs):
        timeouts.append(timeout)
        raise RuntimeError("stop here")

    monkeypatch.setattr(cli, "_checker", lambda: checker)
    assert cli.main(["check", path, "--timeout", "10"]) == 4  # the stand-in raises: an internal error
    capsys.readouterr()
    assert timeouts and 9 < timeouts[0] < 9.7  # two ranks traced at 0.2 s each


def test_a_check_that_overruns_is_stopped(monkeypatch, tmp_path, capsys):
    def stuck_checker(sched, **kwargs):
        while True:
            pass

    monkeypatch.setattr(cli, "_checker", lambda: stuck_checker)
    started = time.monotonic()
    code, out, err = run_cli(capsys, ["check", RING, "--ranks", "2", "--timeout", "0.5"])
    assert time.monotonic() - started < 5
    assert code == 3
    assert "overran --timeout 0.5 s in the checker; stopped it" in err
    assert "no violation found, but the search is incomplete" in out


def test_code_that_swallows_the_timeout_still_ends(tmp_path):
    path = schedule_file(tmp_path, "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\nwhile True: pass")
    started = time.monotonic()
    proc = clockworks("check", path, "--timeout", "0.5", "--json", timeout=30)
    assert time.monotonic() - started < 15
    assert proc.returncode == 3
    assert "hostile.py:" in proc.stderr and "does not let itself be stopped" in proc.stderr
    assert json.loads(proc.stdout)["verdict"] == "incomplete"


# ------------------------------------------------------------------ 4. options and output
@pytest.mark.parametrize("option, value", [
    ("--timeout", "nan"), ("--timeout", "-1"), ("--timeout", "-inf"), ("--timeout", ""), ("--timeout", "abc"),
    ("--max-states", "1.5"), ("--max-states", "nan"), ("--max-states", "-1"),
    ("--ranks", "0"), ("--ranks", "99999999"), ("--ranks", "2.5"),
    ("--size", "CHUNK=1e3"), ("--size", "CHUNK=nan"), ("--size", "CHUNK=99999999999999999999"),
    ("--size", "CHUNK=0"), ("--schedule", "nope"),
])
def test_bad_options_are_usage_errors(capsys, option, value):
    code, out, err = run_cli(capsys, ["check", RING, "--ranks", "2", option, value])
    assert code == 2 and out == ""
    assert option in err or "ring_allreduce.py" in err
    code, report, _ = run_json(capsys, ["check", RING, "--ranks", "2", option, value])
    assert code == 2 and report["verdict"] == "error"


@pytest.mark.parametrize("value, bound", [("0", None), ("-0", None), ("none", None), ("inf", None),
                                          ("1e400", None), ("2.5", 2.5), ("1e300", 1e300)])
def test_timeout_values(monkeypatch, capsys, value, bound):
    seen = []

    def checker(sched, *, timeout, **kwargs):
        seen.append(timeout)
        raise RuntimeError("stop here")

    monkeypatch.setattr(cli, "_checker", lambda: checker)
    assert cli.main(["check", RING, "--ranks", "2", "--timeout", value]) == 4
    capsys.readouterr()
    assert seen[0] == (None if bound is None else pytest.approx(bound, abs=1))


@pytest.mark.parametrize("value, bound", [("0", None), ("-0", None), ("none", None), ("1e400", None),
                                          ("1e6", 1_000_000), ("1_000", 1000), ("5", 5)])
def test_max_states_values(value, bound):
    assert cli.build_parser().parse_args(["check", RING, "--max-states", value]).max_states == bound


class FailingStdout:
    """A stdout whose writes fail with `error`."""

    def __init__(self, error: int):
        self.error = error

    def write(self, text):
        self.flush()

    def flush(self):
        kind = BrokenPipeError if self.error == errno.EPIPE else OSError
        raise kind(self.error, os.strerror(self.error))

    def isatty(self):
        return False


@pytest.mark.parametrize("args, code", [(["check", RING, "--ranks", "2"], 0), (["check", BUGGY, "--ranks", "4"], 1),
                                        (["check", RING, "--ranks", "2", "--json"], 0), (["show", RING], 0),
                                        (["topology", "show", "dgx-h100"], 0), (["topology", "schema"], 0)])
def test_closed_pipe_keeps_the_exit_code_and_a_full_disk_is_exit_2(monkeypatch, capsys, args, code):
    monkeypatch.setattr(sys, "stdout", FailingStdout(errno.EPIPE))
    assert cli.main(args) == code
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(sys, "stdout", FailingStdout(errno.ENOSPC))
    assert cli.main(args) == 2
    assert capsys.readouterr().err == "clockworks: error: cannot write the output: No space left on device\n"


def test_real_dev_full_and_real_closed_pipe():
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "clockworks_dist.cli", "check", RING, "--ranks", "2"],
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 2
    assert proc.stderr == "clockworks: error: cannot write the output: No space left on device\n"
    proc = subprocess.Popen([sys.executable, "-m", "clockworks_dist.cli", "show", RING, "--ranks", "32"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    assert proc.stdout.read(10) == b"schedule r"
    proc.stdout.close()  # as `| head -c 10` does: the rest of the listing meets a closed pipe
    assert proc.wait(timeout=120) == 0
    assert proc.stderr.read() == b""


# ------------------------------------------------------------------ 5. hostile files
def test_hostile_files(tmp_path, capsys):
    (tmp_path / "adir.py").mkdir()
    (tmp_path / "nul.py").write_bytes(b"import clockworks_dist as cw\x00\n")
    (tmp_path / "binary.py").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "latin1.py").write_bytes(b"x = '\xff\xfe'\n")
    (tmp_path / "empty.py").write_bytes(b"")
    (tmp_path / "missing.py").write_text("import no_such_module_anywhere\n")
    (tmp_path / "ring.txt").write_text(Path(RING).read_text())
    cases = {
        str(tmp_path / "nope.py"): "nope.py: no such file",
        str(tmp_path / "adir.py"): "adir.py: is a directory",
        str(tmp_path / "nul.py"): "nul.py: syntax error",
        str(tmp_path / "binary.py"): "binary.py",
        str(tmp_path / "latin1.py"): "latin1.py:1: syntax error",
        str(tmp_path / "empty.py"): "empty.py: defines no schedule",
        str(tmp_path / "missing.py"): "missing.py:1: the file raised ModuleNotFoundError while loading",
        str(tmp_path / "ring.txt"): "ring.txt: not a Python file",
        "/dev/null": "/dev/null: is not a regular file",
        "": "the file name is empty",
    }
    for path, message in cases.items():
        for command in ("check", "show"):
            code, out, err = run_cli(capsys, [command, path, "--ranks", "2"])
            assert code == 2 and out == "", (path, err)
            assert message in err, (path, err)
        code, report, _ = run_json(capsys, ["check", path, "--ranks", "2"])
        assert code == 2 and report["verdict"] == "error" and message in report["error"]["message"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_unreadable_file(tmp_path, capsys):
    path = tmp_path / "secret.py"
    path.write_text("x = 1\n")
    path.chmod(0)
    code, _, err = run_cli(capsys, ["check", str(path)])
    assert code == 2 and "secret.py: cannot be read" in err


@pytest.mark.parametrize("name", ["my ring.py", "ring-allreduce.py", "\u0440\u0438\u043d\u0433.py", "json.py",
                                  os.fsdecode(b"bad\xffname.py")])
def test_odd_file_names_load(tmp_path, capsys, name):
    path = tmp_path / name
    path.write_text(Path(BUGGY).read_text())
    code, out, err = run_cli(capsys, ["check", str(path), "--ranks", "4"])
    assert code == 1 and "violated" in out, err
    code, report, _ = run_json(capsys, ["check", str(path), "--ranks", "4"])
    assert code == 1 and report["verdict"] == "violated"


def test_unknown_schedule_names_the_file(capsys):
    code, report, err = run_json(capsys, ["show", RING, "--schedule", "nope"])
    assert code == 2 and "ring_allreduce.py: no schedule named 'nope'; it defines ring_allreduce" in err
    assert report["verdict"] == "error"


@pytest.mark.parametrize("option", ["--dot", "--png"])
def test_topology_show_empty_output_name(capsys, option):
    code, report, err = run_json(capsys, ["topology", "show", "dgx-h100", f"{option}="])
    assert code == 2 and f"{option} needs a file name" in err and report["verdict"] == "error"


def test_time_bound_puts_back_an_outer_timer():
    from clockworks_dist.dsl import guard

    fired = []
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: fired.append(signum))
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.6)
        with guard.time_bound(5.0):
            time.sleep(0.1)
        assert 0.3 < signal.getitimer(signal.ITIMER_REAL)[0] <= 0.5
        time.sleep(0.8)
        assert fired == [signal.SIGALRM]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# ------------------------------------------- found by scripts/fuzz_cli.py: the file is always named
def test_predict_names_the_line_of_a_mismatch_and_of_a_deadlock(tmp_path, capsys):
    path = write(tmp_path, "lonely.py", """
        import clockworks_dist as cw

        N = cw.size("N", 4)

        @cw.schedule(ranks=(2,))
        def lonely(r):
            x = r.buffer("x", N)
            if r.rank == 1:
                r.recv(0, x)
    """)
    code, _, err = run_cli(capsys, ["predict", path, "-t", "h200x2-nv18", "--ranks", "2", "--sizes", "1KiB"])
    assert code == 2 and "lonely.py:9: the schedule does not match" in err
    code, _, err = run_cli(capsys, ["predict", BUGGY, "-t", "h200x2-nv18", "--ranks", "2", "--sizes", "1KiB"])
    assert code == 2 and "ring_allreduce_no_group.py:" in err and "the schedule deadlocks" in err


def test_our_error_raised_in_a_custom_postcondition_names_the_users_line(tmp_path, capsys):
    path = write(tmp_path, "post.py", """
        import clockworks_dist as cw

        def post(world):
            raise cw.ScheduleError("impostor", file="elsewhere.py", line=1)

        @cw.schedule(expect=cw.custom(post), ranks=(2,))
        def f(r):
            r.buffer("x", 4)
    """)
    code, _, err = run_cli(capsys, ["check", path])
    assert code == 2 and err.startswith("clockworks: error: post.py:4: custom: the custom expectation raised")


def test_a_topology_without_a_route_between_two_gpus_is_named(tmp_path, capsys):
    source = (ROOT / "clockworks_dist" / "topology" / "data" / "h200x2-nv18.yaml").read_text()
    head, _, _ = source.partition("links:")
    path = tmp_path / "islands.yaml"
    path.write_text(head + "links: []\n")
    code, _, err = run_cli(capsys, ["topology", "show", str(path)])
    assert code == 2 and f"{path}: no route from" in err


def test_a_timeout_that_lands_in_a_finalizer_is_neither_printed_nor_lost(capsys):
    # the alarm can fire inside a __del__, where Python drops the exception with a traceback
    from clockworks_dist.dsl import guard

    class Slow:
        def __del__(self):
            time.sleep(0.3)  # the bound passes in here

    with pytest.raises(guard.TimeUp):
        with guard.time_bound(0.05):
            Slow()
            time.sleep(0.01)  # the block itself ends before the alarm refires
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and "Exception ignored" not in captured.err


# ------------------------------------------------------------- numeric options at the edges (issue 28)
@pytest.mark.parametrize("value", ["-0", "-0.0", "1e3", "1E-3", "0x10", "\u0662", "\uff12", "nan", "inf", "2.0",
                                   "0b10", "1__0", "_2", "2_", ""])
@pytest.mark.parametrize("command", [["check", RING, "--ranks"], ["show", RING, "--ranks"],
                                     ["predict", RING, "-t", "dgx-h100-cluster", "--scale-nodes"],
                                     ["predict", RING, "-t", "dgx-h100-cluster", "--nodes"],
                                     ["predict", RING, "-t", "h200x2-nv18", "--scaling"],
                                     ["topology", "show", "dgx-h100-cluster", "--nodes"]])
def test_a_positive_integer_option_refuses_edge_values_naming_it(capsys, command, value):
    assert cli.main([*command, value]) == 2
    err = capsys.readouterr().err
    assert command[-1] in err and "Traceback" not in err, err


@pytest.mark.parametrize("value, world", [("+2", 2), (" 2 ", 2), ("\t2\n", 2), ("0_2", 2)])
def test_a_positive_integer_option_accepts_plain_decimal_forms(value, world):
    assert cli._positive(value) == world


@pytest.mark.parametrize("value, seconds", [("-0", None), ("-0.0", None), ("1e3", 1000.0), ("1E-3", 0.001),
                                            ("+5", 5.0), ("1_000", 1000.0), (" 5 ", 5.0), ("inf", None),
                                            ("1e400", None)])
def test_timeout_edge_values_have_a_meaning(value, seconds):
    assert cli._seconds(value) == seconds


@pytest.mark.parametrize("value", ["0x10", "\u0665", "nan", "-nan", "-inf", "-1e-300", "5s", ""])
def test_timeout_edge_values_refused(capsys, value):
    assert cli.main(["check", RING, "--timeout", value]) == 2
    assert "--timeout" in capsys.readouterr().err


@pytest.mark.parametrize("value, states", [("-0", None), ("1e3", 1000), ("+5", 5), ("1_000", 1000), (" 5 ", 5),
                                           ("inf", None)])
def test_max_states_edge_values_have_a_meaning(value, states):
    assert cli._states(value) == states


@pytest.mark.parametrize("value", ["1E-3", "0x10", "\u0665", "nan", "-inf", "2.5"])
def test_max_states_edge_values_refused(capsys, value):
    assert cli.main(["check", RING, "--max-states", value]) == 2
    assert "--max-states" in capsys.readouterr().err
