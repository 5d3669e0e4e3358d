"""`clockworks tune`: variants checked, predicted and ranked per size (--dry), the memory of tries,
and the acceptance rule of the measured path (no GPU is needed here)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from clockworks_dist import cli, tune
from clockworks_dist.tune import Measurement, accept
from clockworks_dist.lowering import Build, as_built, lower

ROOT = Path(__file__).resolve().parent.parent
FAMILY = str(ROOT / "protocols" / "nvshmem_allreduce_family.py")

# A family whose "late" variant waits for a signal nobody sets before it puts: a deadlock.
BUGGY = """
import clockworks_dist as cw

CHUNK = cw.size("CHUNK", 4)
ORDER = cw.choice("ORDER", ["early", "late"])


@cw.schedule(expect=cw.allgather("x", "out"))
def buggy_family(r):
    n, me = r.world, r.rank
    x = r.symmetric("x", count=CHUNK, role="input")
    out = r.symmetric("out", count=n * CHUNK, role="output")
    ready = r.signal("ready", count=n)
    peers = [(me + k) % n for k in range(1, n)]
    r.copy(out.chunk(me, n), x)
    if ORDER == "late":
        for pe in peers:
            r.wait_until(ready[pe], "eq", 1)
    for pe in peers:
        r.put_signal(pe, out.chunk(me, n), x, ready[me])
    if ORDER == "early":
        for pe in peers:
            r.wait_until(ready[pe], "eq", 1)
