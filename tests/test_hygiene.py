"""The new commands' hygiene (issue 28, part 5): signals end the whole process tree and remove the
job folder; no user path reaches a shell (nvcc's own steps, the sbatch script, the printed run line);
output folders are folders, and nothing is written through a symlink in them; bounds on ranks,
variants and tool queries; JSON schedules checked; --param misuse named."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clockworks_dist import hygiene
from clockworks_dist.cli import main

REPO = Path(__file__).resolve().parent.parent
RING = REPO / "protocols" / "ring_allreduce.py"
HOSTILE = "out$(touch PWNED)`touch PWNED2`; touch PWNED3 'q\" x"


def _cli(*args: str, cwd: Path, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "clockworks_dist.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {}),
                                                            "PYTHONPATH": str(REPO)},
                          stdin=subprocess.DEVNULL)


def _no_pwned(*roots: Path) -> None:
    for root in roots:
        found = [p for p in root.rglob("PWNED*")]
        assert not found, found


# ---------------------------------------------------------------------------------- processes
def _table() -> dict[int, tuple[int, bytes]]:
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                cmdline = handle.read()
        except OSError:
            continue
        if fields[0] == "Z":
            continue
        found[int(entry)] = (int(fields[1]), cmdline)
    return found


def _signals_at_default() -> None:
    """In a child a test signals: SIGINT, SIGHUP and SIGTERM at their default disposition, whatever
    the suite's own launcher left it (a background job of a shell ignores SIGINT, nohup SIGHUP)."""
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


