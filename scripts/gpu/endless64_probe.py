#!/usr/bin/env python3
"""The builds of the 2-rank all-reduce library compared at 64 KiB (results/h200x2/library_endless/README.md,
"Why the count-per-block build was wrong"), patched to say per call what went wrong:

    python3 scripts/gpu/endless64_probe.py prepare DIR     (a CPU machine, in a git checkout)
    python3 scripts/gpu/endless64_probe.py summary OUT     (after scripts/gpu/endless64_h200x2.sh)

`prepare` writes DIR/<variant>/ with the library's header, source and MPI driver for each variant:

- k32: the committed dispatcher (results/h200x2/tune_all/dispatch: a reset every 32 calls);
- shared: what `tune --emit --calls-without-end` emits today (one call count per PE, an atomic
  arrival and a fence at every kernel's start);
- per_block: the source measured wrong, as commit c3e684b committed it (one call count per block);
- per_block_volatile: the same with the count read by a volatile load (not through the L1 cache);
- per_block_fenced: the same with a fence and a block barrier after the read (thread 0's, as the shared
  count has at every kernel's start), the count still per block.

The header is the same for all five, and so is the driver: today's, for every variant (c3e684b's
differed only in the timing part). Each library gets `cw_probe_calls` (its call count words, copied
out after the stream has finished); each driver checks every call of the first part (each size on its
own, many calls in a row) in three parts of its output, the shares of a reduce spread over three
blocks (at 64 KiB: blocks 1, 2 and 0 of the kernel, in that order), and prints a line per call where
a part is wrong or a count word is not the number of calls since the size's reset (and the first
three, and every 250th and the one before): {"probe": 1, "rank", "bytes", "round", "call", "parts":
[3 mismatch counts], "words", "count_ok"}.
CWT_PROBE_MAX_BYTES (environment, default every size) skips the sizes above it.

`summary` reads OUT/<variant>.<n>.probe.jsonl and prints, per variant and run, the calls with a wrong
part, the mismatches per part, the first wrong round and the calls whose count words were wrong."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAME = "cw_nvshmem_allreduce_family"
DISPATCH = ROOT / "results" / "h200x2" / "tune_all" / "dispatch"
FAMILY = ROOT / "protocols" / "nvshmem_allreduce_family.py"
TUNED = [ROOT / "results" / "h200x2" / "tune_all" / "allreduce_family" / part for part in ("small", "large")]
PER_BLOCK_COMMIT = "c3e684b"  # "each block keeps its own call count": the build measured wrong at 64 KiB
VARIANTS = ("k32", "shared", "per_block", "per_block_volatile", "per_block_fenced")

# ------------------------------------------------------------------------------------ the library
PER_BLOCK_READ = "  return count[blockIdx.x];\n"
VOLATILE_READ = "  return *(const volatile unsigned long long*)(count + blockIdx.x);  // probe: not through L1\n"
FENCED_READ = ("  unsigned long long number = count[blockIdx.x];\n"
               "  if (threadIdx.x == 0) __threadfence();  // probe: the shared count's fence at the start\n"
               "  __syncthreads();\n"
               "  return number;\n")


def library_probe(words: str) -> str:
    """The function appended to a library source: size k's call count words (`words` of them: the grid
    for a count per block, 2 for the shared count and its arrivals), 0 where the size has none."""
    return "\n".join([
        "",
        "// ---- probe (scripts/gpu/endless64_probe.py), not part of the library: size k's call count words",
        "// copied to the host; call it after the caller's stream has finished (0: the size has none)",
        'extern "C" int cw_probe_calls(int k, unsigned long long* out, int n) {',
        f"  using namespace {NAME}_impl;",
        "  if (k < 0 || k >= CWL_NSIZES || !cwl_sizes[k].calls || n < 1) return 0;",
        f"  int m = std::min(n, {words});",
        "  if (cudaMemcpy(out, cwl_sizes[k].calls, m * sizeof(unsigned long long), cudaMemcpyDeviceToHost) != "
        "cudaSuccess)",
        "    return -1;",
        "  return m;",
        "}",
        "",
    ])


def patch_library(text: str, variant: str) -> str:
    """The library source of `variant` with the probe appended (per_block_volatile: its count read by a
    volatile load; per_block_fenced: a fence and a block barrier after the read). ValueError where the
    source is not the one the variant expects."""
    per_block = variant.startswith("per_block")
    if per_block != ("cw_nv_call_number(a.calls);" in text):
        raise ValueError(f"{variant}: the source does not have the call count this variant expects")
    if variant in ("per_block_volatile", "per_block_fenced"):
        if text.count(PER_BLOCK_READ) != 1:
            raise ValueError(f"{variant}: the count per block's read (cw_nv_call_number) was not found")
        text = text.replace(PER_BLOCK_READ, VOLATILE_READ if variant == "per_block_volatile" else FENCED_READ)
    return text + library_probe("cwl_sizes[k].grid" if per_block else "2")


# ------------------------------------------------------------------------------------- the driver
PROTOTYPE_AFTER = "#include <nvshmemx.h>\n"
PROBE_AFTER = "static unsigned long long cwt_mismatches(cudaStream_t s) {\n"
PHASE1 = """  for (int k = 0; k < nsizes; ++k) {
    for (int r = 0; r < rounds; ++r, ++call) {
      cwt_inputs(k, sizes[k], call, s);
      CWT_LIB({name}_run(sizes[k], s));
      unsigned long long before = cwt_mismatches(s);
      checked[k] += cwt_check_call(k, call, s);
      bad[k] += cwt_mismatches(s) - before;
    }
  }
