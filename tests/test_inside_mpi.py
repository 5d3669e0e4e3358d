"""`clockworks run` inside an MPI job that the user started: each process of the job is one rank.

These tests carry pytest-mpi's `mpi` marker and run only under an MPI launcher, every rank running
the same test:

    mpiexec -n 2 python -m pytest --with-mpi tests/test_inside_mpi.py
    mpiexec -n 4 python -m pytest --with-mpi tests/test_inside_mpi.py

(.ci/run does both). In the plain suite, without `--with-mpi`, pytest-mpi skips them and says why.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORRECT = sorted((ROOT / "protocols").glob("*.py"))


def _world():
    from mpi4py import MPI

    return MPI.COMM_WORLD


def _run(capsys, *args: str) -> tuple[int, dict | None]:
    """`clockworks run ARGS --json` on this rank: its exit code, and on rank 0 the summary."""
    from clockworks_dist.cli import main

    code = main(["run", *args, "--json", "--timeout", "120"])
    out = capsys.readouterr().out
    if _world().Get_rank() != 0:
        assert out == "", "with --json only rank 0 prints (one JSON document for the whole job)"
        return code, None
    return code, json.loads(out)  # exactly one JSON document


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("path", CORRECT, ids=lambda p: p.stem)
def test_every_correct_protocol_matches_inside_the_users_job(path, capsys):
    """At the job's size (2 or 4 ranks), each correct protocol's every element and signal word
    equals the checker's values, on every rank; rank 0 prints the verdict for the whole job."""
    code, summary = _run(capsys, str(path), "--jitter", "5")
    codes = _world().allgather(code)
    assert codes == [0] * _world().Get_size(), codes
    if summary is not None:
        assert summary["verdict"] == "match" and summary["np"] == _world().Get_size()
        assert [r["verdict"] for r in summary["results"]] == ["match"] * len(summary["results"])


@pytest.mark.mpi(min_size=2)
def test_a_mismatch_is_reported_inside_the_users_job(capsys, monkeypatch):
    """Rank 1 adds 1 to element 0 of its first buffer after its last op (the worker's test hook):
    rank 0 reports the mismatch with that rank, buffer and element, and rank 1 exits 1."""
    from clockworks_dist.runtime.worker import FAULT_ENV

    monkeypatch.setenv(FAULT_ENV, "1:0:corrupt")
    code, summary = _run(capsys, str(ROOT / "protocols" / "ring_allgather.py"))
    codes = _world().allgather(code)
    assert codes[1] == 1, codes
    if summary is not None:
        assert summary["verdict"] == "mismatch"
        first = summary["results"][0]["ranks"][1]["compare"]["first"][0]
        assert (first["rank"], first["buffer"], first["element"]) == (1, "x", 0)
        assert first["got"] == first["expected"] + 1
