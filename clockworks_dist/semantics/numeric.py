"""The numbers a run computes with: inputs, dtypes and the arithmetic every executor and the expected
values share (numpy only; no MPI, no GPU).

Inputs. Element `e` of buffer `b` on rank `r` starts as

    LEVELS[mix(mix(r * 2**32 + crc32(b)) + e) % 3],   LEVELS = (1, 2, 4),

in uint64 arithmetic, where `mix` is splitmix64's finaliser and `crc32` is zlib's over the UTF-8
name (`input_values`). Every buffer gets it, scratch and output buffers too: the checker's
initial value of every atom is `in(rank, buffer, start, stop)`, whatever the buffer held. Signal
words start at 0, as the checker's do.

Why 1, 2 and 4: a reduction is exact, in every order, when every partial result is representable.
- sum: every partial sum is an integer of at most 4 * (number of terms); exact in float16 up to
  512 terms (2048), in bfloat16 up to 64 terms (256), in the other dtypes far beyond;
- prod: every factor is a power of two, so every partial product is one too (exact in every float
  dtype; in float16 a product past 2**15 overflows to inf in every order alike);
- max and min: exact always; integer dtypes wrap the same way in every order.
So a result computed by MPI, NCCL or numpy in its own association order equals the checker's
expected value bit for bit. What is not exact: sums of products (3 * 3 * ...), sums of more than
64 terms in bfloat16, and a schedule that doubles a value in a loop until it leaves the exact range.

Storage: numpy has no bfloat16, so a bfloat16 buffer is stored as float32 holding bfloat16 values
(`to_dtype` rounds to nearest even after every write); float16 is numpy's float16. Executors move
raw bytes, and reduce float16 and bfloat16 through float32 (exact for these values).

Compute kernels (`compute(name=...)`) are opaque to the checker; here kernel `name` of op `index`
on `rank` writes, at output position j (over its `writes`, concatenated), `LEVELS[mix(h + j) % 3]`,
where h hashes the values it read (`opaque_output`), in uint64 arithmetic:

    seed = mix(crc32("name/rank/index")),   h = seed + sum over p of mix(v(x_p) ^ mix(seed + p)),

p running over the elements of its `reads`, concatenated, and v(x) the 64 bits of x as a double
(float dtypes), an int64 (signed) or a uint64 (unsigned). A deterministic function of what it read,
however the reads are cut, the same in the expected values, in every executor and in generated CUDA
(a sum of independent terms: one thread per element and an atomic add).
"""

from __future__ import annotations

import os
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

import numpy as np

from .arithmetic import MASK64, atomic_result, fetch_result

LEVELS = np.array([1.0, 2.0, 4.0])
STORAGE: dict[str, type] = {
    "float16": np.float16, "bfloat16": np.float32, "float32": np.float32, "float64": np.float64,
    "int32": np.int32, "int64": np.int64, "uint32": np.uint32, "uint64": np.uint64,
}
# The dtype a reduction travels in through MPI: float16 through float32 (MPI has no standard
# float16), everything else as stored.
WIRE: dict[str, type] = {**STORAGE, "float16": np.float32}
INTEGER_BITS = {"int32": 32, "int64": 64, "uint32": 32, "uint64": 64}
PARALLEL_MIN = 1 << 21  # elements per thread, at least, when inputs are computed in pieces
PARALLEL_THREADS = 16
REDUCE_UFUNC = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}


def storage(dtype: str) -> np.dtype:
    """The numpy dtype a buffer of IR dtype `dtype` is stored in."""
    return np.dtype(STORAGE[dtype])


def _round_bfloat16(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even), still as float32."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
    nan = np.isnan(values)
    out = rounded.view(np.float32).copy()
    out[nan] = np.nan
    return out


def to_dtype(values, dtype: str) -> np.ndarray:
    """`values` stored as a buffer of IR dtype `dtype` holds them (rounded; integers wrap)."""
    array = np.asarray(values)
    if dtype in INTEGER_BITS and array.dtype.kind == "f":
        array = array.astype(np.float64).astype(np.int64)  # truncation, as C casts
    with np.errstate(over="ignore", invalid="ignore"):
        out = array.astype(STORAGE[dtype])
    return _round_bfloat16(out) if dtype == "bfloat16" else out


def ir_dtype(stored: np.dtype, hint: str) -> str:
    """The IR dtype of values stored as `stored` (`hint` when it stores that way too: bfloat16)."""
    if np.dtype(STORAGE[hint]) == stored:
        return hint
    return next(name for name, kind in STORAGE.items() if np.dtype(kind) == stored and name != "bfloat16")


def from_int(value: int, dtype: str) -> np.ndarray:
    """One element of integer dtype `dtype` holding `value` modulo 2**bits (uint64 words and
    atomic operands are Python ints in 0 .. 2**64 - 1)."""
    bits = INTEGER_BITS[dtype]
    unsigned = np.array([value % (1 << bits)], dtype=np.uint64 if bits == 64 else np.uint32)
    return unsigned.view(STORAGE[dtype])


