"""`clockworks validate --share-gpus`: several NVSHMEM PEs on one GPU, to check a generated program's
results on a machine with fewer GPUs than ranks. The parts that need no GPU: who may share, what the
generated program honours, and what the results say of their times."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import clockworks_dist as cw
from clockworks_dist.codegen import program
from clockworks_dist.report import validate as report_validate
from clockworks_dist.runtime import validate

ROOT = Path(__file__).resolve().parent.parent


def _trace(name: str, ranks: int = 2):
    defn = cw.load_file(str(ROOT / "protocols" / f"{name}.py"))[0]
    return defn.trace(ranks)


def test_only_the_nvshmem_program_lets_ranks_share_a_gpu():
    nvshmem = program.generate(_trace("nvshmem_oneshot_allreduce"), "nvshmem")
    nccl = program.generate(_trace("ring_allreduce"), "nccl")
    assert f'getenv("{validate.SHARE_GPUS_ENV}")' in nvshmem
    assert "local_size > devices && !(share" in nvshmem
    # NCCL refuses two ranks on one GPU: its program keeps refusing them at setup, with no switch
    assert validate.SHARE_GPUS_ENV not in nccl
    assert "  if (local_size > devices) {" in nccl


@pytest.mark.parametrize("backend", ["nccl", "cupy"])
def test_share_gpus_is_refused_for_backends_that_need_a_gpu_per_rank(backend, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "clockworks_dist.cli", "validate", str(ROOT / "protocols" /
                           "ring_allreduce.py"), "--backend", backend, "--share-gpus", "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "--share-gpus: only the nvshmem program" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "o").exists()


def test_share_gpus_with_a_slurm_job_is_refused(tmp_path):
    with pytest.raises(validate.ValidateError, match="--share-gpus runs the ranks here"):
        validate.validate_file(str(ROOT / "protocols" / "nvshmem_oneshot_allreduce.py"), backend="nvshmem",
                               launcher="slurm", share_gpus=True, out_dir=str(tmp_path / "o"))


def test_the_results_say_the_times_are_not_a_machine_with_a_gpu_per_rank():
    report = {"schedule": "s", "ranks": 2, "backend": "nvshmem", "verdict": "match", "cells": [],
              "shared_gpus": True}
    lines = report_validate.summary_lines(report)
    assert any("shared the GPUs (--share-gpus)" in line and "not a machine's with a GPU per rank" in line
               for line in lines)
    table = report_validate.render_table([], {"backend": "nvshmem", "ranks": 2, "shared_gpus": True}, "", {})
    assert "sharing the GPUs (--share-gpus" in table
    assert "one GPU each" not in table
