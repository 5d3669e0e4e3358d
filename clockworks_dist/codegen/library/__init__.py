"""The generated library: a size dispatcher over a family's measured winners, emitted as a C API
(`cw_<name>.h`, `cw_<name>.cu`) and an MPI test driver (`cw_<name>_test.cu`).

- `text`: the header and the library source (entries, the dispatcher's logic, each size's kernels);
- `driver`: the test driver that calls the library as a user would.
"""

from __future__ import annotations

import json
from pathlib import Path

from .driver import driver_text
from .text import (  # noqa: F401  (the library's interface: read by the tuner and the tests)
    CHECK_MAX_STATES, CHECK_TIMEOUT_S, DEFAULT_RESET_EVERY, DISPATCH_LOGIC, SEPARATORS, Entry, LibraryError, Winner,
    describe, device_pieces, header, heap_bytes, library_check, library_name, plan_entries, source,
)


def emit(entries: list[Entry], provenance: dict, out_dir) -> list[Path]:
    """Write `cw_<name>.h`, `cw_<name>.cu` and `cw_<name>_test.cu` into `out_dir`; their paths.
    `provenance`: what the header comment says of where the winners came from (`source`, `topology`,
    `file`, `hash`, `measured`)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = library_name(entries[0].sched)
    texts = {f"{name}.h": header(entries, provenance), f"{name}.cu": source(entries, provenance),
             f"{name}_test.cu": driver_text(entries, provenance)}
    written = []
    for file_name, text in texts.items():
        path = out / file_name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    (out / f"{name}.json").write_text(json.dumps(describe(entries, provenance), indent=2) + "\n", encoding="utf-8")
    written.append(out / f"{name}.json")
    return written
