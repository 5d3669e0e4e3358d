"""The add-an-op checklist (`clockworks_dist/semantics/rules.py`, its docstring), guarded: for every
op class of `ir.OP_CLASSES`, one test per item of the checklist that fails when that item is
forgotten, with a message that names the file to edit."""

from __future__ import annotations

import pytest

from clockworks_dist import ir
from clockworks_dist.semantics import rules
from clockworks_dist.semantics.rules import Sync

KIND = {cls: cls.model_fields["kind"].default for cls in ir.OP_CLASSES}


def _kinds_whose_rule(test) -> frozenset[str]:
    return frozenset(kind for cls, kind in KIND.items() if cls in rules.RULES and test(rules.RULES[cls]))


# ------------------------------------------------------------------------- 1. ir.py: the op groups
def test_op_classes_are_the_op_union_in_order():
    from typing import get_args
    assert ir.OP_CLASSES == get_args(get_args(ir.Op)[0]), "clockworks_dist/ir.py: OP_CLASSES is the Op union"
    assert len(set(ir.KINDS)) == len(ir.KINDS), "clockworks_dist/ir.py: two op classes share a kind"


@pytest.mark.parametrize("name,sync", [("DELIVERY_KINDS", Sync.DELIVERY), ("WAIT_KINDS", Sync.WAIT),
                                       ("COLLECTIVE_KINDS", Sync.COLLECTIVE)])
def test_the_ir_op_groups_agree_with_the_rules(name, sync):
    derived = _kinds_whose_rule(lambda r: r.sync is sync)
    listed = getattr(ir, name)
    assert listed == derived, (
        f"clockworks_dist/ir.py: {name} must list exactly the kinds whose rule has sync {sync} "
        f"(semantics/rules.py); missing {sorted(derived - listed)}, extra {sorted(listed - derived)}")


def test_fenced_kinds_agree_with_the_rules():
    derived = _kinds_whose_rule(lambda r: r.fenced)
    assert ir.FENCED_KINDS == derived, (
        "clockworks_dist/ir.py: FENCED_KINDS must list exactly the kinds whose rule sets `fenced` "
        f"(semantics/rules.py); missing {sorted(derived - ir.FENCED_KINDS)}, "
        f"extra {sorted(ir.FENCED_KINDS - derived)}")
    assert ir.FENCED_KINDS <= ir.DELIVERY_KINDS, (
        "clockworks_dist/semantics/rules.py: only a delivery (Sync.DELIVERY) can be `fenced`")
