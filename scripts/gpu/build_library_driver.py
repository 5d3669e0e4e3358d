#!/usr/bin/env python3
"""Build an emitted library and its MPI test driver into one binary, as the GPU scripts do:

    python3 scripts/gpu/build_library_driver.py DIR NAME

DIR holds NAME.h, NAME.cu and NAME_test.cu (`tune --emit`); the binary is DIR/NAME_test. One nvcc
line with relocatable device code against the NVSHMEM wheel and MPI (`codegen.build`). Exits with
nvcc's status; compiles only (no GPU launch)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from clockworks_dist.codegen import build


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        sys.stderr.write(__doc__.split("\n\n")[1] + "\n")
        return 2
    work, name = Path(argv[1]), argv[2]
    tc = build.find_toolchain("nvshmem")
    tc.require("nvshmem")
    binary = work / f"{name}_test"
    link = build.link_dir_for(binary)
    build.prepare_link_dir("nvshmem", tc, link)
    cmd = build.compile_command(work / f"{name}.cu", "nvshmem", tc, binary, link)
    cmd.insert(cmd.index(str(work / f"{name}.cu")) + 1, str(work / f"{name}_test.cu"))
    print(" ".join(cmd), flush=True)
    # nvcc starts no GPU work; NVLink multicast stays off in its environment all the same
    env = {**os.environ, "NCCL_NVLS_ENABLE": "0", "NVSHMEM_DISABLE_NVLS": "1", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}
    return subprocess.run(cmd, env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv))
