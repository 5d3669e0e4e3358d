#!/usr/bin/env python3
"""What a GPU node reports about itself, through NVML (the library `nvidia-smi` reads).

    python clockworks_dist/topology/nvml.py            # the node's facts, one JSON document

`probe()` reads, for every GPU: its name, memory, compute capability, SM count (from the CUDA cores
NVML counts), memory bus and clock, PCIe generation and width, and each NVLink: whether it is up,
its version, and the kind and PCI address of the device at its far end (a GPU, an NVSwitch, a CPU
bridge); and for every pair of GPUs the nearest PCIe point they share. It uses ctypes and the
standard library alone (a GPU node's Python need not have this package's dependencies), and raises
`NvmlMissing` naming what is missing: the library, a GPU, or an answer NVML refused.

`topology.detect` turns the facts into a topology file; tests feed it recorded facts.
"""
from __future__ import annotations

import ctypes
import json
import sys

MAX_LINKS = 18  # NVML_NVLINK_MAX_LINKS
REMOTE_KIND = {0: "gpu", 1: "ibmnpu", 2: "nvswitch", 0xFF: "unknown"}  # nvmlIntNvLinkDeviceType_t
# nvmlGpuTopologyLevel_t: the nearest point of the PCIe tree two GPUs share.
COMMON_ANCESTOR = {0: "same_board", 10: "one_switch", 20: "several_switches", 30: "host_bridge",
                   40: "numa_node", 50: "system"}
NVML_SUCCESS, NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_INVALID_ARGUMENT = 0, 3, 2
NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2


class NvmlMissing(RuntimeError):
    """NVML, a GPU or a needed answer is missing on this node."""


class _Pci(ctypes.Structure):  # nvmlPciInfo_t (v3)
    _fields_ = [("busIdLegacy", ctypes.c_char * 16), ("domain", ctypes.c_uint), ("bus", ctypes.c_uint),
                ("device", ctypes.c_uint), ("pciDeviceId", ctypes.c_uint), ("pciSubSystemId", ctypes.c_uint),
                ("busId", ctypes.c_char * 32)]


class _Memory(ctypes.Structure):  # nvmlMemory_t
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class _Nvml:
    def __init__(self, lib):
        self.lib = lib

    def call(self, name: str, *args, required: bool = True):
        """Call `name`; None when NVML says the query is not supported here (and `required` is off)."""
        fn = getattr(self.lib, name, None)
        if fn is None:
            if required:
                raise NvmlMissing(f"this NVML has no {name} (driver too old?)")
            return None
        rc = fn(*args)
        if rc == NVML_SUCCESS:
            return True
        if not required and rc in (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_INVALID_ARGUMENT):
            return None
        text = self.lib.nvmlErrorString
        text.restype = ctypes.c_char_p
        message = text(rc).decode(errors="replace") if rc is not None else "?"
        if required:
            raise NvmlMissing(f"NVML {name} failed: {message} (error {rc})")
        return None

    def uint(self, name: str, *args, required: bool = False) -> int | None:
        value = ctypes.c_uint()
        return value.value if self.call(name, *args, ctypes.byref(value), required=required) else None

    def text(self, name: str, *args, size: int = 96, required: bool = False) -> str | None:
        buffer = ctypes.create_string_buffer(size)
        ok = self.call(name, *args, buffer, ctypes.c_uint(size), required=required)
        return buffer.value.decode(errors="replace") if ok else None


def _load():
    for soname in ("libnvidia-ml.so.1", "libnvidia-ml.so", "nvml.dll"):
        try:
            return ctypes.CDLL(soname)
        except OSError:
            continue
    raise NvmlMissing("NVML (libnvidia-ml.so.1) is not installed here: this is not a node with an NVIDIA "
                      "driver; run `topology detect` on the GPU node itself")