def as_unsigned(element: np.ndarray, dtype: str) -> int:
    """The bit pattern of one integer element as an unsigned Python int."""
    bits = INTEGER_BITS[dtype]
    return int(element.reshape(-1)[:1].view(np.uint64 if bits == 64 else np.uint32)[0])


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, on uint64 arrays (wrapping)."""
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def _levels_serial(base: np.uint64, start: int, stop: int, dtype: str | None) -> np.ndarray:
    with np.errstate(over="ignore"):
        keys = base + np.arange(start, stop, dtype=np.uint64)
    values = LEVELS[_mix(keys) % np.uint64(3)]
    return values if dtype is None else to_dtype(values, dtype)


def _levels(base: np.uint64, start: int, stop: int, dtype: str | None = None) -> np.ndarray:
    """`LEVELS[mix(base + e) % 3]` for e in [start, stop) (in `dtype`, else float64). Every element
    depends on its own key alone, so a large range is cut into pieces computed by threads (numpy
    releases the GIL): the same values, sooner (gigabyte buffers on a GPU machine's many cores)."""
    count = stop - start
    workers = min(PARALLEL_THREADS, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1,
                  count // PARALLEL_MIN)
    if workers <= 1:
        return _levels_serial(base, start, stop, dtype)
    out = np.empty(count, dtype=np.float64 if dtype is None else STORAGE[dtype])
    bounds = [start + count * i // workers for i in range(workers + 1)]

    def fill(i: int) -> None:
        out[bounds[i] - start:bounds[i + 1] - start] = _levels_serial(base, bounds[i], bounds[i + 1], dtype)

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(fill, range(workers)))
    return out


def input_values(rank: int, buffer: str, dtype: str, start: int, stop: int) -> np.ndarray:
    """Elements [start, stop) of `buffer` on `rank` at the start of a run (the module docstring's
    formula), in `dtype`."""
    base = _mix(np.array([(rank << 32) + zlib.crc32(buffer.encode())], dtype=np.uint64))[0]
    return _levels(base, start, stop, dtype)


def constant(value, count: int, dtype: str) -> np.ndarray:
    """`count` elements of `value` (a fill's float, or a fetched uint64 word) in `dtype`."""
    if isinstance(value, int) and dtype in INTEGER_BITS:
        return np.repeat(from_int(value, dtype), count)
    return to_dtype(np.full(count, value), dtype)


def combine(op: str, left: np.ndarray, right: np.ndarray, dtype: str) -> np.ndarray:
    """`left op right` element by element, rounded to `dtype` (integers wrap)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return to_dtype(REDUCE_UFUNC[op](left, right), dtype)


def atomic_update(how: str, old: np.ndarray, operand, dtype: str) -> np.ndarray:
    """One integer word after an atomic: `how` is a non-fetching atomic op (add, inc, set, and,
    or, xor) with an int operand, or a fetching one (swap, compare_swap, fetch_and ...) with
    (value, cond); arithmetic modulo 2**bits of the word's dtype (`semantics.arithmetic`)."""
    mask = (1 << INTEGER_BITS[dtype]) - 1
    current = as_unsigned(old, dtype)
    if isinstance(operand, tuple):
        value, cond = operand
        new = fetch_result(how, current, value & mask, cond & mask)
    else:
        new = atomic_result(how, current, operand & MASK64 & mask)
    return from_int(new & mask, dtype)


def opaque_seed(kernel: str, rank: int, index: int) -> int:
    """The seed of compute kernel `kernel`, op `index` of `rank` (the module docstring)."""
    key = np.array([zlib.crc32(f"{kernel}/{rank}/{index}".encode())], dtype=np.uint64)
    return int(_mix(key)[0])


def opaque_word(array: np.ndarray) -> np.ndarray:
    """v(x) of the module docstring: each element's 64 bits as a double, an int64 or a uint64."""
    kind = array.dtype.kind
    wide = np.float64 if kind == "f" else np.int64 if kind == "i" else np.uint64
    return np.ascontiguousarray(array, dtype=wide).reshape(-1).view(np.uint64)


OPAQUE_PIECE = 1 << 22  # elements hashed at a time (bounds the temporaries of gigabyte reads)


def opaque_output(kernel: str, rank: int, index: int, reads: Sequence[np.ndarray], count: int) -> np.ndarray:
    """The `count` outputs (as float64 1, 2 or 4) of compute kernel `kernel`, op `index` of `rank`,
    that read the arrays `reads` (in order; only their values and positions matter, so how they are
    cut does not): the module docstring's formula."""
    seed = np.uint64(opaque_seed(kernel, rank, index))
    total = np.uint64(seed)
    position = 0
    with np.errstate(over="ignore"):
        for array in reads:
            words = opaque_word(np.asarray(array))
            for start in range(0, len(words), OPAQUE_PIECE):
                piece = words[start:start + OPAQUE_PIECE]
                keys = seed + np.arange(position + start, position + start + len(piece), dtype=np.uint64)
                total += np.add.reduce(_mix(piece ^ _mix(keys)), dtype=np.uint64)
            position += len(words)
    return _levels(total, 0, count)


def same_bits(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Element-wise bitwise equality (so NaN equals the same NaN, and 0.0 differs from -0.0)."""
    width = left.dtype.itemsize
    view = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[width]
    return np.ascontiguousarray(left).view(view) == np.ascontiguousarray(right).view(view)


def plain(value):
    """A numpy scalar as a JSON-ready Python number."""
    item = value.item() if hasattr(value, "item") else value
    if isinstance(item, float) and item.is_integer() and abs(item) < 2 ** 53:
        return int(item)
    return item