"""


def run_tune(args: list[str], capsys) -> tuple[int, str, str]:
    code = cli.main(["tune", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_dry_run_ranks_the_family_per_size(tmp_path, capsys):
    out_dir = tmp_path / "results"
    code, out, err = run_tune([FAMILY, "-t", "h200x2-nv18", "--np", "2", "--sizes", "8KiB,256MiB", "--dry",
                               "--out", str(out_dir)], capsys)
    assert code == 0, err
    report = json.loads((out_dir / "tune.json").read_text())
    assert (report["schedule"], report["topology"], report["world"], report["dry"]) == (
        "nvshmem_allreduce_family", "h200x2-nv18", 2, True)
    assert report["variants"] == 2 and report["rejected"] == [] and report["skipped"] == 0
    small, large = report["sizes"]
    assert small["bytes"] == 8192 and large["bytes"] == 256 * 2**20
    for row in (small, large):
        assert sorted(r["label"] for r in row["ranked"]) == ["ALGO=oneshot", "ALGO=twoshot"]
        times = [r["time_us"] for r in row["ranked"]]
        assert times == sorted(times) and all(t > 0 for t in times)
        assert row["predicted_winner"] == row["ranked"][0] and row["winner"] is None
        assert all(r["bottleneck"] for r in row["ranked"])
    # one crossing wins at small sizes (latency), half the bytes per link at large ones
    assert small["predicted_winner"]["label"] == "ALGO=oneshot"
    assert small["predicted_winner"]["bottleneck"].startswith("latency")
    assert large["predicted_winner"]["label"] == "ALGO=twoshot"
    markdown = (out_dir / "tune.md").read_text()
    assert "## 8 KiB per rank" in markdown and "Predicted winner: ALGO=oneshot" in markdown
    assert markdown.rstrip() in out
    memory = json.loads((out_dir / tune.MEMORY_FILE).read_text())
    assert [t["variant"] for t in memory["tries"]] == [{"ALGO": "oneshot"}, {"ALGO": "twoshot"}]
    assert all(t["verdict"] == "verified" and set(t["predicted"]) == {"8192", str(256 * 2**20)}
               for t in memory["tries"])


def test_a_variant_that_fails_the_check_is_rejected_and_never_predicted(tmp_path, capsys, monkeypatch):
    path = tmp_path / "buggy.py"
    path.write_text(textwrap.dedent(BUGGY).lstrip())
    predicted = []
    real = tune.predict_variant
    monkeypatch.setattr(tune, "predict_variant",
                        lambda defn, binding, *rest, **how: predicted.append(binding) or real(defn, binding, *rest,
                                                                                              **how))
    out_dir = tmp_path / "results"
    code, out, err = run_tune([str(path), "-t", "h200x2-nv18", "--np", "2", "--sizes", "4KiB", "--dry",
                               "--out", str(out_dir)], capsys)
    assert code == 0, err
    assert predicted == [{"ORDER": "early"}]
    report = json.loads((out_dir / "tune.json").read_text())
    [rejected] = report["rejected"]
    assert rejected["variant"] == {"ORDER": "late"} and rejected["verdict"] == "violated"
    assert rejected["reason"].startswith("violated: deadlock")
    assert [r["label"] for r in report["sizes"][0]["ranked"]] == ["ORDER=early"]
    assert "ORDER=late: rejected, violated: deadlock" in err
    assert "## Rejected by the checker" in out and "- ORDER=late: violated: deadlock" in out
    memory = json.loads((out_dir / tune.MEMORY_FILE).read_text())
    late = next(t for t in memory["tries"] if t["variant"] == {"ORDER": "late"})
    assert late["status"] == "rejected" and late["predicted"] == {} and late["measured"] == {}


@pytest.mark.parametrize("fuse", [False, True])
def test_the_memory_keeps_runs_of_calls_apart_by_how_they_launch_and_reuses_each(tmp_path, fuse):
    first = tune.tune(FAMILY, "h200x2-nv18", 2, [8192], str(tmp_path), dry=True, calls=2, fuse_calls=fuse)
    again = tune.tune(FAMILY, "h200x2-nv18", 2, [8192], str(tmp_path), dry=True, calls=2, fuse_calls=fuse)
    assert first["skipped"] == 0 and again["skipped"] == again["variants"] == 2
    # the other way of launching the calls is another measurement: nothing of it is reused
    other = tune.tune(FAMILY, "h200x2-nv18", 2, [8192], str(tmp_path), dry=True, calls=2, fuse_calls=not fuse)
    assert other["skipped"] == 0
    tries = json.loads((tmp_path / tune.MEMORY_FILE).read_text())["tries"]
    assert sorted(t["fuse_calls"] for t in tries) == [False, False, True, True]


def test_the_memory_makes_a_rerun_skip_decided_variants(tmp_path, capsys, monkeypatch):
    path = tmp_path / "buggy.py"
    path.write_text(textwrap.dedent(BUGGY).lstrip())
    out_dir = tmp_path / "results"
    args = [str(path), "-t", "h200x2-nv18", "--np", "2", "--sizes", "4KiB", "--dry", "--out", str(out_dir)]
    assert run_tune(args, capsys)[0] == 0
    first = json.loads((out_dir / "tune.json").read_text())

    def fail(*_args, **_kwargs):
        raise AssertionError("a decided variant was checked or predicted again")

    monkeypatch.setattr(tune, "check_variant", fail)
    monkeypatch.setattr(tune, "predict_variant", fail)
    code, _out, err = run_tune(args, capsys)
    assert code == 0, err
    again = json.loads((out_dir / "tune.json").read_text())
    assert again["skipped"] == 2 and again["sizes"] == first["sizes"] and again["rejected"] == first["rejected"]
    assert "ORDER=late: already rejected (tune memory)" in err
    # a new size: the verified variant is predicted there only, the rejected one stays decided
    predicted = []
    monkeypatch.setattr(tune, "predict_variant", lambda defn, binding, topo, world, sizes, mode, *calls, **how:
                        predicted.append((binding, sizes)) or {str(n): {"time_us": 1.0, "busbw_GBs": 1.0,
                                                                        "bottleneck": "latency"} for n in sizes})
    assert run_tune(args[:-4] + ["4KiB,8KiB", "--dry", "--out", str(out_dir)], capsys)[0] == 0
    assert predicted == [({"ORDER": "early"}, [8192])]
    # an edited file is a new family: nothing is reused
    path.write_text(path.read_text() + "\n# edited\n")
    monkeypatch.undo()
    assert run_tune(args, capsys)[0] == 0
    assert json.loads((out_dir / "tune.json").read_text())["skipped"] == 0


def test_without_dry_it_refuses_when_no_gpu_is_visible(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(tune, "gpus_visible", lambda: 0)
    code, _out, err = run_tune([FAMILY, "-t", "h200x2-nv18", "--np", "2", "--sizes", "8KiB",
                                "--out", str(tmp_path)], capsys)
    assert code == 2
    assert "no GPU visible: use --dry" in err
    assert not (tmp_path / tune.MEMORY_FILE).exists()


def test_measured_path_accepts_only_above_the_noise(tmp_path, monkeypatch, capsys):
    """The measured path with `measure` replaced by fake measurements: the top K are measured in
    predicted order and the winner is the one `accept` keeps."""
    monkeypatch.setattr(tune, "gpus_visible", lambda: 2)
    fake = {"oneshot": {"verdict": "match", "time_us": 3.0, "spread": 0.01},
            "twoshot": {"verdict": "match", "time_us": 2.97, "spread": 0.01}}  # 1% faster: noise
    calls = []

    def measure(path, defn, binding, world, sizes, topology, out_dir, timeout, k=1, between="barrier", packets=0,
                fuse_calls=False):
        assert packets == 0
        calls.append((binding["ALGO"], tuple(sizes)))
        return {str(n): dict(fake[binding["ALGO"]], nccl_us=6.5) for n in sizes}

    monkeypatch.setattr(tune, "measure", measure)
    report = tune.tune(FAMILY, "h200x2-nv18", 2, [8192, 65536], str(tmp_path), top=2, dry=False)
    assert sorted(calls) == [("oneshot", (8192, 65536)), ("twoshot", (8192, 65536))]  # one build and run per variant
    winner = report["sizes"][0]["winner"]
    assert winner["label"] == "ALGO=oneshot" and winner["time_us"] == 3.0 and winner["predicted_us"] > 0
    memory = json.loads((tmp_path / tune.MEMORY_FILE).read_text())
    decisions = {t["variant"]["ALGO"]: t["measured"]["8192"]["decision"] for t in memory["tries"]}
    assert decisions["oneshot"].startswith("accepted: the first measured variant")
    assert decisions["twoshot"].startswith("not accepted: +1.0% against the best so far")
    text = (tmp_path / "tune.md").read_text()
    assert "Measured winner: ALGO=oneshot, 3.00 us" in text and "NCCL's own collective 6.50 us, 2.17x" in text
    assert "- ALGO=twoshot: 2.97 us, not accepted: +1.0% against the best so far" in text
    calls.clear()
    tune.tune(FAMILY, "h200x2-nv18", 2, [8192, 65536], str(tmp_path), top=2, dry=False)
    assert calls == []  # measured before: taken from the memory


@pytest.mark.parametrize("best, candidate, noise, taken", [
    (None, Measurement(5.0), 0.02, True),
    (Measurement(10.0), Measurement(9.0), 0.02, True),    # 10% faster
    (Measurement(10.0), Measurement(9.9), 0.02, False),   # 1%: under the 2% threshold
    (Measurement(10.0), Measurement(9.75), 0.02, True),   # 2.5%: above the threshold
    (Measurement(10.0), Measurement(11.0), 0.02, False),  # slower
    (Measurement(10.0, spread=0.08), Measurement(9.5), 0.02, False),  # 5% faster, but the runs spread 8%
    (Measurement(10.0), Measurement(9.5, spread=0.06), 0.02, False),  # the candidate's own spread counts
    (Measurement(10.0, spread=0.01), Measurement(9.0, spread=0.03), 0.02, True),
    (Measurement(10.0), Measurement(9.6), 0.05, False),   # --noise 0.05
])
def test_accept(best, candidate, noise, taken):
    accepted, why = accept(best, candidate, noise)
    assert accepted is taken
    assert why


def test_bad_options_are_bad_input(tmp_path, capsys):
    assert run_tune([FAMILY, "-t", "h200x2-nv18", "--np", "4", "--dry", "--out", str(tmp_path)], capsys)[0] == 2
    assert run_tune([FAMILY, "-t", "h200x2-nv18", "--np", "2", "--sizes", "lots", "--dry",
                     "--out", str(tmp_path)], capsys)[0] == 2
    code, _out, err = run_tune([FAMILY, "-t", "h200x2-nv18", "--np", "2", "--noise", "2", "--dry"], capsys)
    assert code == 2 and "expected a fraction in [0, 1)" in err


def test_calls_pick_the_cheapest_separator_the_checker_verifies(tmp_path):
    """--calls 20 --dry: one-shot needs two alternating copies of its scratch and signal words
    (with nothing at all between calls the checker finds a deadlock), two-shot needs nothing; both
    are predicted per call, and the memory keeps what the checker said of each separator tried."""
    report = tune.tune(FAMILY, "h200x2-nv18", 2, [8192], str(tmp_path), dry=True, calls=20)
    labels = [row["label"] for row in report["sizes"][0]["ranked"]]
    assert sorted(labels) == ["ALGO=oneshot (alternate between calls)", "ALGO=twoshot (none between calls)"]
    memory = json.loads((tmp_path / tune.MEMORY_FILE).read_text())
    said = {t["variant"]["ALGO"]: t["separators"] for t in memory["tries"]}
    assert said["oneshot"]["none"].startswith("violated: deadlock") and said["oneshot"]["alternate"] == "verified"
    assert "sync" not in said["oneshot"]  # a costlier separator is not tried once a cheaper one is verified
    assert said["twoshot"] == {"none": "verified"}
    assert all(t["calls"] == 20 for t in memory["tries"])
    one = tune.tune(FAMILY, "h200x2-nv18", 2, [8192], str(tmp_path), dry=True)  # one call: other memory keys
    assert one["skipped"] == 0 and len(json.loads((tmp_path / tune.MEMORY_FILE).read_text())["tries"]) == 4
    per_call = {row["label"].split(" ")[0]: row["time_us"] for row in report["sizes"][0]["ranked"]}
    single = {row["label"]: row["time_us"] for row in one["sizes"][0]["ranked"]}
    # what each predicts is what validate would measure: the generated program's timed run, per call
    # (its launch and closing barrier included); 20 calls launch a kernel per call
    from clockworks_dist.dsl import load_file, params
    from clockworks_dist.perf.predict import size_binding
    from clockworks_dist.perf.program import program_us
    from clockworks_dist.lowering.repeat import call_starts, repeat
    from clockworks_dist.topology import choose_topology

    topo = choose_topology("h200x2-nv18").topology
    [defn] = load_file(FAMILY)
    memory = json.loads((tmp_path / tune.MEMORY_FILE).read_text())
    assert {t["predicted_as"] for t in memory["tries"]} == {"nvshmem program"}
    for algo, between in (("oneshot", "alternate"), ("twoshot", "none")):
        with params.bind({"ALGO": algo}):
            sched = defn.trace(2, sizes=size_binding(defn, 2, 8192, None, defn.trace(2)))
        assert single[f"ALGO={algo}"] == pytest.approx(program_us(lower(sched, Build("nvshmem")), topo, "graph"),
                                                       abs=1e-3)
        # the K-call schedule built by hand, a kernel per call where each call begins
        twenty = program_us(as_built(repeat(sched, 20, between), Build("nvshmem", 20, between),
                                     call_starts(sched, 20, between)), topo, "graph", calls=20)
        assert per_call[f"ALGO={algo}"] == pytest.approx(twenty, abs=1e-3)
        assert per_call[f"ALGO={algo}"] < single[f"ALGO={algo}"]  # the run's own costs shared by 20 calls
    assert "the generated NVSHMEM program's timed run" in (tmp_path / "tune.md").read_text()
    tune.tune(FAMILY, "h200x2-nv18", 2, [8192], str(tmp_path), dry=True, calls=20)  # written again, from memory
    text = (tmp_path / "tune.md").read_text()
    assert "Each variant runs 20 back-to-back calls per run" in text and "(alternate between calls)" in text


def test_packets_are_a_lowering_of_each_variant_checked_as_rewritten(tmp_path, monkeypatch):
    """--packets 32KiB: each variant is a second candidate, the packets rewrite of it. The checker sees
    the rewritten schedule (its packet areas), and the candidate takes part only at the sizes where
    something is lowered: one-shot sends the whole 1 MiB in one put_signal, above the limit."""
    import importlib

    check_mod = importlib.import_module("clockworks_dist.check")
    checked = []
    real = check_mod.check

    def spy(sched, **kwargs):
        checked.append(sorted(b.name for b in sched.programs[0].buffers if b.role == "packets"))
        return real(sched, **kwargs)

    monkeypatch.setattr(check_mod, "check", spy)
    report = tune.tune(FAMILY, "h200x2-nv18", 2, [8192, 1 << 20], str(tmp_path), dry=True, calls=4,
                       packets=[32768])
    assert report["variants"] == 4 and report["rejected"] == [] and report["packets"] == [32768]
    assert any(names for names in checked) and any(not names for names in checked)
    small, large = (row["ranked"] for row in report["sizes"])
    assert sorted(r["label"] for r in small) == [
        "ALGO=oneshot (alternate between calls)", "ALGO=oneshot, packets <= 32 KiB (alternate between calls)",
        "ALGO=twoshot (none between calls)", "ALGO=twoshot, packets <= 32 KiB (none between calls)"]
    assert sorted(r["label"] for r in large) == ["ALGO=oneshot (alternate between calls)",
                                                 "ALGO=twoshot (none between calls)"]
    memory = json.loads((tmp_path / tune.MEMORY_FILE).read_text())
    lowered = {t["variant"]["ALGO"]: t for t in memory["tries"] if t.get("packets")}
    assert lowered["oneshot"]["not_lowered"] == [1 << 20] and set(lowered["oneshot"]["predicted"]) == {"8192"}
    assert lowered["twoshot"]["not_lowered"] == [1 << 20]  # 512 KiB per put_signal: above the limit too
    assert lowered["oneshot"]["between"] == "alternate"  # the rewritten K-call schedule, checked per separator
    text = (tmp_path / "tune.md").read_text()
    assert "sent as flag-in-data packets (`--packets`)" in text and "the measurements decide" in text
    again = tune.tune(FAMILY, "h200x2-nv18", 2, [8192, 1 << 20], str(tmp_path), dry=True, calls=4,
                      packets=[32768])
    assert again["skipped"] == 4  # a size where nothing is lowered counts as decided


def test_each_lowering_has_its_own_top_k_and_the_measurement_decides(tmp_path, monkeypatch):
    """Each lowering is ranked on its own, so with --top 1 the best of each lowering is measured, and
    the measurement decides: here the plain candidate wins on its measured time although the packets
    one is predicted faster (the packets model is not fitted)."""
    monkeypatch.setattr(tune, "gpus_visible", lambda: 2)
    measured = []

    def measure(path, defn, binding, world, sizes, topology, out_dir, timeout, k=1, between="barrier", packets=0,
                fuse_calls=False):
        measured.append((binding["ALGO"], packets, tuple(sizes)))
        time = 5.1 if packets else 3.7
        return {str(n): {"verdict": "match", "time_us": time, "spread": 0.01, "nccl_us": 6.5} for n in sizes}

    monkeypatch.setattr(tune, "measure", measure)
    report = tune.tune(FAMILY, "h200x2-nv18", 2, [8192], str(tmp_path), top=1, dry=False, calls=4,
                       packets=[32768])
    assert sorted(measured) == [("oneshot", 0, (8192,)), ("oneshot", 32768, (8192,))]
    row = report["sizes"][0]
    assert row["predicted_winner"]["packets"] == 32768  # predicted: one crossing instead of three
    assert row["winner"]["packets"] == 0 and row["winner"]["time_us"] == 3.7
    assert row["winner"]["label"] == "ALGO=oneshot (alternate between calls)"
    assert [t["label"].split(" (")[0] for t in row["tried"]] == ["ALGO=oneshot, packets <= 32 KiB", "ALGO=oneshot"]


def test_packets_option_needs_sizes_above_zero(tmp_path, capsys):
    code, _out, err = run_tune([FAMILY, "-t", "h200x2-nv18", "--np", "2", "--packets", "0", "--dry",
                                "--out", str(tmp_path)], capsys)
    assert code == 2 and "one or more sizes above 0" in err
    code, out, err = run_tune([FAMILY, "-t", "h200x2-nv18", "--np", "2", "--sizes", "8KiB", "--packets", "16KiB",
                               "--dry", "--out", str(tmp_path)], capsys)
    assert code == 0, err
    assert "ALGO=oneshot, packets <= 16 KiB" in out
