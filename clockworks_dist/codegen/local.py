"""Local ops (reduce, copy, fill, compute) as kernels on the rank's stream, for host-driven backends.

Each follows its rule's data flow (`semantics.rules`: sources read before any destination is
written, combined left to right, rounded to the dtype after each step) with the arithmetic of
`semantics.numeric` (`support.cuh` implements it on the device). A source that overlaps a destination
without being the same elements is first copied to scratch (a kernel reads element i of every
source before it writes element i of the destination, which is only safe for the same elements).
"""

from __future__ import annotations

from .. import ir
from ..semantics import numeric
from ..semantics.rules import rule
from . import cuda
from .program import Gen, bits


def _staged(gen: Gen, src: ir.Region, dsts: list[ir.Region], lines: list[str], why: str) -> str:
    """`src`'s pointer, or a scratch copy's when it overlaps a destination other than itself."""
    if any(gen.overlaps(src, dst) and (src.start, src.stop) != (dst.start, dst.stop) for dst in dsts):
        scratch = gen.add_scratch(gen.nbytes(src), f"op {gen.index} of rank {gen.rank}: {why}")
        lines.append(f"  CW_CUDA(cudaMemcpyAsync({scratch}, {gen.ptr(src)}, {gen.nbytes(src)}, "
                     "cudaMemcpyDeviceToDevice, s));  // staged: it overlaps the destination")
        return f"({gen.ctype(src)}*){scratch}"
    return gen.ptr(src)


def reduce(gen: Gen, op: ir.LocalReduce) -> list[str]:
    """dst = srcs[0] op srcs[1] op ... (one kernel: element i of every source, then dst[i])."""
    lines: list[str] = []
    ctype = gen.ctype(op.dst)
    sources = [_staged(gen, src, [op.dst], lines, "a reduce source overlapping its destination") for src in op.srcs]
    table = gen.add_table(ctype, sources)
    lines.append(f"  cw_reduce<{ctype}>(s, {gen.ptr(op.dst)}, {table}, {len(sources)}, {op.dst.count}, "
                 f"{cuda.REDUCE_CODE[op.op]});")
    return lines


def copy(gen: Gen, op: ir.Copy) -> list[str]:
    """dst = src (a device-to-device copy; through scratch when they overlap but differ)."""
    if op.src == op.dst:
        return ["  // the same elements: nothing to copy"]
    lines: list[str] = []
    source = _staged(gen, op.src, [op.dst], lines, "a copy whose source overlaps its destination")
    lines.append(f"  CW_CUDA(cudaMemcpyAsync({gen.ptr(op.dst)}, {source}, {gen.nbytes(op.dst)}, "
                 "cudaMemcpyDeviceToDevice, s));")
    return lines


def fill(gen: Gen, op: ir.Fill) -> list[str]:
    """Every element of dst = value, rounded as `numeric.constant` rounds it."""
    ctype = gen.ctype(op.dst)
    return [f"  cw_fill<{ctype}>(s, {gen.ptr(op.dst)}, {op.dst.count}, {bits(op.value, gen.dtype(op.dst))});"]


def compute(gen: Gen, op: ir.Compute) -> list[str]:
    """The opaque kernel of `numeric.opaque_output`: hash every read, then write every output."""
    seed = numeric.opaque_seed(op.name, gen.rank, gen.index)
    h = gen.add_scratch(8, f"op {gen.index} of rank {gen.rank}: the hash of what compute {op.name} read")
    lines = [f"  cw_set_u64_kernel<<<1, 1, 0, s>>>((unsigned long long*){h}, {cuda.u64(seed)});"]
    move = rule(op).flows(op, gen.rank)[0]
    position = 0
    for _r, src in move.srcs:
        lines.append(f"  cw_hash<{gen.ctype(src)}>(s, {gen.ptr(src)}, {src.count}, {cuda.u64(seed)}, {position}, "
                     f"(unsigned long long*){h});")
        position += src.count
    lines.append("  // every read is hashed before any output is written (stream order)")
    offset = 0
    for _r, dst in move.dsts:
        lines.append(f"  cw_opaque<{gen.ctype(dst)}>(s, {gen.ptr(dst)}, {dst.count}, (unsigned long long*){h}, "
                     f"{offset});")
        offset += dst.count
    return lines


TABLE = {ir.LocalReduce: reduce, ir.Copy: copy, ir.Fill: fill, ir.Compute: compute}
