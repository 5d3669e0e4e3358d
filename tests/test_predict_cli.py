"""`clockworks predict` and `cw.predict`: which topology file a name means (the calibrated one when
it ships), `--size NAME=VALUE`, and the bound and critical path of every size in `--json`."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest

import clockworks_dist as cw
from clockworks_dist import cli, tune
from clockworks_dist.runtime import validate
from clockworks_dist.errors import ClockworksError
from clockworks_dist.topology import choose_topology, is_calibrated, load_topology
from clockworks_dist.topology.model import DATA_DIR

ROOT = Path(__file__).resolve().parent.parent
RING = str(ROOT / "protocols" / "ring_allreduce.py")
FAMILY = str(ROOT / "protocols" / "nvshmem_allreduce_family.py")
MEASURED = DATA_DIR / "measured" / "h200x2-nv18.yaml"
# Two size symbols: N scales the main buffer x (the message size), K only the second exchange.
TWO_SIZES = """
    import clockworks_dist as cw

    N = cw.size("N", 4)
    K = cw.size("K", 4)

    @cw.schedule(ranks=(2,))
    def two_exchanges(r):
        peer = 1 - r.rank
        x = r.buffer("x", count=N, role="input")
        got = r.buffer("got", count=N, role="output")
        extra = r.buffer("extra", count=K, role="scratch")
        more = r.buffer("more", count=K, role="scratch")
        with r.group():
            r.send(peer, x)
            r.recv(peer, got)
        with r.group():
            r.send(peer, extra)
            r.recv(peer, more)