""".replace("{name}", NAME)
PHASE1_PROBED = """  for (int k = 0; k < nsizes; ++k) {
    if (sizes[k] > cwt_max_bytes) continue;
    for (int r = 0; r < rounds; ++r, ++call) {
      cwt_inputs(k, sizes[k], call, s);
      CWT_LIB({name}_run(sizes[k], s));
      cwt_probe_call(k, sizes[k], r, call, s, &checked[k], &bad[k]);
    }
  }
""".replace("{name}", NAME)
PHASE2_LOOP = "    for (int k = 0; k < nsizes; ++k, ++call) {\n"
PHASE3_LOOP = "  for (int k = 0; k < nsizes && timed; ++k) {\n"
ARGS_DONE = '  if (rounds < 1 || iters < 1) cwt_die("arguments", "--rounds and --iters must be >= 1", __LINE__);\n'

DRIVER_PROBE = r"""
// ---- probe (scripts/gpu/endless64_probe.py) ----
static size_t cwt_max_bytes = (size_t)-1;  // CWT_PROBE_MAX_BYTES: the sizes above it are skipped
static size_t cwt_elem_bytes(int dtype) {
  return dtype == CW_F16 || dtype == CW_BF16 ? 2 : (dtype == CW_F32 || dtype == CW_I32 || dtype == CW_U32 ? 4 : 8);
}
// Call `call` (round r of size k's calls in a row, the first after the size's reset) checked in three
// parts of each output, the shares of a reduce spread over 3 blocks in 16-byte quanta (cw_nv_share; the
// 64 KiB kernel's reduce starts at block 1, so parts 0, 1, 2 are blocks 1, 2, 0), then the library's call
// count words read back: after round r every one is r + 1 with a count per block; the shared count has
// the count (r + 1) and its arrivals (0).
static void cwt_probe_call(int k, size_t bytes, int r, int call, cudaStream_t s, unsigned long long* checked,
                           unsigned long long* bad) {
  unsigned long long part[3] = {0, 0, 0};
  for (int e = 0; e < CWT_NEXPECT; ++e) {
    const CwtExpect& x = CWT_EXPECT[e];
    if (x.size != k || x.rank != cwt_rank) continue;
    size_t q = 16 / cwt_elem_bytes(CWT_DTYPE[x.buf]);
    size_t per = ((x.count + 2) / 3 + q - 1) / q * q;
    for (int t = 0; t < 3; ++t) {
      size_t lo = std::min(per * t, (size_t)x.count), hi = std::min(lo + per, (size_t)x.count);
      if (lo >= hi) continue;
      std::vector<CwtTerm> host(x.n);
      for (int j = 0; j < x.n; ++j) {
        const CwtContribution& c = CWT_CONTRIBUTIONS[x.first + j];
        host[j].key = cwt_key(c.rank, c.buf, call, k);
        host[j].start = c.start + lo;
      }
      unsigned long long before = cwt_mismatches(s);
      CWT_CUDA(cudaMemcpyAsync(cwt_terms, host.data(), x.n * sizeof(CwtTerm), cudaMemcpyHostToDevice, s));
      cwt_check_dtype(CWT_DTYPE[x.buf], cwt_ptr[x.buf], x.start + lo, hi - lo, x.op, cwt_terms, x.n, cwt_bad, s);
      CWT_CUDA(cudaStreamSynchronize(s));  // host terms stay alive until the check has read them
      part[t] += cwt_mismatches(s) - before;
    }
    *checked += x.count;
  }
  *bad += part[0] + part[1] + part[2];
  unsigned long long words[256];
  int m = cw_probe_calls(k, words, 256);
  bool ok = m >= 0;
  for (int i = 0; i < m; ++i) {
    unsigned long long want = (m == 2 && i == 1) ? 0ULL : (unsigned long long)r + 1ULL;  // shared: the arrivals
    if (words[i] != want) ok = false;
  }
  if (part[0] || part[1] || part[2] || !ok || r < 3 || r % 250 == 0 || (r + 1) % 250 == 0) {
    printf("{\"probe\":1,\"rank\":%d,\"bytes\":%zu,\"round\":%d,\"call\":%d,\"parts\":[%llu,%llu,%llu],\"words\":[",
           cwt_rank, bytes, r, call, part[0], part[1], part[2]);
    for (int i = 0; i < m; ++i) printf("%s%llu", i ? "," : "", words[i]);
    printf("],\"count_ok\":%s}\n", ok ? "true" : "false");
    fflush(stdout);  // one write a line: the two ranks' lines do not interleave
  }
}
"""


def patch_driver(text: str) -> str:
    """The library's MPI driver with the probe: phase 1's check part by part and the count words read
    back after every call, CWT_PROBE_MAX_BYTES honoured in every phase. ValueError where a piece of the
    driver it patches is not found (the driver changed: patch it anew)."""
    def once(haystack: str, old: str, new: str, what: str) -> str:
        if haystack.count(old) != 1:
            raise ValueError(f"the driver's {what} was not found once (found {haystack.count(old)} times)")
        return haystack.replace(old, new)

    text = once(text, PROTOTYPE_AFTER, PROTOTYPE_AFTER + 'extern "C" int cw_probe_calls(int k, unsigned long long* '
                "out, int n);  // endless64_probe.py\n", "last #include")
    start = text.index(PROBE_AFTER) if PROBE_AFTER in text else -1
    if start < 0:
        raise ValueError("the driver's cwt_mismatches was not found")
    end = text.index("\n}\n", start) + 3
    text = text[:end] + DRIVER_PROBE + text[end:]
    text = once(text, PHASE1, PHASE1_PROBED, "first part (each size on its own)")
    text = once(text, PHASE2_LOOP, PHASE2_LOOP + "      if (sizes[k] > cwt_max_bytes) continue;\n",
                "second part (the size changes at every call)")
    if text.count(PHASE3_LOOP) < 1:
        raise ValueError("the driver's timed part was not found")
    text = text.replace(PHASE3_LOOP, PHASE3_LOOP + "    if (sizes[k] > cwt_max_bytes) continue;\n")
    return once(text, ARGS_DONE, ARGS_DONE + '  if (const char* m = getenv("CWT_PROBE_MAX_BYTES")) cwt_max_bytes = '
                "strtoull(m, nullptr, 10);\n", "argument check")


# ------------------------------------------------------------------------------------ the variants
def _git_show(commit: str, path: Path) -> str:
    rel = path.relative_to(ROOT).as_posix()
    return subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:{rel}"], check=True, capture_output=True,
                          text=True).stdout


def _code(text: str) -> list[str]:
    """A header's lines that are not comments (the provenance comment names where it was emitted from)."""
    return [line for line in text.splitlines() if not line.lstrip().startswith("//")]


