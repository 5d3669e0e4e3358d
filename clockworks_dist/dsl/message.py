"""The message size of a schedule: sizes as users write them (`64KiB`, `1KiB..1GiB`), the buffer
whose size is the message size (nccl-tests' convention), and the size-symbol value that gives it
a number of bytes. Shared by `predict`, `run --sizes`, `validate` and `tune`."""

from __future__ import annotations

import re

from .. import ir
from ..errors import ScheduleError

_UNITS = {"": 1, "B": 1, "K": 1024, "KB": 1000, "KIB": 1024, "M": 1024**2, "MB": 1000**2, "MIB": 1024**2,
          "G": 1024**3, "GB": 1000**3, "GIB": 1024**3, "T": 1024**4, "TB": 1000**4, "TIB": 1024**4}
MAX_SIZE = 1024**4  # bytes per rank: 1 TiB, more than any GPU's memory
MAX_SIZES = 100  # sizes in one sweep (1..1TiB in powers of two is 41)


def parse_size(text: str) -> int:
    """`4096`, `64KiB`, `1.5MiB`, `1GB`: a whole number of bytes from 1 to 1 TiB."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", text, flags=re.ASCII)
    if not match or match.group(2).upper() not in _UNITS:
        raise ValueError(f"cannot read size {text!r}: write e.g. 4096, 64KiB, 16MiB, 1GiB")
    number, unit = match.group(1), _UNITS[match.group(2).upper()]
    if len(number) > 30:  # too many digits for any size (and for int() beyond 4,300)
        raise ValueError(f"size {text[:40]!r}... is more than 1TiB per rank, which no GPU holds")
    whole, _, fraction = number.partition(".")
    # exact arithmetic: float(number) * unit would round 1.1KiB to 1126 without a word
    numerator, denominator = int(whole + fraction) * unit, 10 ** len(fraction)
    if numerator % denominator:
        raise ValueError(f"size {text!r} is not a whole number of bytes ({numerator / denominator:g})")
    size = numerator // denominator
    if size > MAX_SIZE:
        raise ValueError(f"size {text!r} is more than 1TiB per rank, which no GPU holds")
    return size


def parse_sizes(text: str) -> list[int]:
    """`1KiB..1GiB` (powers of two), or a comma-separated list."""
    if ".." in text:
        lo, hi = (parse_size(t) for t in text.split("..", 1))
        if lo < 1 or hi < lo:
            raise ValueError(f"size range {text!r} is empty: write LOW..HIGH with 1 <= LOW <= HIGH")
        sizes, size = [], lo
        while size <= hi:
            sizes.append(size)
            size *= 2
        return sizes
    sizes = [parse_size(t) for t in text.split(",") if t.strip()]
    if not sizes or min(sizes) < 1:
        raise ValueError(f"no positive sizes in {text!r}: write e.g. 1KiB..1GiB or 4096,1MiB")
    if len(sizes) > MAX_SIZES:
        raise ValueError(f"{len(sizes)} sizes in one sweep; at most {MAX_SIZES} (a range LOW..HIGH takes powers "
                         "of two)")
    return sizes


def main_buffer(sched: ir.Schedule) -> ir.BufferDecl:
    """The buffer whose size defines the message size: nccl-tests' convention (all-gather: the
    gathered output; otherwise the largest input)."""
    prog = sched.programs[0]
    if not sched.expect and not prog.buffers:  # rank 0 declares nothing: the first rank that does
        prog = next((p for p in sched.programs if p.buffers), prog)
    if not sched.expect and not prog.buffers:
        raise ScheduleError(f"{sched.name} declares no buffer on any of its {sched.world} rank(s), so there is no "
                            "message size to predict", file=sched.loc.file, line=sched.loc.line,
                            hint='declare the buffer the message size scales, e.g. r.buffer("x", '
                                 'count=n * CHUNK) with CHUNK = cw.size("CHUNK", 4)')
    if sched.expect:
        label = sched.expect[0].label
        name = sched.expect[0].region.buffer if label.startswith("allgather") else (
            sched.expect[0].contributions[0].region.buffer)
        return prog.buffer(name)
    candidates = [b for b in prog.buffers if b.role in ("input", "inout")] or list(prog.buffers)
    return max(candidates, key=lambda b: b.count)


def size_binding(defn, world: int, nbytes: int, ranks_per_node: int | None = None,
                 base: ir.Schedule | None = None) -> dict[str, int]:
    """The size-symbol value that gives the main buffer `nbytes` bytes (`base`: the schedule traced
    at its default sizes, if the caller has it)."""
    base = base or defn.trace(world, ranks_per_node)
    buf = main_buffer(base)
    width = ir.DTYPE_BYTES[buf.dtype]
    if nbytes % width:
        raise ScheduleError(f"{nbytes} bytes is not a whole number of {buf.dtype} elements of {buf.name}",
                            file=buf.loc.file, line=buf.loc.line, hint=f"pick multiples of {width} bytes")
    elems = nbytes // width
    form = buf.count_sym
    if form is None or len(form.terms) != 1 or not form.exact:
        raise ScheduleError(f"cannot scale buffer {buf.name} to {nbytes} bytes: its count is not a multiple of "
                            "one size symbol", file=buf.loc.file, line=buf.loc.line,
                            hint='declare it with a size, e.g. count=n * CHUNK with CHUNK = cw.size("CHUNK", 4)')
    name, coeff = form.terms[0]
    value, rest = divmod(elems - form.const, coeff)
    symbol = next(s for s in base.symbols if s.name == name)
    if rest or value < symbol.min or value % symbol.multiple_of:
        raise ScheduleError(f"{nbytes} bytes is not reachable: {buf.name} holds {form} elements of "
                            f"{ir.DTYPE_BYTES[buf.dtype]} bytes", file=buf.loc.file, line=buf.loc.line,
                            hint=f"pick sizes that are multiples of {coeff * ir.DTYPE_BYTES[buf.dtype]} bytes")
    return {name: value}


def pinned_bytes(sched: ir.Schedule, symbols: dict[str, int] | None) -> int | None:
    """The message size `symbols` fixes, if they bind the size symbol that scales the main buffer
    (`--size CHUNK=8` on a ring: one size, not a sweep); None if they leave it free."""
    buf = main_buffer(sched)
    if buf.count_sym is None or not any(name in (symbols or {}) for name, _ in buf.count_sym.terms):
        return None
    return buf.count * ir.DTYPE_BYTES[buf.dtype]


def size_text(nbytes: int) -> str:
    """1024 -> "1 KiB"; sizes not a whole number of units stay in bytes."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"