def probe() -> dict:
    """The node's facts as a JSON-ready dict (module docstring)."""
    nvml = _Nvml(_load())
    nvml.lib.nvmlDeviceGetHandleByIndex_v2.argtypes = [ctypes.c_uint, ctypes.POINTER(ctypes.c_void_p)]
    init = "nvmlInit_v2" if hasattr(nvml.lib, "nvmlInit_v2") else "nvmlInit"
    nvml.call(init)
    try:
        count = nvml.uint("nvmlDeviceGetCount_v2", required=True)
        if not count:
            raise NvmlMissing("NVML reports no GPU on this node")
        handles = []
        for index in range(count):
            handle = ctypes.c_void_p()
            nvml.call("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(index), ctypes.byref(handle))
            handles.append(handle)
        gpus = [_gpu(nvml, index, handle) for index, handle in enumerate(handles)]
        pairs = []
        for i in range(count):
            for j in range(i + 1, count):
                level = ctypes.c_int()
                ok = nvml.call("nvmlDeviceGetTopologyCommonAncestor", handles[i], handles[j], ctypes.byref(level),
                               required=False)
                pairs.append({"a": i, "b": j, "common": COMMON_ANCESTOR.get(level.value, str(level.value))
                              if ok else None})
        return {"source": "nvml", "driver": nvml.text("nvmlSystemGetDriverVersion", size=96),
                "cuda_driver": nvml.uint("nvmlSystemGetCudaDriverVersion_v2"), "gpus": gpus, "pairs": pairs}
    finally:
        nvml.call("nvmlShutdown", required=False)


def _gpu(nvml: _Nvml, index: int, handle) -> dict:
    pci = _Pci()
    nvml.call("nvmlDeviceGetPciInfo_v3", handle, ctypes.byref(pci))
    memory = _Memory()
    got_memory = nvml.call("nvmlDeviceGetMemoryInfo", handle, ctypes.byref(memory), required=False)
    major, minor = ctypes.c_int(), ctypes.c_int()
    got_cc = nvml.call("nvmlDeviceGetCudaComputeCapability", handle, ctypes.byref(major), ctypes.byref(minor),
                       required=False)
    links = []
    for link in range(MAX_LINKS):
        active = nvml.uint("nvmlDeviceGetNvLinkState", handle, ctypes.c_uint(link))
        if active is None:
            continue
        entry = {"link": link, "active": bool(active)}
        if active:
            entry["version"] = nvml.uint("nvmlDeviceGetNvLinkVersion", handle, ctypes.c_uint(link))
            remote = _Pci()
            if nvml.call("nvmlDeviceGetNvLinkRemotePciInfo_v2", handle, ctypes.c_uint(link), ctypes.byref(remote),
                         required=False):
                entry["remote_bus_id"] = remote.busId.decode(errors="replace")
            kind = nvml.uint("nvmlDeviceGetNvLinkRemoteDeviceType", handle, ctypes.c_uint(link))
            entry["remote_kind"] = REMOTE_KIND.get(kind, str(kind)) if kind is not None else None
        links.append(entry)
    return {
        "index": index,
        "name": nvml.text("nvmlDeviceGetName", handle),
        "bus_id": pci.busId.decode(errors="replace"),
        "memory_bytes": memory.total if got_memory else None,
        "compute_capability": f"{major.value}.{minor.value}" if got_cc else None,
        "cuda_cores": nvml.uint("nvmlDeviceGetNumGpuCores", handle),
        "memory_bus_bits": nvml.uint("nvmlDeviceGetMemoryBusWidth", handle),
        "max_memory_clock_mhz": nvml.uint("nvmlDeviceGetMaxClockInfo", handle, ctypes.c_int(NVML_CLOCK_MEM)),
        "max_sm_clock_mhz": nvml.uint("nvmlDeviceGetMaxClockInfo", handle, ctypes.c_int(NVML_CLOCK_SM)),
        "pcie_generation": nvml.uint("nvmlDeviceGetMaxPcieLinkGeneration", handle),
        "pcie_width": nvml.uint("nvmlDeviceGetMaxPcieLinkWidth", handle),
        "nvlinks": links,
    }


def main() -> int:
    try:
        facts = probe()
    except NvmlMissing as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    json.dump(facts, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
