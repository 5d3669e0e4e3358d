"""The library's constants: fitted once across machines, taken by every uncalibrated topology, with
the error to expect stated; runs that cannot share constants refused.

The numbers these tests read are the committed ones (topology/data/library/nccl.yaml, written with
scripts/results/bench_transfer.json by `python scripts/bench_transfer.py --write-library`).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from clockworks_dist.errors import ClockworksError
from clockworks_dist.perf import library as lib
from clockworks_dist.perf.fit import Cell, predict_cell
from clockworks_dist.topology import choose_topology, load_topology
from clockworks_dist.topology import library
from clockworks_dist.topology.model import DATA_DIR

ROOT = Path(__file__).resolve().parent.parent
TRANSFER = json.loads((ROOT / "scripts" / "results" / "bench_transfer.json").read_text())


def test_the_library_file_states_its_machines_and_error():
    shipped = library.library()
    names = [m["machine"] for m in shipped["fitted_on"]]
    assert names == list(TRANSFER["machines"]), "the library file and bench_transfer.json name other machines"
    expected = shipped["expected_error"]
    assert expected["median_pct"] == TRANSFER["left_out_all"]["median_pct"]
    assert expected["max_pct"] == TRANSFER["left_out_all"]["max_pct"]
    assert shipped["library"]["nccl"] == "2.28.9"


def test_uncalibrated_files_take_the_library_constants(tmp_path):
    base = library.constants()
    topo = load_topology("dgx-h200")  # a datasheet file: no constants of its own
    assert topo.constants.nccl_chunk_GBs == base["nccl_chunk_GBs"]
    assert topo.constants.nccl_base_latency_us.Simple == base["nccl_base_latency_us"]["Simple"]
    own = (DATA_DIR / "h200x4-nvswitch.yaml").read_text() + "constants:\n  nccl_base_latency_us: {Simple: 99.0}\n"
    mine = tmp_path / "mine.yaml"
    mine.write_text(own)
    topo = load_topology(mine)
    assert topo.constants.nccl_base_latency_us.Simple == 99.0  # its own wins ...
    assert topo.constants.nccl_base_latency_us.LL == base["nccl_base_latency_us"]["LL"]  # ... where it has one


def test_calibrated_files_keep_their_own_constants():
    calibrated = load_topology(DATA_DIR / "measured" / "h200x2-nv18.yaml")
    assert calibrated.constants.nccl_chunk_GBs == {}  # fitted before the chunk term: it keeps its model
    assert calibrated.constants.nccl_base_latency_us.Simple != library.constants()["nccl_base_latency_us"]["Simple"]


def test_a_prediction_says_which_error_to_expect():
    warning = choose_topology("dgx-h200").warning()
    error = library.expected_error()
    assert f"median of {error['median_pct']}%" in warning and f"at most {error['max_pct']}%" in warning
    other = choose_topology("hgx-a100").warning()
    assert "never on" in other and "A100" in other  # not a GPU the constants were fitted on


def test_a_4_gpu_slice_is_the_dgx_with_fewer_ranks():
    """The shipped 8-GPU DGX H200, at 4 ranks, predicts NCCL's all-reduce as the 4-GPU slice that
    `topology detect` described does (the same links per GPU, the same switch route)."""
    dgx, slice_ = load_topology("dgx-h200"), load_topology("h200x4-nvswitch")
    for nbytes in (65536, 16 << 20, 1 << 30):
        cell = Cell("allreduce", nbytes, "graph", 1.0, ranks=4)
        a, b = predict_cell(cell, dgx, dgx.constants), predict_cell(cell, slice_, slice_.constants)
        assert a == pytest.approx(b, rel=0.02), nbytes


def _machine(name: str) -> lib.Machine:
    (found,) = lib.shipped_machines([name])
    return found


def test_runs_of_different_nccl_versions_are_refused():
    a, b = _machine("h200x2-nv18"), copy.deepcopy(_machine("h200x4-nvswitch"))
    b.provenance["wheels"] = {"nvidia-nccl-cu13": "2.27.3"}
    with pytest.raises(ClockworksError, match="different NCCL versions.*2.28.9.*2.27.3"):
        lib.check_compatible([a, b])
    with pytest.raises(ClockworksError, match="same run"):
        lib.check_compatible([a, copy.deepcopy(a)])


def test_a_raw_run_of_other_gpus_is_refused():
    raw = DATA_DIR / "measured" / "raw" / "calibration_raw.jsonl"  # 2 x H200
    with pytest.raises(ClockworksError, match="measured on NVIDIA H200, but its topology dgx-h100"):
        lib.load_machine("x", raw, "dgx-h100")


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "clockworks_dist", *args], capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("spec, words", [("nothing-here", "give DIR=TOPOLOGY"),
                                         ("/no/such/dir=dgx-h200", "calibration_raw.jsonl: not found")])
def test_calibrate_across_bad_input(tmp_path, spec, words):
    done = _cli("calibrate", "-t", "dgx-h200", "--across", spec, "--out", str(tmp_path / "x.yaml"))
    assert done.returncode == 2 and words in done.stderr and "Traceback" not in done.stderr


def test_calibrate_across_writes_a_machine_with_the_fitted_constants(tmp_path):
    """Two machines' runs (the 2 x H200 box and two GPUs of the 4 x H200 node) fitted at once, written
    as the 8-GPU DGX H200's constants: a file that loads, says where its constants come from, and is
    not taken for a calibration of the DGX."""
    pytest.importorskip("scipy", reason="the fit needs scipy: the [calibrate] extra")
    measured = DATA_DIR / "measured"
    out = tmp_path / "dgx.yaml"
    done = _cli("calibrate", "-t", "dgx-h200", "--out", str(out), "--json", "--max-evaluations", "4", "--across",
                f"{measured / 'raw'}=h200x2-nv18.yaml",
                f"{measured / 'machines' / 'h200x4-nvswitch-2gpu'}=h200x4-nvswitch.yaml")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["fit"]["machines"] == ["raw", "h200x4-nvswitch-2gpu"]
    chosen = choose_topology(str(out))
    assert not chosen.calibrated and "--across" in chosen.topology.provenance.method
    assert chosen.topology.constants.nccl_chunk_GBs  # the fitted structure is in it
