"""scripts/gpu/endless64_probe.py, the tooling of scripts/gpu/endless64_h200x2.sh (why the count-per-block
library gave wrong sums at 64 KiB): the probe patches apply to today's driver and libraries or refuse
with the piece they did not find, the three parts its driver checks are the thirds the 64 KiB kernel's
blocks reduce (what the results README reads them as), and a patched library with its patched driver
compiles and links without a warning (skipped, with the reason, where nvcc or the NVSHMEM wheel is
missing). Running it needs 2 GPUs."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from clockworks_dist.codegen import library

from test_dispatch import _emit, compile_library

ROOT = Path(__file__).resolve().parent.parent
DISPATCH = ROOT / "results" / "h200x2" / "tune_all" / "dispatch"
NAME = "cw_nvshmem_allreduce_family"
W = library.Winner

_spec = importlib.util.spec_from_file_location("endless64_probe", ROOT / "scripts" / "gpu" / "endless64_probe.py")
probe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(probe)


def _winners_64k():
    return [W(1024, {"ALGO": "oneshot"}, 32768, "alternate", 2.89, 5.84, True, "ALGO=oneshot, packets <= 32 KiB"),
            W(65536, {"ALGO": "oneshot"}, 0, "alternate", 8.13, 6.94, True, "ALGO=oneshot")]


def test_the_driver_patch_checks_the_first_part_by_parts_and_skips_sizes_above_the_limit():
    driver = (DISPATCH / f"{NAME}_test.cu").read_text()
    patched = probe.patch_driver(driver)
    assert patched.count('extern "C" int cw_probe_calls(') == 1
    # the first part's check is the probe's (part by part, the count words after it); the other parts
    # keep the driver's own check
    first = patched[patched.index("// 1. Each size on its own"):patched.index("// 2. The size changes")]
    assert "cwt_probe_call(k, sizes[k], r, call, s, &checked[k], &bad[k]);" in first
    assert "cwt_check_call" not in first
    assert patched.count("cwt_check_call(k, call, s)") == driver.count("cwt_check_call(k, call, s)") - 1
    assert patched.count("if (sizes[k] > cwt_max_bytes) continue;") == 4  # parts 1, 2 and both timed loops
    assert 'getenv("CWT_PROBE_MAX_BYTES")' in patched
    # a driver that changed is refused with the piece not found, not patched wrongly
    with pytest.raises(ValueError, match="first part"):
        probe.patch_driver(driver.replace("bad[k] += cwt_mismatches(s) - before;\n    }\n  }\n", "", 1))


def test_the_library_patch_knows_which_count_it_reads():
    per_block = ("__device__ inline unsigned long long cw_nv_call_number(const unsigned long long* count) {\n"
                 + probe.PER_BLOCK_READ + "}\n  const unsigned long long cw_call = cw_nv_call_number(a.calls);\n")
    shared = "  const unsigned long long cw_call = cw_nv_call_number(a.calls, a.calls_arrive);\n"
    assert "cwl_sizes[k].grid" in probe.patch_library(per_block, "per_block")
    volatile = probe.patch_library(per_block, "per_block_volatile")
    assert probe.PER_BLOCK_READ not in volatile and probe.VOLATILE_READ in volatile
    fenced = probe.patch_library(per_block, "per_block_fenced")
    assert probe.PER_BLOCK_READ not in fenced and probe.FENCED_READ in fenced
    assert "std::min(n, 2)" in probe.patch_library(shared, "shared")
    for text, variant in ((shared, "per_block"), (per_block, "shared"), (shared, "per_block_volatile"),
                          (shared, "per_block_fenced")):
        with pytest.raises(ValueError, match="does not have the call count"):
            probe.patch_library(text, variant)


def test_the_three_parts_are_the_thirds_the_64k_kernel_blocks_reduce(tmp_path):
    """The probe's parts (per = the element count over 3, rounded up to 16-byte quanta) and the block that
    reduces each: the 64 KiB winner's reduce is spread over 3 blocks from block 1 (`cw_nv_share`)."""
    _entries, out = _emit(tmp_path, calls=2, winners=_winners_64k(), endless=True)
    text = (out / f"{NAME}.cu").read_text()
    body = text[text.index("namespace cw_size1 {"):text.index("}  // namespace cw_size1")]
    reduces = re.findall(r"cw_nv_reduce<float>\(b_out, cw_srcs, 2, (\d+), CW_SUM, (\d+), (\d+)\)", body)
    assert reduces and set(reduces) == {("16384", "3", "1")}, reduces  # both ranks, both copies
    assert body.count("if (cw_nv_mine(0)) {") == 4 and body.count("nvshmemx_putmem_signal_block(") == 4
    assert "z.want = 3;" in text[text.index("int cwl_setup_1("):text.index("int cwl_call_1(")]
    n, want, base, quantum = 16384, 3, 1, 4
    per = ((n + want - 1) // want + quantum - 1) // quantum * quantum
    shares = {}
    for block in range(want):  # cw_nv_share with a grid of `want` blocks
        t = (block + want - base % want) % want
        shares[block] = (min(per * t, n), min(per * t + per, n))
    parts = [(min(per * t, n), min(per * t + per, n)) for t in range(3)]  # the driver's parts, as it computes them
    assert parts == [shares[1], shares[2], shares[0]] == [(0, 5464), (5464, 10928), (10928, 16384)]
    assert "size_t per = ((x.count + 2) / 3 + q - 1) / q * q;" in probe.DRIVER_PROBE


def test_a_patched_library_and_driver_compile_and_link(tmp_path, nvshmem_toolchain):
    _entries, out = _emit(tmp_path, calls=2, winners=_winners_64k(), endless=True)
    source = out / f"{NAME}.cu"
    source.write_text(probe.patch_library(source.read_text(), "shared"))
    driver = out / f"{NAME}_test.cu"
    driver.write_text(probe.patch_driver(driver.read_text()))
    assert compile_library(out, nvshmem_toolchain, NAME).is_file()
