"""Bad topology files and bad `predict` / `calibrate` / `topology` options: each is a clean error (exit
2, the file named, with its line and field path where there is one), never a traceback (exit 4) and
never a hang. One section per family the user study found; the last one mutates the shipped files."""

from __future__ import annotations

import contextlib
import json
import random
import re
import signal
import time
from pathlib import Path

import pytest

from clockworks_dist import cli, load_file
from clockworks_dist.errors import ClockworksError, TopologyError
from clockworks_dist.perf import predict as perf_predict
from clockworks_dist.perf.predict import predict_sizes
from clockworks_dist.perf.simulate import PredictError
from clockworks_dist.topology import gpus, load_topology, summary, to_dot

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "clockworks_dist" / "topology" / "data"
RING = str(ROOT / "protocols" / "ring_allreduce.py")
TWO_GPUS = (DATA / "h200x2-nv18.yaml").read_text()
MEASURED = (DATA / "measured" / "h200x2-nv18.yaml").read_text()
FABRIC = ("fabric: {rails: 1, spines: 1, nic_link: {kind: ib, GBs_per_dir: 50, latency_us: 0.6}, "
          "uplink: {kind: ib, GBs_per_dir: 50, latency_us: 0.3}}\n")


@contextlib.contextmanager
def deadline(seconds: float):
    """Fail, instead of hanging the suite, if the block takes longer than `seconds`."""
    def expired(*_):
        raise TimeoutError(f"did not finish in {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def clockworks(capsys, *argv: str, seconds: float = 60) -> tuple[int, str]:
    """Run the CLI in-process: (exit code, stdout and stderr together)."""
    with deadline(seconds):
        code = cli.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def assert_bad_input(code: int, text: str, *fragments: str) -> None:
    assert code == 2, text
    assert "Traceback" not in text and "internal error" not in text, text
    for fragment in fragments:
        assert fragment in text, text


def both_commands(capsys, path: Path, *fragments: str) -> None:
    """`topology show FILE` and `predict ... -t FILE` both refuse the file, naming it."""
    for argv in (("topology", "show", path), ("predict", RING, "-t", path, "--ranks", "2", "--sizes", "1KiB")):
        code, text = clockworks(capsys, *argv)
        assert_bad_input(code, text, f"{path}", *fragments)


def write(tmp_path: Path, text: str | bytes, name: str = "topo.yaml") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def measured_with(tmp_path: Path, old: str, new: str) -> Path:
    """The calibrated 2 x H200 file with one value changed."""
    assert old in MEASURED, old
    return write(tmp_path, MEASURED.replace(old, new, 1))


def line_of(text: str, old: str) -> int:
    return text[:text.index(old)].count("\n") + 1


# ------------------------------------------------------------------ 1. unreadable files
def test_non_utf8_bytes_name_file_and_line(tmp_path, capsys):
    path = write(tmp_path, TWO_GPUS.encode().replace(b"description: 2 x H200", b"description: 2 x H\xff200"))
    line = line_of(TWO_GPUS, "description: 2 x H200")
    both_commands(capsys, path, f"{path}:{line}: not UTF-8 text: byte 0xff", "save the file as UTF-8")


@pytest.mark.parametrize("date", ["2026-13-45", "2026-02-30", "0000-01-01", "tomorrow"])
def test_invalid_date_is_a_field_error(tmp_path, capsys, date):
    path = write(tmp_path, TWO_GPUS.replace("date: 2026-11-21", f"date: {date}"))
    line = line_of(TWO_GPUS, "date: 2026-11-21")
    both_commands(capsys, path, f"{path}:{line}: provenance.date: not a date", "write YYYY-MM-DD")


def test_valid_date_still_reads_as_a_date():
    assert str(load_topology("h200x2-nv18").provenance.date) == "2026-11-21"


@pytest.mark.parametrize("text", ["[" * 100_000, "a:\n" + "".join(" " * i + "- \n" for i in range(1, 3000)),
                                  "{a: " * 50_000])
def test_deep_nesting_is_refused_before_parsing_recursively(tmp_path, capsys, text):
    # The contract: exit 2, the file named, no traceback and no hang (`deadline`). Which check says
    # so first, ours (MAX_DEPTH) or the YAML parser's own depth limit (PyYAML >= 6.0.4), is theirs.
    path = write(tmp_path, text)
    both_commands(capsys, path, f"{path}:")


def test_aliases_that_expand_to_billions_are_refused(tmp_path, capsys):
    levels = ["a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    path = write(tmp_path, "\n".join(levels) + "\nname: bomb\ndevices: *a9\nlinks: []\n")
    both_commands(capsys, path, "values (aliases expanded)")


@pytest.mark.parametrize("text, fragment", [
    ("", "the file is empty"),
    ("name: x\nnodes: " + "9" * 5000 + "\n", "cannot read this value"),
    ("- just\n- a list\n", "expected a mapping"),
    ("name: x\ndevices: !!python/object:os.system {}\n", "not valid YAML"),
])
def test_other_unreadable_files(tmp_path, capsys, text, fragment):
    both_commands(capsys, write(tmp_path, text), fragment)


def test_template_naming_itself(tmp_path, capsys):
    path = write(tmp_path, f"name: loop\nnode: loop.yaml\n{FABRIC}", "loop.yaml")
    both_commands(capsys, path, f"{path}:2: node: 'loop.yaml' is this template itself")


def test_templates_naming_each_other(tmp_path, capsys):
    write(tmp_path, f"name: b\nnode: a.yaml\n{FABRIC}", "b.yaml")
    path = write(tmp_path, f"name: a\nnode: b.yaml\n{FABRIC}", "a.yaml")
    both_commands(capsys, path, f"{path}:2: node: b.yaml (", "is a cluster template too")


def test_template_naming_a_missing_node(tmp_path, capsys):
    path = write(tmp_path, f"name: a\nnode: dgx-h10\n{FABRIC}", "a.yaml")
    both_commands(capsys, path, f"{path}:2: node: dgx-h10: no such file", "did you mean 'dgx-h100'?")


def test_self_link_names_its_field(tmp_path, capsys):
    path = write(tmp_path, TWO_GPUS.replace("{a: gpu0, b: gpu1, kind: nvlink", "{a: gpu0, b: gpu0, kind: nvlink"))
    line = line_of(TWO_GPUS, "{a: gpu0, b: gpu1, kind: nvlink")
    both_commands(capsys, path, f"{path}:{line}: links[0].b: a link joins two different devices, not gpu0 to itself")


# ------------------------------------------------------------------ 2. non-finite and absurd numbers
@pytest.mark.parametrize("old, new, fragment", [
    ("latency_us: 0.77", "latency_us: .inf", "links[0].latency_us: must be a finite number, got inf"),
    ("latency_us: 0.77", "latency_us: 1e300", "links[0].latency_us: must be <= 1e+06 us"),
    ("latency_us: 0.77", "latency_us: -1", "links[0].latency_us: must be >= 0, got -1"),
    ("GBs_per_dir: 478.116", "GBs_per_dir: 1e-300", "links[0].GBs_per_dir: must be at least 0.001 GB/s"),
    ("GBs_per_dir: 478.116", "GBs_per_dir: .nan", "links[0].GBs_per_dir: must be a finite number, got nan"),
    ("GBs_per_dir: 478.116", "GBs_per_dir: 1e300", "links[0].GBs_per_dir: must be <= 1e+06 GB/s"),
    ("lanes: 18", "lanes: 1000000000", "links[0].lanes: must be <= 10000"),
    ("nccl_max_channels: 24", "nccl_max_channels: 1000000000",
     "constants.nccl_max_channels: must be <= 256, got 1000000000 (NCCL's own MAXCHANNELS is 32 or 64"),
    ("nccl_p2p_max_channels: 32", "nccl_p2p_max_channels: 0", "constants.nccl_p2p_max_channels: must be >= 1"),
    ("graph_launch_us: 4.3359", "graph_launch_us: -4.3359", "constants.graph_launch_us: must be >= 0"),
    ("all_reduce: 0.9612", "all_reduce: -100", "constants.nccl_kind_base_us.all_reduce: must be >= 0"),
    ("all_reduce: 0.718", "all_reduce: -1", "constants.nccl_kind_efficiency.all_reduce: must be >= 0.01"),
    ("all_reduce: 0.6528", "all_reduce: 7", "constants.nccl_kind_link_efficiency.all_reduce: must be <= 1"),
    ("nvlink_reverse_share: 0.0051", "nvlink_reverse_share: .inf",
     "constants.nvlink_reverse_share: must be a finite number"),
    ("compute_us: 0.0", "compute_us: -1", "constants.compute_us: must be >= 0"),
    ("nccl_exchange_ramp: 0.7909", "nccl_exchange_ramp: 0", "constants.nccl_exchange_ramp: must be >= 0.01"),
    ("float16: 989", "float16: -989", "devices[0].peak_tflops.float16: must be > 0"),
    ("float16: 989", "float16: 1.0e+9", "devices[0].peak_tflops.float16: must be <= 1e+06 TFLOP/s, got 1000000000.0 "
                                     "(far beyond any GPU)"),
    ("hbm_GBs: 4800", "hbm_GBs: 1e-300", "devices[0].hbm_GBs: must be at least 0.001 GB/s"),
    ("l2_MiB: 50", "l2_MiB: -50", "devices[0].l2_MiB: must be > 0"),
    ("l2_GBs: 8374.0", "l2_GBs: 0", "constants.l2_GBs: must be > 0, got 0"),
    ("sms: 132", "sms: 1e9", "devices[0].sms: must be a valid integer"),
    ("sms: 132", "sms: true", "devices[0].sms: must be a number, not true or false"),
    ("GBs_per_dir: 478.116", "GBs_per_dir: false", "links[0].GBs_per_dir: must be a number, not true or false"),
    ("nccl_max_channels: 24", "nccl_max_channels: true", "constants.nccl_max_channels: must be a number, not"),
])
def test_numbers_out_of_any_real_range_are_field_errors(tmp_path, capsys, old, new, fragment):
    path = measured_with(tmp_path, old, new)
    both_commands(capsys, path, f"{path}:{line_of(MEASURED, old)}: {fragment}")


def test_simulator_refuses_to_spin_on_numbers_the_schema_would_refuse():
    """Defence in depth: a topology built in code, past validation, with a rate of 1e-300 GB/s or a
    latency of 1e300 us, ends in a clear PredictError instead of an event loop that never advances."""
    base = load_topology("h200x2-nv18")
    ring = load_file(RING)[0]
    for update in ({"GBs_per_dir": 1e-300}, {"latency_us": 1e300}, {"latency_us": float("inf")}):
        links = (base.links[0].model_copy(update=update),) + base.links[1:]
        topo = base.model_copy(update={"links": links})
        object.__setattr__(topo, "__pydantic_private__", {"_index": dict(base._index), "_cache": {}})
        with deadline(20), pytest.raises(PredictError, match="simulated time passed 1e\\+13 us"):
            predict_sizes(ring, topo, 2, [1024])


def test_valid_extremes_still_predict(tmp_path):
    """The bounds leave every real machine inside: the slowest allowed link finishes promptly."""
    path = measured_with(tmp_path, "GBs_per_dir: 478.116", "GBs_per_dir: 0.001")
    with deadline(60):
        result = predict_sizes(load_file(RING)[0], load_topology(path), 2, [1024, 1 << 20])
    assert all(p.time_us > 0 for p in result)


# ------------------------------------------------------------------ 3. zero rates are bad input, not deadlocks
@pytest.mark.parametrize("old, new, field", [
    ("LL: 20.5291", "LL: 0", "constants.nccl_channel_GBs.LL: must be > 0, got 0"),
    ("Simple: 30.3145", "Simple: 0", "constants.nccl_channel_GBs.Simple: must be > 0, got 0"),
    ("GBs_per_dir: 478.116", "GBs_per_dir: 0", "links[0].GBs_per_dir: must be > 0, got 0"),
    ("nvshmem_block_GBs: 41.53", "nvshmem_block_GBs: 0", "constants.nvshmem_block_GBs: must be > 0, got 0"),
    ("nccl_copy_channel_GBs: 1000.0", "nccl_copy_channel_GBs: 0", "constants.nccl_copy_channel_GBs: must be > 0"),
    ("nvshmem_link_efficiency: 0.7485", "nvshmem_link_efficiency: 0", "nvshmem_link_efficiency: must be >= 0.01"),
    ("p2p: 0.7631", "p2p: 0", "constants.nccl_kind_link_efficiency.p2p: must be >= 0.01"),
    ("hbm_GBs: 4800", "hbm_GBs: 0", "devices[0].hbm_GBs: must be > 0, got 0"),
])
def test_zero_rates_are_field_errors_not_deadlocks(tmp_path, capsys, old, new, field):
    path = measured_with(tmp_path, old, new)
    code, text = clockworks(capsys, "predict", RING, "-t", path, "--ranks", "2", "--sizes", "1KiB..1MiB")
    assert_bad_input(code, text, str(path), field)
    assert "deadlock" not in text


def test_a_rate_of_zero_past_validation_is_not_called_a_deadlock():
    base = load_topology("h200x2-nv18")
    channels = base.constants.nccl_channel_GBs.model_copy(update={"LL": 0.0, "LL128": 0.0, "Simple": 0.0})
    topo = base.model_copy(update={"constants": base.constants.model_copy(update={"nccl_channel_GBs": channels})})
    object.__setattr__(topo, "__pydantic_private__", {"_index": dict(base._index), "_cache": {}})
    with deadline(20), pytest.raises(PredictError, match="never finish: their rate is 0") as info:
        predict_sizes(load_file(RING)[0], topo, 2, [1024])
    assert "deadlock" not in str(info.value)


# ------------------------------------------------------------------ 4. large clusters
def test_thousand_node_cluster_summary_is_fast(capsys):
    started = time.perf_counter()
    code, text = clockworks(capsys, "topology", "show", "dgx-h100-cluster", "--nodes", "1000", seconds=120)
    elapsed = time.perf_counter() - started
    assert code == 0 and "1000 nodes, 8000 GPUs" in text
    assert elapsed < 30, f"{elapsed:.1f} s (about 2 s on an idle core; it was 45 s)"


@pytest.mark.parametrize("nodes", ["6000", "100000", "99999999"])
def test_too_many_nodes_is_refused_before_expanding(capsys, nodes):
    code, text = clockworks(capsys, "topology", "show", "dgx-h100-cluster", "--nodes", nodes, seconds=10)
    assert_bad_input(code, text, "dgx-h100-cluster.yaml")
    assert "at most 500,000 are supported" in text or "a cluster has 1 to 100,000 nodes" in text


def test_template_with_too_many_nodes_names_the_field(tmp_path, capsys):
    path = write(tmp_path, f"name: big\nnodes: 90000\nnode: dgx-h100\n{FABRIC}".replace("rails: 1", "rails: 8"))
    code, text = clockworks(capsys, "topology", "show", path, seconds=10)
    assert_bad_input(code, text, f"{path}:2: nodes: 90,000 nodes of dgx-h100", "use at most")


def test_png_of_a_large_cluster_is_refused(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    code, text = clockworks(capsys, "topology", "show", "dgx-h100-cluster", "--nodes", "100", "--png",
                            tmp_path / "big.png", seconds=60)
    assert_bad_input(code, text, "a drawing of more than 2,000 is unreadable")


# ------------------------------------------------------------------ 5. unwritable outputs, found before the work
@pytest.fixture
def no_simulation(monkeypatch):
    """predict must refuse the command line before it simulates anything."""
    def refuse(*args, **kwargs):
        raise AssertionError("the simulation ran before the bad option was reported")

    monkeypatch.setattr(perf_predict, "predict_sizes", refuse)


@pytest.mark.parametrize("option", ["--trace", "--plot"])
def test_output_in_a_missing_folder(capsys, tmp_path, monkeypatch, no_simulation, option):
    monkeypatch.chdir(tmp_path)
    code, text = clockworks(capsys, "predict", RING, "-t", "h200x2-nv18", "--ranks", "2", option, "nodir/x.png")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        if option == "--plot":  # without matplotlib, that is what is wrong
            assert_bad_input(code, text, "pip install 'clockworks-dist[plot]'")
            return
    assert_bad_input(code, text, "cannot write nodir/x.png: No such file or directory", option)
    assert not (tmp_path / "nodir").exists()


def test_trace_onto_a_folder_or_a_file_as_folder(capsys, tmp_path, no_simulation):
    (tmp_path / "file").write_text("")
    for target, reason in ((tmp_path, "Is a directory"), (tmp_path / "file" / "x.json", "Not a directory")):
        code, text = clockworks(capsys, "predict", RING, "-t", "h200x2-nv18", "--ranks", "2", "--trace", target)
        assert_bad_input(code, text, f"cannot write {target}: {reason}")


def test_trace_check_leaves_no_file_behind(capsys, tmp_path):
    target = tmp_path / "t.json"
    code, text = clockworks(capsys, "predict", RING, "-t", "h200x2-nv18", "--ranks", "2", "--sizes", "1KiB..",
                            "--trace", target)
    assert_bad_input(code, text, "--sizes")
    assert not target.exists()
    code, _ = clockworks(capsys, "predict", RING, "-t", "h200x2-nv18", "--ranks", "2", "--sizes", "1KiB",
                         "--trace", target)
    assert code == 0 and json.loads(target.read_text())["traceEvents"]


def test_plot_with_an_unknown_format(capsys, tmp_path, no_simulation):
    pytest.importorskip("matplotlib")
    code, text = clockworks(capsys, "predict", RING, "-t", "h200x2-nv18", "--ranks", "2", "--plot",
                            tmp_path / "x.xyz")
    assert_bad_input(code, text, "cannot tell the image format from the name; end it in .png")


def test_calibrate_out_onto_a_folder(capsys, tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "calibration_raw.jsonl").write_text("")
    code, text = clockworks(capsys, "calibrate", "-t", "h200x2-nv18", "--raw", raw, "--out", tmp_path)
    assert_bad_input(code, text, f"cannot write {tmp_path}: Is a directory (--out)")


# ------------------------------------------------------------------ 6. out-of-range option values
@pytest.mark.parametrize("sizes, fragment", [
    ("-1", "cannot read size '-1'"), ("nan", "cannot read size 'nan'"), ("inf", "cannot read size 'inf'"),
    ("1KiB..0", "is empty"), ("garbage", "cannot read size"), ("", "no positive sizes"), (",", "no positive sizes"),
    ("0", "no positive sizes"), ("1e3", "cannot read size"), ("1.1KiB", "not a whole number of bytes (1126.4)"),
    ("0.5", "not a whole number of bytes"), ("2TiB", "more than 1TiB per rank"), ("9" * 5000, "more than 1TiB"),
    ("99999999999999999999999GiB", "more than 1TiB"), ("1KiB..", "cannot read size ''"),
    ("..1KiB", "cannot read size ''"), ("1KiB...4KiB", "cannot read size '.4KiB'"), ("0x10", "cannot read size"),
    ("-4KiB..4KiB", "cannot read size '-4KiB'"), ("1GiB..1KiB", "is empty"), ("4;8", "cannot read size"),
    ("\u0664", "cannot read size"), (",".join(["4KiB"] * 101), "101 sizes in one sweep; at most 100"),
    ("3", "3 bytes is not a whole number of float32 elements"), ("1..1KiB", "1 bytes is not a whole number"),
    ("1004", "1004 bytes is not reachable"),
])
def test_hostile_sizes(capsys, sizes, fragment):
    code, text = clockworks(capsys, "predict", RING, "-t", "h200x2-nv18", "--ranks", "2", f"--sizes={sizes}",
                            seconds=30)
    assert_bad_input(code, text, fragment)


@pytest.mark.parametrize("argv, fragment", [
    (["--ranks", "0"], "expected a positive integer"),
    (["--ranks", "-3"], "expected a positive integer"),
    (["--ranks", "nan"], "expected a positive integer"),
    (["--ranks", "1e9"], "expected a positive integer"),
    (["--ranks", "99999999999"],
     "argument --ranks: 99,999,999,999 ranks is more than predict simulates (at most 4,096)"),
    (["--ranks", "64"], "64 ranks but h200x2-nv18 has 2 GPUs"),
    (["--ranks", "2", "--scaling", "4"], "--scaling 4: 4 ranks but h200x2-nv18 has 2 GPUs"),
    (["--ranks", "2", "--scaling", "0"], "expected a positive integer"),
    (["--ranks", "2", "--nodes", "2"], "fixed 1-node topology; --nodes 2 needs a cluster template"),
    (["--ranks", "2", "--scale-nodes", "4"], "fixed 1-node topology; --nodes 4 needs a cluster template"),
    (["--ranks", "2", "--mode", "turbo"], "'turbo'"),  # argparse's words around it are argparse's
    (["--ranks", "2", "--schedule", "nope"], "no schedule named 'nope'"),
    (["--ranks", "2", "--trace", ""], "--trace: an empty path"),
    (["--ranks", "2", "--plot", ""], "--plot: an empty path"),
])
def test_hostile_predict_options(capsys, no_simulation, argv, fragment):
    code, text = clockworks(capsys, "predict", RING, "-t", "h200x2-nv18", "--sizes", "1KiB", *argv)
    assert_bad_input(code, text, fragment)


@pytest.mark.parametrize("option", ["--nodes", "--scale-nodes"])
def test_hostile_node_counts_on_a_cluster(capsys, no_simulation, option):
    """predict simulates at most 512 nodes (cli.perf.MAX_PREDICT_NODES); topology show loads up to what fits."""
    code, text = clockworks(capsys, "predict", RING, "-t", "dgx-h100-cluster", "--ranks", "2", option, "100000",
                            seconds=10)
    assert_bad_input(code, text, f"argument {option}: 100,000 nodes is more than predict simulates (at most 512)")
    code, text = clockworks(capsys, "topology", "show", "dgx-h100-cluster", "--nodes", "100000", seconds=10)
    assert_bad_input(code, text, "dgx-h100-cluster.yaml: 100,000 nodes of dgx-h100", "use at most 5,194 nodes")


@pytest.mark.parametrize("lines, fragment", [
    ('{bad json', ":1: not a microbenchmark result: "),  # then the json module's reason, in its words
    ('{"bench": "nccl", "op": "allreduce", "graph_us": 5}', ":1: not a microbenchmark result: missing 'bytes'"),
    ('{"bench": "nccl", "op": "allreduce", "bytes": 1024, "graph_us": -5}', "graph_us must be a positive, finite"),
    ('{"bench": "nccl", "op": "allreduce", "bytes": 1024, "graph_us": NaN}', "graph_us must be a positive, finite"),
    ('{"bench": "nccl", "op": "allreduce", "bytes": 0.5, "graph_us": 5}', "bytes must be a whole number"),
    ('{"bench": "nvshmem", "op": "put_block", "bytes": 64, "us": 3, "blocks": -1}', "blocks must be a whole number"),
    ('log text\n{"bench": "nccl", "op": "allreduce", "bytes": "x", "graph_us": 5}', ":2: not a microbenchmark"),
])
def test_hostile_calibration_results(capsys, tmp_path, lines, fragment):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "calibration_raw.jsonl").write_text(lines + "\n")
    code, text = clockworks(capsys, "calibrate", "-t", "h200x2-nv18", "--raw", raw, "--out", tmp_path / "o.yaml")
    assert_bad_input(code, text, "calibration_raw.jsonl", fragment)


@pytest.mark.parametrize("option", ["--raw", "--out"])
def test_calibrate_empty_paths(capsys, tmp_path, option):
    argv = {"--raw": str(tmp_path), "--out": str(tmp_path / "o.yaml"), option: ""}
    code, text = clockworks(capsys, "calibrate", "-t", "h200x2-nv18", *[x for kv in argv.items() for x in kv])
    assert_bad_input(code, text, f"{option}: an empty path")


def test_calibration_results_not_utf8(capsys, tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "calibration_raw.jsonl").write_bytes(b"\xff\xfe{}")
    code, text = clockworks(capsys, "calibrate", "-t", "h200x2-nv18", "--raw", raw, "--out", tmp_path / "o.yaml")
    assert_bad_input(code, text, "calibration_raw.jsonl: cannot read")


@pytest.mark.parametrize("argv, fragment", [
    (["show", "no-such-machine"], "no such file, and no shipped topology"),
    (["show", "."], ".: a folder, not a topology file"),
    (["show", "/dev/null"], "/dev/null: not a regular file, not a topology file"),
    (["show", "x" * 5000], "no such file"),
    (["show", "dgx-h100", "--nodes", "2"], "needs a cluster template"),
    (["show", "dgx-h100-cluster", "--nodes", "0"], "expected a positive integer"),
])
def test_hostile_topology_options(capsys, argv, fragment):
    code, text = clockworks(capsys, "topology", *argv)
    assert_bad_input(code, text, fragment)


# ------------------------------------------------------------------ mutated shipped files
NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])")
REPLACEMENTS = ["'x'", "-1", "0", ".nan", "1e308", ".inf", "-.inf", "1e-300", "99999999999999999999", "true",
                "null", "[]", "{}", "2026-13-45", "1e9", "*a"]


