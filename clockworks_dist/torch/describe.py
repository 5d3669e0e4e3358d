"""What an emitted library is, read from its files: `read_library(folder)`.

`clockworks tune --emit DIR` writes `cw_<name>.h`, `cw_<name>.cu` and `cw_<name>.json`. The header
is the contract the module binds to: the caller's buffers (`CW_<NAME>_BUF_<BUFFER> = i,  /* role,
dtype */`), the number of PEs, the tuned sizes, the symmetric heap, the calls between resets. The
JSON says the same sizes with where they came from; the two must agree.

Every name that reaches C (the symbols looked up in the shared object) comes from here and is
checked with the schedule name rule (`ir.name_problem`): a folder whose files were edited into
something else is refused with what is wrong, never half loaded.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from .. import ir
from ..errors import ClockworksError

# dtype of a caller's buffer -> (torch dtype name, __cuda_array_interface__ typestr); bfloat16 has no
# typestr of its own: seen as uint16, then viewed as torch.bfloat16
DTYPES = {"float16": ("float16", "<f2"), "bfloat16": ("bfloat16", "<u2"), "float32": ("float32", "<f4"),
          "float64": ("float64", "<f8"), "int32": ("int32", "<i4"), "int64": ("int64", "<i8"),
          "uint32": ("uint32", "<u4"), "uint64": ("uint64", "<u8")}
ROLES = ("input", "output", "inout")
EMIT_HINT = "emit it again with `clockworks tune ... --emit DIR`"


class TorchLibraryError(ClockworksError):
    """The generated library cannot be loaded, initialised or called as asked: the message says what,
    where, and the fix."""


@dataclass(frozen=True)
class Buffer:
    """A buffer the caller fills (input, inout) or reads (output, inout): its index in the header's
    `CW_<NAME>_BUF_*` enum, its schedule name, role and dtype."""

    index: int
    name: str
    role: str
    dtype: str

    @property
    def itemsize(self) -> int:
        return ir.DTYPE_BYTES[self.dtype]


@dataclass(frozen=True)
class LibraryInfo:
    """An emitted library's folder and what its header declares."""

    folder: Path
    name: str                      # cw_<schedule>: the file stem and every symbol's prefix
    world: int
    reset_every: int
    sizes: tuple[int, ...]         # bytes per PE of the main buffer, ascending
    heap_bytes: int
    buffers: tuple[Buffer, ...]

    @property
    def source(self) -> Path:
        return self.folder / f"{self.name}.cu"

    @property
    def header(self) -> Path:
        return self.folder / f"{self.name}.h"

    def symbol(self, entry: str) -> str:
        """The C symbol of API entry `entry` (init, buffer, count, run, finalize, last_error)."""
        if entry not in ("init", "buffer", "count", "run", "finalize", "last_error"):
            raise TorchLibraryError(f"{entry!r} is not an entry of the library's C API")
        return f"{self.name}_{entry}"

    def buffer(self, name: str) -> Buffer:
        for b in self.buffers:
            if b.name == name:
                return b
        raise TorchLibraryError(f"{self.name} has no caller buffer {name!r}; it has "
                                + ", ".join(f"{b.name} ({b.role})" for b in self.buffers))

    def sizes_text(self) -> str:
        return ", ".join(f"{n} ({size_text(n)})" for n in self.sizes)


