"""Writes what scripts/gpu/nvshmem_smoke.sh runs on the GPU machine (whose Python has no pydantic): the
generated NVSHMEM program of each NVSHMEM protocol at 2 ranks, at three sizes, and a job directory
per program with every rank's expected values where the checker gives them.

    python scripts/gpu/nvshmem_smoke_prepare.py [OUT]    (default scripts/gpu/nvshmem_src)

Sizes (CHUNK elements of float32 per peer): 4 (the protocols' own: every op on one block), 65536
(256 KiB: ops spread over 4 blocks, the last block signals) and 33554432 (128 MiB: 132 blocks; no
expected values, which would be gigabytes: the ranks only run, and their times count). Besides:
`every_op` (tests/test_codegen_nvshmem.py: every op the backend emits, run without expected values)
and `signal_to_wrong_pe` (a hang on purpose: each rank's line names each block's op)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from clockworks_dist.codegen import program  # noqa: E402
from clockworks_dist.runtime import validate  # noqa: E402
from clockworks_dist.dsl.load import load_file  # noqa: E402

PROTOCOLS = ["nvshmem_alltoall_dispatch", "nvshmem_oneshot_allreduce", "nvshmem_twoshot_allreduce",
             "dissemination_barrier"]
SIZES = {"small": 4, "medium": 1 << 16, "large": 1 << 25}
CHECKED = ("small", "medium")


def main(out: Path) -> None:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    cells = []
    for name in PROTOCOLS:
        definition = load_file(str(ROOT / "protocols" / f"{name}.py"))[0]
        for label, chunk in SIZES.items():
            sched = definition.trace(2, sizes={"CHUNK": chunk})
            cells.append(_write(out, f"{name}_{label}", sched, label in CHECKED))
    spec = importlib.util.spec_from_file_location("nvshmem_tests", ROOT / "tests" / "test_codegen_nvshmem.py")
    tests = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tests)
    cells.append(_write(out, "every_op", tests.every_op(2), False))
    hang = load_file(str(ROOT / "protocols" / "runtime" / "signal_to_wrong_pe.py"))[0].trace(2)
    cells.append(_write(out, "hang_signal_to_wrong_pe", hang, False, timeout=5.0))
    (out / "cells.json").write_text(json.dumps(cells, indent=1))
    print(f"{len(cells)} programs in {out}")


def _write(out: Path, name: str, sched, checked: bool, timeout: float = 60.0) -> dict:
    (out / f"{name}.cu").write_text(program.generate(sched, "nvshmem"))
    job = out / f"job_{name}"
    job.mkdir()
    reference = validate.reference_of(sched, 120.0, no_check=False) if checked else None
    validate.prepare_job_dir(str(job), sched, reference, timeout, 3, "nvshmem", validate.main_bytes(sched))
    return {"name": name, "world": sched.world, "checked": checked, "timeout": timeout,
            "bytes_per_rank": validate.main_bytes(sched)}


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "scripts" / "gpu" / "nvshmem_src")