def prepare(out: Path) -> None:
    from clockworks_dist import tune

    out.mkdir(parents=True, exist_ok=True)
    driver = (DISPATCH / f"{NAME}_test.cu").read_text()
    header = (DISPATCH / f"{NAME}.h").read_text()
    emitted = out / "emitted_shared"
    if emitted.exists():
        shutil.rmtree(emitted)
    tune.emit(str(FAMILY), str(emitted), results=[str(p) for p in TUNED], endless=True)
    sources = {
        "k32": (DISPATCH / f"{NAME}.cu").read_text(),
        "shared": (emitted / f"{NAME}.cu").read_text(),
        "per_block": _git_show(PER_BLOCK_COMMIT, DISPATCH / f"{NAME}.cu"),
    }
    sources["per_block_volatile"] = sources["per_block_fenced"] = sources["per_block"]
    for what, other in (("the emitted shared count's", (emitted / f"{NAME}.h").read_text()),
                        (f"{PER_BLOCK_COMMIT}'s", _git_show(PER_BLOCK_COMMIT, DISPATCH / f"{NAME}.h"))):
        if _code(other) != _code(header):
            raise SystemExit(f"{what} header differs from the committed one: the variants would not share a driver")
    patched_driver = patch_driver(driver)
    for variant in VARIANTS:
        d = out / variant
        if d.exists():  # nothing built before is carried to the GPU machine with the sources
            shutil.rmtree(d)
        d.mkdir()
        (d / f"{NAME}.h").write_text(header)
        (d / f"{NAME}.cu").write_text(patch_library(sources[variant], variant))
        (d / f"{NAME}_test.cu").write_text(patched_driver)
        print(f"{d}: {variant}")
    shutil.rmtree(emitted)