def size_text(nbytes: int) -> str:
    """1024 -> '1 KiB', 1536 -> '1536 B' (exact units only)."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift and nbytes % (1 << shift) == 0:
            return f"{nbytes >> shift} {unit}"
    return f"{nbytes} B"


def read_library(folder) -> LibraryInfo:
    """The library emitted into `folder` (one `cw_*.h` with its `.cu` and `.json`); a
    `TorchLibraryError` naming the file and the fix when anything is missing or does not parse."""
    folder = Path(folder)
    if not folder.is_dir():
        raise TorchLibraryError(f"{folder}: no such folder (give the folder `clockworks tune --emit DIR` wrote)")
    headers = sorted(p for p in folder.glob("cw_*.h"))
    if len(headers) != 1:
        found = ", ".join(p.name for p in headers) or "none"
        raise TorchLibraryError(f"{folder}: expected one emitted library header cw_<name>.h, found {found} "
                                f"(give the folder of one library; {EMIT_HINT})")
    name = headers[0].stem
    problem = ir.name_problem(name)
    if problem is not None:
        raise TorchLibraryError(f"{headers[0]}: {name!r} cannot name a library's symbols: {problem}")
    for suffix in (".cu", ".json"):
        if not (folder / f"{name}{suffix}").is_file():
            raise TorchLibraryError(f"{folder}: {name}{suffix} is missing beside {name}.h ({EMIT_HINT})")
    info = _parse_header(headers[0], name, folder)
    _agree_with_json(info, folder / f"{name}.json")
    return info


def _parse_header(path: Path, name: str, folder: Path) -> LibraryInfo:
    text = path.read_text(encoding="utf-8", errors="replace")
    up = name.upper()

    def define(key: str) -> str:
        m = re.search(rf"^#define {up}_{key} (.+?)\s*(?:/\*.*)?$", text, re.M)
        if m is None:
            raise TorchLibraryError(f"{path}: no #define {up}_{key} (not a header `clockworks tune --emit` wrote; "
                                    f"{EMIT_HINT})")
        return m.group(1).strip()

    def number(key: str) -> int:
        value = define(key)
        m = re.fullmatch(r"(\d+)(?:ULL)?", value)
        if m is None:
            raise TorchLibraryError(f"{path}: {up}_{key} is {value!r}, not a number ({EMIT_HINT})")
        return int(m.group(1))

    sizes_text = define("SIZES")
    sizes = tuple(int(n) for n in re.findall(r"(\d+)ULL", sizes_text))
    if not sizes or len(sizes) != number("NSIZES") or list(sizes) != sorted(set(sizes)):
        raise TorchLibraryError(f"{path}: {up}_SIZES {sizes_text} is not {number('NSIZES')} ascending sizes "
                                f"({EMIT_HINT})")
    buffers = []
    for m in re.finditer(rf"^\s*{up}_BUF_(\w+) = (\d+),\s*/\* (\w+), (\w+) \*/", text, re.M):
        role, dtype = m.group(3), m.group(4)
        lower = m.group(1).lower()
        # the enum holds the schedule's name in upper case; the JSON's winners do not list buffers, so
        # the lower-case spelling is the name the module shows (the header refuses two names that
        # differ only in case)
        if ir.name_problem(lower) is not None or role not in ROLES or dtype not in DTYPES:
            raise TorchLibraryError(f"{path}: buffer line {m.group(0).strip()!r} is not one the module can bind "
                                    f"(role one of {', '.join(ROLES)}, dtype one of {', '.join(DTYPES)}; {EMIT_HINT})")
        buffers.append(Buffer(int(m.group(2)), lower, role, dtype))
    m = re.search(rf"^\s*{up}_NBUFS = (\d+)$", text, re.M)
    nbufs = int(m.group(1)) if m else -1
    if not buffers or [b.index for b in buffers] != list(range(nbufs)):
        raise TorchLibraryError(f"{path}: the caller's buffers {up}_BUF_* are not numbered 0..{nbufs - 1} "
                                f"({EMIT_HINT})")
    for entry in ("init", "buffer", "count", "run", "finalize", "last_error"):
        if f"{name}_{entry}(" not in text:
            raise TorchLibraryError(f"{path}: the C API entry {name}_{entry} is not declared ({EMIT_HINT})")
    return LibraryInfo(folder=folder, name=name, world=number("WORLD"), reset_every=number("RESET_EVERY"),
                       sizes=sizes, heap_bytes=number("HEAP_BYTES"), buffers=tuple(buffers))


def _agree_with_json(info: LibraryInfo, path: Path) -> None:
    try:
        described = json.loads(path.read_text(encoding="utf-8"))
        sizes = tuple(int(row["bytes"]) for row in described["sizes"])
        world, library = int(described["world"]), described["library"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise TorchLibraryError(f"{path}: not the table `clockworks tune --emit` writes "
                                f"({type(exc).__name__}: {exc}; {EMIT_HINT})") from None
    if (library, world, sizes) != (info.name, info.world, info.sizes):
        raise TorchLibraryError(f"{path} says {library} at {world} PEs, sizes {list(sizes)}, but {info.header.name} "
                                f"declares {info.name} at {info.world} PEs, sizes {list(info.sizes)}: the files are "
                                f"of different emits ({EMIT_HINT})")


__all__ = ["Buffer", "DTYPES", "LibraryInfo", "TorchLibraryError", "read_library", "size_text"]
