#!/usr/bin/env python3
"""Build an emitted library and its MPI test driver into one binary, as the GPU scripts do:

    python3 scripts/gpu/build_library_driver.py DIR NAME [--object | --from-object]

DIR holds NAME.h, NAME.cu and NAME_test.cu (`tune --emit`); the binary is DIR/NAME_test. One nvcc
line with relocatable device code against the NVSHMEM wheel and MPI (`codegen.build`). Exits with
nvcc's status; compiles only (no GPU launch).

The library's kernels are most of the build (minutes for a 2 MB NAME.cu: cicc and ptxas, one
thread each), so it can be split in two:
  --object       compile NAME.cu alone into DIR/NAME.o (relocatable device code, no MPI, no link),
                 on any machine with the same nvcc and NVSHMEM as the one that runs it; what it was
                 built with goes into DIR/NAME.o.json
  --from-object  compile NAME_test.cu and link it with DIR/NAME.o into DIR/NAME_test (seconds);
                 refused (exit 2) when this machine's nvcc release (13.0), NVSHMEM version or GPU
                 architecture is not the one NAME.o was built with"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from clockworks_dist.codegen import build


def _release(found: dict) -> dict:
    """What must match to link an object here: nvcc's release (13.0), not its patch; NVSHMEM; the arch."""
    return {**found, "nvcc": ".".join(str(found.get("nvcc")).split(".")[:2])}


def main(argv: list[str]) -> int:
    args = [a for a in argv[1:] if not a.startswith("--")]
    flags = {a for a in argv[1:] if a.startswith("--")}
    if len(args) != 2 or not flags <= {"--object", "--from-object"} or len(flags) > 1:
        sys.stderr.write(__doc__.split("\n\n")[1] + "\n")
        return 2
    work, name = Path(args[0]), args[1]
    tc = build.find_toolchain("nvshmem")
    tc.require("nvshmem")
    made_with = {"nvcc": tc.nvcc_version, "nvshmem": tc.nvshmem_version, "arch": tc.arch}
    binary = work / f"{name}_test"
    obj, record = work / f"{name}.o", work / f"{name}.o.json"
    link = build.link_dir_for(binary)
    build.prepare_link_dir("nvshmem", tc, link)
    cmd = build.compile_command(work / f"{name}.cu", "nvshmem", tc, binary, link)
    source = cmd.index(str(work / f"{name}.cu"))
    if "--object" in flags:  # the library's kernels alone: everything before the source, then -c
        cmd = cmd[:source] + [str(work / f"{name}.cu"), "-c", "-o", str(obj)]
    elif "--from-object" in flags:
        try:
            built = json.loads(record.read_text())
        except (OSError, ValueError) as exc:
            sys.stderr.write(f"{record}: {exc} (make {obj} with --object first)\n")
            return 2
        if _release(built) != _release(made_with):
            sys.stderr.write(f"{obj} was built with {built}, this machine has {made_with}: build it here\n")
            return 2
        cmd[source:source + 1] = [str(obj), str(work / f"{name}_test.cu")]
    else:
        cmd.insert(source + 1, str(work / f"{name}_test.cu"))
    print(" ".join(cmd), flush=True)
    # nvcc starts no GPU work; NVLink multicast stays off in its environment all the same
    env = {**os.environ, "NCCL_NVLS_ENABLE": "0", "NVSHMEM_DISABLE_NVLS": "1", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}
    code = subprocess.run(cmd, env=env).returncode
    if code == 0 and "--object" in flags:
        record.write_text(json.dumps(made_with) + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
