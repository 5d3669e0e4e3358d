"""`clockworks calibrate`: run the microbenchmarks on a GPU machine, fit the model's constants,
write a calibrated topology file with its provenance."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
from pathlib import Path

import yaml

from ..errors import ClockworksError
from ..topology import load_topology
from ..topology.calibrated import ACROSS_BY, CALIBRATED_BY
from ..topology.model import MAX_CHANNELS
from .fit import channels_from_log, fit, load_cells

RUNNER = Path(__file__).resolve().parent.parent / "calibrate" / "runner.py"
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "NVSHMEM_DISABLE_NVLS": "1", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}


def run_microbenchmarks(out_dir: str, timeout_s: float = 900.0, quick: bool = False) -> Path:
    """Build and run the NCCL and NVSHMEM microbenchmarks under mpirun on this machine's GPUs."""
    env = dict(os.environ, **NO_MULTICAST)
    command = [sys.executable, str(RUNNER), "--out", out_dir] + (["--quick"] if quick else [])
    try:
        subprocess.run(command, env=env, check=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise ClockworksError(f"the microbenchmarks did not finish in {timeout_s:.0f} s; partial results are in "
                              f"{out_dir}") from exc
    except subprocess.CalledProcessError as exc:
        raise ClockworksError(f"the microbenchmarks failed (exit {exc.returncode}); see {out_dir}/build.log "
                              "and run.log (they need nvcc, mpirun, NCCL and NVSHMEM, and GPUs)") from exc
    return Path(out_dir) / "calibration_raw.jsonl"


def calibrate(raw: str, base_topology, base_file: str, out_path: str, run_log: str | None = None,
              start=None) -> dict:
    """Fit on the measured cells (held-out sizes excluded) and write the calibrated topology."""
    cells, provenance = load_cells(raw)
    if not cells:
        raise ClockworksError(f"{raw}: no microbenchmark results in it")
    consts = (start or base_topology).constants
    channels = channels_from_log(run_log) if run_log else None
    if channels:
        if not all(1 <= count <= MAX_CHANNELS for count in channels):
            raise ClockworksError(f"{run_log}: NCCL's init line gives {channels[0]} coll and {channels[1]} p2p "
                                  f"channels; a communicator has 1 to {MAX_CHANNELS} (is this an NCCL log?)")
        consts = consts.model_copy(update={"nccl_max_channels": channels[0], "nccl_p2p_max_channels": channels[1]})
    consts, summary = fit(cells, base_topology, consts)
    document = yaml.safe_load(Path(base_file).read_text())
    document["name"] = base_topology.name
    document["constants"] = {**(document.get("constants") or {}), **consts.model_dump()}
    document["provenance"] = {
        "date": datetime.date.today().isoformat(),
        "gpu": provenance.get("gpu"), "driver": provenance.get("driver"),
        "cuda": " ".join(provenance.get("nvcc_version") or []) or None,
        "nccl": (provenance.get("wheels") or {}).get("nvidia-nccl-cu13"),
        "nvshmem": (provenance.get("wheels") or {}).get("nvidia-nvshmem-cu13"),
        "method": f"{CALIBRATED_BY}: NCCL collectives and point-to-point (default and one-channel), "
                  "NVSHMEM put sweeps under mpirun; least squares on log-time over every other "
                  "power-of-two size",
        "note": f"fit: {summary}",
    }
    _write(out_path, document, "# Calibrated by `clockworks calibrate` on the machine named in `provenance`.\n"
                               "# Links and devices as in the uncalibrated file; `constants` fitted to measurements.\n")
    return summary


def _write(out_path: str, document: dict, header: str) -> None:
    """A topology file: `header` (comment lines), then `document` as YAML."""
    try:
        Path(out_path).parent.mkdir(parents=True, exist_ok=True)
        Path(out_path).write_text(header + yaml.safe_dump(document, sort_keys=False, width=100))
    except OSError as exc:
        raise ClockworksError(f"cannot write {out_path}: {exc.strerror or exc}") from None


def calibrate_across(machines, target: str, out_path: str, max_nfev: int = 60) -> dict:
    """Fit the library's constants across `machines` (`perf.library.fit_across`) and write the
    topology `target` (a file or shipped name: its devices and links) with them."""
    from ..topology.model import _resolve
    from .library import fit_across, structured

    base = load_topology(target)
    consts, summary = fit_across(machines, structured(base.constants), max_nfev=max_nfev)
    document = yaml.safe_load(_resolve(target).read_text())
    document["constants"] = consts.model_dump()
    listed = ", ".join(f"{m.name} ({m.gpu}, {m.ranks} ranks)" for m in machines)
    document["provenance"] = {
        **(document.get("provenance") or {}),
        "date": datetime.date.today().isoformat(),
        "method": f"{ACROSS_BY}: NCCL collective constants fitted across {listed}; the machine itself "
                  "not measured",
        "note": f"fit: {summary}",
    }
    _write(out_path, document, "# Written by `clockworks calibrate --across`: this machine's links, with the library's "
                               "constants\n# fitted on the machines named in `provenance` (not on this machine "
                               "itself).\n")
    load_topology(out_path)
    return summary
