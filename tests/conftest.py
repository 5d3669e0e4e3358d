"""Fixtures shared by the test modules."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def nvshmem_toolchain():
    """nvcc and the NVSHMEM headers and libraries that generated programs build with; where they are not
    here the test is skipped, saying what is missing (CI installs them: the `cuda-build` extra)."""
    from clockworks_dist.codegen import build

    tc = build.find_toolchain("nvshmem")
    if not tc.ok:
        pytest.skip("cannot build nvshmem programs here: " + "; ".join(str(m) for m in tc.missing))
    return tc