def mutate(text: str, rng: random.Random) -> bytes:
    lines = text.split("\n")
    how = rng.choice(["delete", "swap", "number", "number", "bytes"])
    if how == "delete":
        del lines[rng.randrange(len(lines))]
    elif how == "swap":
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    elif how == "number":
        spots = [(i, m) for i, line in enumerate(lines) for m in NUMBER.finditer(line)]
        i, m = rng.choice(spots)
        lines[i] = lines[i][:m.start()] + rng.choice(REPLACEMENTS) + lines[i][m.end():]
    data = "\n".join(lines).encode()
    if how == "bytes":
        at = rng.randrange(len(data))
        data = data[:at] + bytes(rng.randrange(256) for _ in range(3)) + data[at:]
    return data


@pytest.mark.parametrize("name", ["h200x2-nv18.yaml", "measured/h200x2-nv18.yaml", "dgx-h100.yaml",
                                  "dgx-h100-cluster.yaml"])
def test_mutated_shipped_files_load_or_fail_cleanly(tmp_path, name):
    """Deleted and swapped lines, numbers turned into strings, negatives, 0, nan, 1e308, random bytes:
    each mutant loads (and summarises and predicts) or raises a ClockworksError naming the file."""
    rng = random.Random(name)
    ring = load_file(RING)[0]
    for _ in range(15):
        path = write(tmp_path, mutate((DATA / name).read_text(), rng), Path(name).name)
        with deadline(30):
            try:
                topo = load_topology(path)
                summary(topo)
                to_dot(topo)
                if len(gpus(topo)) >= 2:
                    predict_sizes(ring, topo, 2, [1024, 1 << 20])
            except TopologyError as exc:
                assert str(path) in str(exc)
            except ClockworksError:
                pass


@pytest.mark.parametrize("value", ["[1, 2]", "{a: 1}", "[]", "{}"])
def test_a_device_kind_of_the_wrong_type_is_bad_input(tmp_path, capsys, value):
    """A list or mapping as a device's kind was an internal error (unhashable in the fabric-kind test)."""
    path = tmp_path / "kinds.yaml"
    path.write_text(TWO_GPUS.replace("{id: gpu0, kind: gpu,", f"{{id: gpu0, kind: {value},", 1))
    for args in (["topology", "show", str(path)], ["topology", "show", str(path), "--json"],
                 ["predict", RING, "-t", str(path), "--ranks", "2", "--sizes", "1KiB"]):
        assert cli.main(args) == 2
        err = capsys.readouterr().err
        assert "kinds.yaml" in err and "kind" in err and "Traceback" not in err, err