"""


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def predict_json(capsys, *args: str) -> tuple[dict, str]:
    code, out, err = run(capsys, "predict", *args, "--json")
    assert code == 0, err
    return json.loads(out), err


def times(doc: dict) -> list[float]:
    return [p["time_us"] for p in doc["predictions"]]


# ------------------------------------------------------------------------------ topology names
def test_every_shipped_file_says_whether_it_is_calibrated():
    measured = sorted((DATA_DIR / "measured").glob("*.yaml"))
    assert measured, "no calibrated topology ships"
    assert all(is_calibrated(load_topology(path)) for path in measured)
    assert not any(is_calibrated(load_topology(path)) for path in DATA_DIR.glob("*.yaml"))


def test_a_name_means_its_calibrated_file(capsys):
    sizes = ["--ranks", "2", "--sizes", "1KiB,64MiB"]
    by_name, err = predict_json(capsys, RING, "-t", "h200x2-nv18", *sizes)
    assert (by_name["topology_file"], by_name["calibrated"]) == ("measured/h200x2-nv18.yaml", True)
    assert "warning" not in err
    explicit, _ = predict_json(capsys, RING, "-t", "measured/h200x2-nv18.yaml", *sizes)
    uncalibrated, _ = predict_json(capsys, RING, "-t", "h200x2-nv18.yaml", *sizes)
    assert times(by_name) == times(explicit)
    assert times(by_name) != times(uncalibrated)  # the constants really are the calibrated ones


def test_a_name_without_a_calibrated_file_warns_and_says_how_to_calibrate(capsys):
    doc, err = predict_json(capsys, RING, "-t", "dgx-h100", "--ranks", "2", "--sizes", "1KiB")
    assert (doc["topology_file"], doc["calibrated"]) == ("dgx-h100.yaml", False)
    [line] = [line for line in err.splitlines() if "warning" in line]
    assert line.startswith("clockworks: warning: dgx-h100: predicting with the library's constants of "
                           "dgx-h100.yaml (not fitted on this machine; fitted on NVIDIA H200 only, never on H100")
    assert "clockworks calibrate -t dgx-h100 --run DIR --out FILE.yaml" in line
    code, out, err = run(capsys, "predict", RING, "-t", "dgx-h100", "--ranks", "2", "--sizes", "1KiB")
    assert code == 0 and "topology file: dgx-h100.yaml (uncalibrated" in out and "calibrate -t dgx-h100" in err


def test_the_shipped_uncalibrated_file_by_its_file_name_points_at_the_calibrated_one(capsys):
    doc, err = predict_json(capsys, RING, "-t", "h200x2-nv18.yaml", "--ranks", "2", "--sizes", "1KiB")
    assert (doc["topology_file"], doc["calibrated"]) == ("h200x2-nv18.yaml", False)
    assert "a calibrated file ships: give the name h200x2-nv18 (or measured/h200x2-nv18.yaml)" in err


def test_an_explicit_path_loads_exactly_that_file(tmp_path, capsys):
    # a copy of the uncalibrated file, named as the machine is: the path wins over the name's rule
    mine = tmp_path / "h200x2-nv18.yaml"
    text = (DATA_DIR / "h200x2-nv18.yaml").read_text()
    mine.write_text(text + "constants:\n  kernel_launch_us: 3.0\n  graph_launch_us: 9.0\n")
    doc, err = predict_json(capsys, RING, "-t", str(mine), "--ranks", "2", "--sizes", "1KiB")
    assert (doc["topology_file"], doc["calibrated"]) == (str(mine), False)
    assert f"warning: {mine}: predicting with the library's constants" in err
    assert "off by a median of" in err  # the error to expect, as the library file states it
    shipped, _ = predict_json(capsys, RING, "-t", "h200x2-nv18.yaml", "--ranks", "2", "--sizes", "1KiB")
    assert times(doc)[0] > times(shipped)[0]  # its own graph_launch_us, 9 us instead of 1
    # a calibrated file anywhere counts as calibrated: its provenance says calibrate wrote it
    copy = tmp_path / "mine-calibrated.yaml"
    shutil.copy(MEASURED, copy)
    doc, err = predict_json(capsys, RING, "-t", str(copy), "--ranks", "2", "--sizes", "1KiB")
    assert (doc["topology_file"], doc["calibrated"]) == (str(copy), True) and "warning" not in err


def test_an_unknown_name_still_lists_the_shipped_ones(capsys):
    code, _, err = run(capsys, "predict", RING, "-t", "h200x2-nv1", "--ranks", "2", "--sizes", "1KiB")
    assert code == 2 and "h200x2-nv1: no such file" in err and "did you mean 'h200x2-nv18'" in err
    assert "Traceback" not in err


def test_topology_show_tune_and_validate_follow_the_same_rule(tmp_path, capsys):
    code, out, _ = run(capsys, "topology", "show", "h200x2-nv18")
    assert code == 0 and "  file: measured/h200x2-nv18.yaml (calibrated on NVIDIA H200, " in out
    topo, note = validate.pick_topology("h200x2-nv18", 2, [])
    assert topo.model_dump() == load_topology(MEASURED).model_dump()
    assert note.startswith("h200x2-nv18, measured/h200x2-nv18.yaml (calibrated on NVIDIA H200")
    assert choose_topology("h200x2-nv18").topology.model_dump() == topo.model_dump()
    report = tune.tune(FAMILY, "h200x2-nv18", 2, [8192], str(tmp_path), dry=True)
    assert (report["topology_file"], report["calibrated"]) == ("measured/h200x2-nv18.yaml", True)


def test_tune_predicts_again_what_it_remembers_from_other_constants(tmp_path):
    said = []
    # the 2 x H200 description with constants of its own (a program step twice the fitted one)
    other = tmp_path / "other.yaml"
    other.write_text((DATA_DIR / "h200x2-nv18.yaml").read_text() + "constants:\n  program_step_us: 1.2\n")
    first = tune.tune(FAMILY, str(other), 2, [8192], str(tmp_path), dry=True, say=said.append)
    assert any("the library's constants" in line for line in said)
    again = tune.tune(FAMILY, "h200x2-nv18", 2, [8192], str(tmp_path / "fresh"), dry=True)
    reused = tune.tune(FAMILY, "h200x2-nv18", 2, [8192], str(tmp_path), dry=True)

    def ranked(report):
        return [(r["label"], r["time_us"]) for r in report["sizes"][0]["ranked"]]

    assert ranked(first) != ranked(again)
    assert ranked(reused) == ranked(again)


# ------------------------------------------------------------------------------ --size
def test_size_binds_a_symbol_that_fixes_the_message_size(capsys):
    doc, _ = predict_json(capsys, RING, "-t", "h200x2-nv18", "--ranks", "2", "--size", "CHUNK=8")
    assert doc["symbols"] == {"CHUNK": 8}
    assert [p["bytes"] for p in doc["predictions"]] == [2 * 8 * 4]  # x holds 2 * CHUNK float32 at 2 ranks
    same, _ = predict_json(capsys, RING, "-t", "h200x2-nv18", "--ranks", "2", "--sizes", "64")
    assert times(doc) == times(same)
    code, out, err = run(capsys, "predict", RING, "-t", "h200x2-nv18", "--ranks", "2", "--size", "CHUNK=8",
                         "--sizes", "1KiB")
    assert code == 2 and "Traceback" not in err
    assert ("CHUNK=8 (--size) fixes the message size, 64 bytes per rank at 2 ranks (x holds 2*CHUNK elements), "
            "and --sizes sweeps it: give one of them, not both") in err


def test_size_binds_another_symbol_through_the_sweep(tmp_path, capsys):
    path = tmp_path / "two_sizes.py"
    path.write_text(textwrap.dedent(TWO_SIZES))
    sweep = ["-t", "h200x2-nv18", "--sizes", "1KiB,1MiB"]
    small, _ = predict_json(capsys, str(path), *sweep)
    large, _ = predict_json(capsys, str(path), *sweep, "--size", "K=4194304")
    assert [p["bytes"] for p in large["predictions"]] == [1024, 1 << 20] and large["symbols"] == {"K": 4194304}
    assert all(big > little for big, little in zip(times(large), times(small)))  # 16 MiB more each time


@pytest.mark.parametrize("binding", ["CHUNK=x", "FOO=3", "CHUNK=0"])
def test_a_bad_size_is_refused_as_check_refuses_it(capsys, binding):
    code, _, check_err = run(capsys, "check", RING, "--ranks", "2", "--size", binding)
    assert code == 2
    code, _, predict_err = run(capsys, "predict", RING, "-t", "h200x2-nv18", "--ranks", "2", "--size", binding)
    assert code == 2 and "Traceback" not in predict_err
    last = predict_err.strip().splitlines()[-1]
    assert last == check_err.strip().splitlines()[-1].replace("clockworks check:", "clockworks predict:")
    assert binding.split("=")[0] in last


# ------------------------------------------------------------------------------ --json per size
def test_json_gives_every_size_its_bound_and_critical_path(capsys):
    doc, _ = predict_json(capsys, RING, "-t", "h200x2-nv18", "--ranks", "2", "--sizes", "1KiB,1MiB,256MiB")
    small, _, large = doc["predictions"]
    for p in doc["predictions"]:
        assert isinstance(p["bound"], str) and p["bound"] and p["links"]
        assert p["critical_path"][-1]["end_us"] == pytest.approx(p["time_us"], abs=1e-3)
        assert all(step["file"] == "ring_allreduce.py" for step in p["critical_path"])
    assert small["bound"].startswith("latency") and large["bound"].startswith("link bandwidth")
    assert small["critical_path"] != large["critical_path"]
    # the top level keeps the largest size's, as before
    assert (doc["bound"], doc["critical_path"], doc["links"]) == (large["bound"], large["critical_path"],
                                                                  large["links"])


# ------------------------------------------------------------------------------ cw.predict
def test_python_predict_matches_the_command_line(capsys):
    defn = cw.load_file(RING)[0]
    report = cw.predict(defn, "h200x2-nv18", ranks=2, sizes="1KiB,1MiB")
    doc, _ = predict_json(capsys, RING, "-t", "h200x2-nv18", "--ranks", "2", "--sizes", "1KiB,1MiB")
    assert [round(p.time_us, 3) for p in report.predictions] == times(doc)
    assert [p.bound for p in report.predictions] == [p["bound"] for p in doc["predictions"]]
    assert (report.topology_file, report.calibrated, report.warning) == ("measured/h200x2-nv18.yaml", True, None)
    pinned = cw.predict(defn, "dgx-h100", ranks=4, symbols={"CHUNK": 16})
    assert [p.nbytes for p in pinned.predictions] == [4 * 16 * 4] and "calibrate -t dgx-h100" in pinned.warning
    with pytest.raises(ClockworksError, match="fixes the message size"):
        cw.predict(defn, "h200x2-nv18", ranks=2, sizes=[1024], symbols={"CHUNK": 8})
    with pytest.raises(ClockworksError, match="sizes: bytes per rank"):
        cw.predict(defn, "h200x2-nv18", ranks=2, sizes=[0])
    with pytest.raises(ClockworksError, match="predict takes a schedule"):
        cw.predict(RING, "h200x2-nv18")


_DEGENERATE = ("import clockworks_dist as cw\nCHUNK = cw.size('CHUNK', 2)\n\n\n"
               "@cw.schedule(ranks=({world},))\ndef f(r):\n{body}\n")


@pytest.mark.parametrize("body", ["    r.barrier()", "    pass",
                                  "    if r.rank == 1:\n        x = r.buffer('x', count=2 * CHUNK, role='inout')"])
@pytest.mark.parametrize("world", [1, 2])
def test_predict_a_schedule_without_buffers_is_bad_input(tmp_path, capsys, body, world):
    """No buffer (on rank 0, or anywhere) was an internal error (max() of nothing)."""
    path = tmp_path / "degenerate.py"
    path.write_text(_DEGENERATE.format(world=world, body=body))
    code = cli.main(["predict", str(path), "-t", "h200x2-nv18", "--ranks", str(world), "--sizes", "1KiB"])
    err = capsys.readouterr().err
    assert "Traceback" not in err and "internal error" not in err, err
    if "buffer" not in body or world == 1:
        assert code == 2 and "degenerate.py:5" in err and "no buffer" in err, err
    else:  # rank 1 declares it: the message size is rank 1's buffer
        assert code == 0, err


@pytest.mark.parametrize("body", ["    x = r.buffer('x', count=2 * CHUNK, role='inout')",
                                  "    x = r.buffer('x', count=2 * CHUNK, role='inout')\n    if r.rank == 0:\n"
                                  "        r.fill(x, 1.0)"])
def test_predict_empty_programs_and_a_world_of_one(tmp_path, capsys, body):
    path = tmp_path / "degenerate.py"
    for world in (1, 2):
        path.write_text(_DEGENERATE.format(world=world, body=body))
        assert cli.main(["predict", str(path), "-t", "h200x2-nv18", "--ranks", str(world), "--sizes", "1KiB"]) == 0
        assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("option, value", [("--scale-nodes", "100000"), ("--scale-nodes", "513"),
                                           ("--nodes", "1000"), ("--ranks", "100000"), ("--scaling", "4097"),
                                           ("--scale-nodes", str(2**63))])
def test_predict_sizes_past_the_stated_bound_are_refused(capsys, option, value):
    """--scale-nodes 5000 simulated for as long as --timeout let it (a 600 s default)."""
    args = ["predict", RING, "-t", "dgx-h100-cluster", "--ranks", "16", "--sizes", "1KiB", option, value]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert option in err and "at most" in err, err