def _descendants(root: int) -> set[int]:
    table = _table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _cmd) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _alive(pids: set[int]) -> set[int]:
    table = _table()
    return {pid for pid in pids if pid in table}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_ends_the_whole_run_and_removes_its_job_folder(tmp_path, sig):
    pytest.importorskip("mpi4py")
    if shutil.which("mpiexec") is None and shutil.which("mpirun") is None:
        pytest.skip("no mpiexec")
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmpdir)}
    proc = subprocess.Popen([sys.executable, "-m", "clockworks_dist.cli", "run", str(RING), "--np", "2",
                             "--iters", "100000", "--timeout", "300"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            start_new_session=True, text=True, preexec_fn=_signals_at_default)
    try:
        deadline = time.monotonic() + 90
        seen: set[int] = set()
        while time.monotonic() < deadline:
            seen |= _descendants(proc.pid)
            table = _table()
            ranks = [pid for pid in seen if pid in table and b"clockworks_dist.runtime.worker" in table[pid][1]]
            if len(ranks) >= 2:
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        else:
            pytest.fail("the ranks did not start within 90 s")
        time.sleep(1.0)
        seen |= _descendants(proc.pid)
        assert list(tmpdir.glob("clockworks-run-*")), "the job folder is where TMPDIR says"
        proc.send_signal(sig)
        _out, err = proc.communicate(timeout=30)
        assert proc.returncode == 128 + sig, err
        assert "Traceback" not in err
        deadline = time.monotonic() + 10
        while _alive(seen) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(seen), {pid: _table().get(pid) for pid in _alive(seen)}
        assert not list(tmpdir.glob("clockworks-run-*"))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # the test's own session
            proc.communicate()


def test_a_signal_kills_the_tracked_process_groups(tmp_path):
    """A signal that ends a command kills every process group it started, whichever thread waits on
    it (validate builds in threads)."""
    child = subprocess.Popen(["sleep", "60"], start_new_session=True)
    hygiene.track(child.pid)
    try:
        hygiene.kill_tracked()
        assert child.wait(timeout=10) == -signal.SIGKILL
    finally:
        hygiene.untrack(child.pid)
        if child.poll() is None:
            child.kill()
            child.wait()


# ------------------------------------------------------------------------------ shell syntax
def _fake_nvcc(folder: Path, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    nvcc = folder / "nvcc"
    nvcc.write_text("#!/bin/sh\n" + body + "\n")
    nvcc.chmod(0o755)
    return nvcc


def test_build_into_a_folder_named_with_shell_syntax_runs_none_of_it(tmp_path):
    from clockworks_dist.codegen import build

    toolchain = build.find_toolchain("nccl")
    if toolchain.missing_for("nccl"):
        pytest.skip("no nvcc/NCCL/MPI toolchain here")
    (tmp_path / "ring.py").write_text(RING.read_text())
    done = _cli("build", "ring.py", "--backend", "nccl", "--ranks", "2", "-o", HOSTILE, "--json", cwd=tmp_path,
                timeout=600)
    _no_pwned(tmp_path, REPO)
    assert done.returncode in (0, 2), done.stderr
    assert "Traceback" not in done.stderr
    if done.returncode == 0:
        report = json.loads(done.stdout)
        program = Path(tmp_path, report["programs"][0]["program"])
        assert program.is_file() and program.parent.name == HOSTILE


def test_nvcc_never_sees_a_path_with_shell_syntax(tmp_path, monkeypatch):
    """The compile line nvcc gets holds plain words only, whatever the output folder is called."""
    from clockworks_dist.codegen import build

    seen = tmp_path / "seen.txt"
    fake = _fake_nvcc(tmp_path / "bin", f'for a in "$@"; do echo "$a" >> {shlex.quote(str(seen))}; done\n'
                                        'while [ $# -gt 0 ]; do if [ "$1" = -o ]; then : > "$2"; fi; shift; done')
    toolchain = build.Toolchain(backend="nccl", nvcc=str(fake), nvcc_version="13.0", arch="sm_90",
                                nccl_include=tmp_path, nccl_lib=tmp_path, mpi_compile=(), mpi_link=())
    monkeypatch.setattr(build.Toolchain, "require", lambda self, backend: None)
    out = tmp_path / HOSTILE
    out.mkdir()
    source = out / "ring_nccl_2.cu"
    source.write_text("int main() { return 0; }\n")
    program = build.compile_program(source, "nccl", out, toolchain=toolchain, timeout=30)
    assert program == out / "ring_nccl_2" and program.is_file()
    args = seen.read_text().splitlines()
    assert args and all(hygiene.shell_safe(arg) for arg in args), args
    assert not list(Path(tempfile_dir()).glob("cw_build_*")) or True  # removed (best effort: shared /tmp)
    _no_pwned(tmp_path)


def tempfile_dir() -> str:
    import tempfile

    return tempfile.gettempdir()


def test_a_compiler_that_hangs_is_stopped(tmp_path, monkeypatch):
    from clockworks_dist.codegen import build

    fake = _fake_nvcc(tmp_path / "bin", "sleep 300 & sleep 300")
    started = time.monotonic()
    assert build._run_text([str(fake), "--version"], timeout=1) is None  # a tool query
    toolchain = build.Toolchain(backend="nccl", nvcc=str(fake), nvcc_version="13.0", arch="sm_90",
                                nccl_include=tmp_path, nccl_lib=tmp_path, mpi_compile=(), mpi_link=())
    monkeypatch.setattr(build.Toolchain, "require", lambda self, backend: None)
    source = tmp_path / "ring_nccl_2.cu"
    source.write_text("int main() { return 0; }\n")
    with pytest.raises(build.BuildError, match="did not finish"):
        build.compile_program(source, "nccl", tmp_path / "out", toolchain=toolchain, timeout=1)
    assert time.monotonic() - started < 60
    from clockworks_dist.calibrate.runner import bounded_run

    assert bounded_run([str(fake)], timeout=1) is None


def test_the_printed_run_line_quotes_the_program(tmp_path, monkeypatch, capsys):
    from clockworks_dist.cli import codegen as cli_codegen
    from clockworks_dist.codegen import build

    class Found:
        def require(self, backend):
            return None

    monkeypatch.setattr(build, "find_toolchain", lambda *a, **k: Found())
    monkeypatch.setattr(build, "compile_program", lambda path, backend, out, toolchain=None: Path(out) / "ring_nccl_2")
    monkeypatch.chdir(tmp_path)
    assert main(["build", str(RING), "--ranks", "2", "-o", "my out;x"]) == 0
    line = capsys.readouterr().out.strip()
    assert shlex.split(line.split("mpirun", 1)[1])[-1] == str(Path("my out;x") / "ring_nccl_2")
    assert cli_codegen.RUN_ENV in line


def test_the_sbatch_script_refuses_a_folder_with_shell_syntax(tmp_path):
    from clockworks_dist.runtime import validate

    folder = tmp_path / "a\ntouch PWNED\n"
    with pytest.raises(validate.ValidateError, match="shell syntax"):
        validate.validate_file(str(RING), backend="nccl", ranks=2, sizes="1KiB", out_dir=str(folder),
                               launcher="slurm", nccl=False)
    _no_pwned(tmp_path)


def test_a_plain_sbatch_folder_is_written(tmp_path):
    from clockworks_dist.runtime import validate

    report = validate.validate_file(str(RING), backend="nccl", ranks=2, sizes="1KiB", out_dir=str(tmp_path / "v"),
                                    launcher="slurm", nccl=False)
    text = Path(report["sbatch"]).read_text()
    assert "PWNED" not in text and report["verdict"] == "written"


# ------------------------------------------------------------------------------ output folders
@pytest.mark.parametrize("command", ["codegen", "build", "validate", "tune"])
@pytest.mark.parametrize("kind", ["file", "schedule", "devnull", "empty", "proc", "loop", "long"])
def test_an_output_that_cannot_be_a_folder_is_bad_input(tmp_path, monkeypatch, capsys, command, kind):
    monkeypatch.chdir(tmp_path)
    shutil.copy(RING, tmp_path / "ring.py")
    (tmp_path / "afile").write_text("x")
    os.symlink("loop", tmp_path / "loop")
    value = {"file": "afile", "schedule": "ring.py", "devnull": os.devnull, "empty": "", "proc": "/proc/x/y",
             "loop": "loop", "long": "a" * 300}[kind]
    option = {"codegen": "-o", "build": "-o", "validate": "--out", "tune": "--out"}[command]
    args = {"codegen": ["codegen", "ring.py", "--ranks", "2"], "build": ["build", "ring.py", "--ranks", "2"],
            "validate": ["validate", "ring.py", "--np", "2"],
            "tune": ["tune", "ring.py", "-t", "h200x2-nv18", "--np", "2", "--sizes", "1KiB", "--dry"]}[command]
    code = main([*args, option, value])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and "internal error" not in err
    if command != "build" or kind not in ("empty",):
        assert option in err or "--out" in err, err
    assert (tmp_path / "afile").read_text() == "x"


def test_a_symlink_in_the_output_folder_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    outside = tmp_path / "outside.cu"
    os.symlink(outside, out / "ring_allreduce_nccl_2.cu")
    assert main(["codegen", str(RING), "--ranks", "2", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "symlink" in err and "-o" in err
    assert not outside.exists()


def test_write_new_refuses_a_link_made_after_the_check(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(tmp_path / "outside", out / "f.txt")
    with pytest.raises(hygiene.OutputPathError, match="symlink"):
        hygiene.write_new(str(out), str(out / "f.txt"), "x", "-o")
    assert not (tmp_path / "outside").exists()


def test_validate_that_refuses_leaves_no_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = main(["validate", str(RING), "--np", "2", "--sizes", "1KiB", "--out", "results", "--no-nccl"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert not (tmp_path / "results").exists()


# ------------------------------------------------------------------------------------ bounds
def test_run_refuses_more_ranks_than_the_machine_takes(capsys):
    assert main(["run", str(RING), "--np", "1000"]) == 2
    err = capsys.readouterr().err
    assert "1000" in err and "--max-ranks" in err


def test_codegen_refuses_hundreds_of_ranks_before_tracing(tmp_path, capsys):
    started = time.monotonic()
    assert main(["codegen", str(RING), "--ranks", "300", "-o", str(tmp_path / "o")]) == 2
    assert time.monotonic() - started < 10
    assert "--max-ranks" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


FAMILY = """
import clockworks_dist as cw
N = cw.size("N", 8)
{decl}
@cw.schedule(expect=cw.allreduce("x"), sizes=[N])
def fam(r):
    x = r.buffer("x", N)
{body}
    r.all_reduce(x)
"""


def test_tune_refuses_a_huge_family_without_listing_it(tmp_path, capsys):
    path = tmp_path / "fam.py"
    decl = "\n".join(f'P{i} = cw.param("P{i}", list(range(100)))' for i in range(6))  # 10^12 variants
    path.write_text(FAMILY.format(decl=decl, body="    pass"))
    started = time.monotonic()
    code = main(["tune", str(path), "-t", "h200x2-nv18", "--np", "2", "--sizes", "1KiB", "--dry",
                 "--out", str(tmp_path / "t")])
    assert time.monotonic() - started < 30
    err = capsys.readouterr().err
    assert code == 2, err
    assert "--max-variants" in err and "1,000,000,000,000" in err
    assert not (tmp_path / "t").exists()


def test_a_param_listing_a_huge_range_is_refused(tmp_path, capsys):
    path = tmp_path / "fam.py"
    path.write_text(FAMILY.format(decl='P = cw.param("P", range(10**12))', body="    pass"))
    assert main(["show", str(path), "--ranks", "2"]) == 2
    assert "P" in capsys.readouterr().err


def test_tune_timeout_bounds_a_variant_that_loops_while_tracing(tmp_path, capsys):
    path = tmp_path / "fam.py"
    path.write_text(FAMILY.format(decl='A = cw.choice("A", ["fast", "loop"])',
                                  body='    if A == "loop":\n        while True:\n            pass'))
    started = time.monotonic()
    code = main(["tune", str(path), "-t", "h200x2-nv18", "--np", "2", "--sizes", "1KiB", "--dry",
                 "--out", str(tmp_path / "t"), "--timeout", "2", "--json"])
    assert time.monotonic() - started < 60
    captured = capsys.readouterr()
    assert code == 0, captured.err
    report = json.loads(captured.out)
    assert [r["label"] for r in report["rejected"]] == ["A=loop"]
    assert "did not finish" in report["rejected"][0]["reason"]


# ---------------------------------------------------------------------------- JSON schedules
def _ring_json() -> dict:
    from clockworks_dist.dsl import load_file

    [defn] = load_file(str(RING))
    return json.loads(defn.trace(2).to_json())


def _mutations():
    def world(d):
        d["world"] = 3

    def peer(d):
        op = next(op for op in d["programs"][0]["ops"] if "peer" in op or op["kind"] == "group")
        target = op if "peer" in op else op["ops"][0]
        target["peer"] = 7

    def count(d):
        d["programs"][1]["buffers"][0]["count"] = -4

    def region(d):
        op = next(op for op in d["programs"][0]["ops"] if "dst" in op or op["kind"] == "group")
        target = op if "dst" in op else next(o for o in op["ops"] if "dst" in o)
        target["dst"]["stop"] = 10**6

    def numbering(d):
        d["programs"][1]["rank"] = 0

    def expect_rank(d):
        d["expect"][0]["rank"] = 9

    return {"world": world, "peer": peer, "count": count, "region": region, "numbering": numbering,
            "expect_rank": expect_rank}


@pytest.mark.parametrize("name", sorted(_mutations()))
@pytest.mark.parametrize("command", ["run", "codegen", "show"])
def test_an_inconsistent_json_schedule_is_bad_input_naming_the_file(tmp_path, capsys, name, command):
    data = _ring_json()
    _mutations()[name](data)
    path = tmp_path / "sched.json"
    path.write_text(json.dumps(data))
    args = {"run": ["run", str(path)], "codegen": ["codegen", str(path), "-o", str(tmp_path / "o")],
            "show": ["show", str(path)]}[command]
    code = main(args)
    err = capsys.readouterr().err
    if command == "show" and "sched.json" in err and code == 2:
        return  # show reads only Python files: still bad input, naming the file
    assert code == 2, err
    assert "sched.json" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_a_consistent_json_schedule_still_loads(tmp_path):
    from clockworks_dist.dsl import validate_json

    path = tmp_path / "sched.json"
    path.write_text(json.dumps(_ring_json()))
    assert validate_json.load(str(path)).world == 2


# ----------------------------------------------------------------------------------- --param
def test_a_repeated_param_is_bad_input_naming_it(tmp_path, capsys):
    path = tmp_path / "fam.py"
    path.write_text(FAMILY.format(decl='A = cw.choice("A", ["one", "two"])', body="    pass"))
    assert main(["show", str(path), "--ranks", "2", "--param", "A=one", "--param", "A=two"]) == 2
    err = capsys.readouterr().err
    assert "--param A" in err


def test_param_on_a_json_schedule_is_bad_input(tmp_path, capsys):
    path = tmp_path / "sched.json"
    path.write_text(json.dumps(_ring_json()))
    assert main(["codegen", str(path), "--param", "A=one", "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "--param A" in err and "sched.json" in err


def test_a_param_and_a_size_of_one_name_are_refused_naming_both(tmp_path, capsys):
    path = tmp_path / "fam.py"
    path.write_text(FAMILY.format(decl='NP = cw.param("N", [1, 2])', body="    pass")
                    .replace("sizes=[N])", "sizes=[N], params=[NP])"))
    assert main(["show", str(path), "--ranks", "2"]) == 2
    err = capsys.readouterr().err
    assert "'N'" in err and "cw.size" in err and "cw.param" in err


def test_run_json_under_the_users_mpiexec_prints_one_document(tmp_path):
    pytest.importorskip("mpi4py")
    mpiexec = shutil.which("mpiexec")
    if mpiexec is None:
        pytest.skip("no mpiexec")
    done = subprocess.run([mpiexec, "-n", "2", sys.executable, "-m", "clockworks_dist.cli", "run", str(RING),
                           "--json", "--timeout", "120"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO), **hygiene_env()}, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)  # one document, not each rank's line first
    assert summary["verdict"] == "match" and summary["np"] == 2


def hygiene_env() -> dict:
    from clockworks_dist.runtime.launch import NO_MULTICAST

    return dict(NO_MULTICAST)


def test_ctrl_c_while_the_command_loads_the_package_ends_quietly(tmp_path):
    """A SIGINT that lands while `python -m clockworks_dist...` (or the console script) is still
    importing the package ends it with 130 and one line, not Python's traceback of an import."""
    loading = ("import os, signal, sys, time\n"
               "sys.argv = ['-m']  # as while `python -m` locates the module\n"
               "import clockworks_dist\n"
               "os.kill(os.getpid(), signal.SIGINT)\n"
               "time.sleep(10)\n")
    done = subprocess.run([sys.executable, "-c", loading], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, stdin=subprocess.DEVNULL,
                          preexec_fn=_signals_at_default)
    assert done.returncode == 130
    assert "Traceback" not in done.stderr and "interrupted while starting" in done.stderr


def test_the_command_hands_ctrl_c_back_to_python_once_it_runs(capsys):
    import clockworks_dist

    previous = signal.signal(signal.SIGINT, clockworks_dist._stopped_while_starting)
    try:
        assert main(["check", str(RING), "--ranks", "2"]) == 0
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)