def summary(out: Path) -> None:
    rows = defaultdict(lambda: {"calls": 0, "bad_calls": 0, "parts": [0, 0, 0], "first": None, "count_bad": 0,
                                "words": None})
    for path in sorted(out.glob("*.probe.jsonl")):
        variant, run = path.name.split(".")[:2]
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                print(f"{path.name}: not a probe line: {line[:80]}")
                continue
            key = (variant, run, rec["rank"], rec["bytes"])
            row = rows[key]
            row["calls"] = max(row["calls"], rec["round"] + 1)
            if any(rec["parts"]):
                row["bad_calls"] += 1
                row["parts"] = [a + b for a, b in zip(row["parts"], rec["parts"])]
                row["first"] = rec["round"] if row["first"] is None else min(row["first"], rec["round"])
            if not rec["count_ok"]:
                row["count_bad"] += 1
                row["words"] = row["words"] or (rec["round"], rec["words"])
    print("variant run rank bytes | calls | calls with a wrong part | mismatches per part (blocks 1, 2, 0 at 64 KiB) | "
          "first wrong round | calls with wrong count words (first: round, words)")
    for (variant, run, rank, size), row in sorted(rows.items()):
        print(f"{variant} {run} {rank} {size} | {row['calls']} | {row['bad_calls']} | {row['parts']} | "
              f"{row['first']} | {row['count_bad']} {row['words'] or ''}")


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] not in ("prepare", "summary"):
        sys.stderr.write(__doc__.split("\n\n")[1] + "\n")
        return 2
    (prepare if argv[1] == "prepare" else summary)(Path(argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
