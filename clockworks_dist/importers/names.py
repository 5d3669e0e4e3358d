"""The name an imported algorithm's schedule takes: it names the schedule and generated code."""

from __future__ import annotations

import re

from .. import ir


def schedule_name(name: str, prefix: str) -> str:
    """`name` as an identifier: other characters become `_`, and `prefix` goes in front of a name
    that does not start with a letter or that the IR refuses (a reserved word)."""
    out = re.sub(r"[^A-Za-z0-9_]", "_", name) or prefix
    out = re.sub(r"_{2,}", "_", out).strip("_") or prefix
    if not out[0].isalpha():
        out = f"{prefix}_{out}"
    if ir.name_problem(out) is not None:
        out = f"{prefix}_{out}"
    return out[:64].rstrip("_")
