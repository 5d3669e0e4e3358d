"""The add-an-op checklist (`clockworks_dist/semantics/rules.py`, its docstring), guarded: for every
op class of `ir.OP_CLASSES`, one test per item of the checklist that fails when that item is
forgotten, with a message that names the file to edit."""

from __future__ import annotations

import importlib
import importlib.util
import itertools
from pathlib import Path
from typing import Literal, Union, get_args, get_origin

import pytest

from clockworks_dist import ir
from clockworks_dist.semantics import rules
from clockworks_dist.semantics.rules import Sync

KIND = {cls: cls.model_fields["kind"].default for cls in ir.OP_CLASSES}


def _kinds_whose_rule(test) -> frozenset[str]:
    return frozenset(kind for cls, kind in KIND.items() if cls in rules.RULES and test(rules.RULES[cls]))


# ------------------------------------------------------------------------- 1. ir.py: the op groups
def test_op_classes_are_the_op_union_in_order():
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


# ---------------------------------------------------------------- sample instances of every op class
RANK, PE = 0, 1  # samples are issued by rank 0 and target PE 1 (so a remote access is told apart)
REGION_OF = {"src": "s_src", "dst": "s_dst", "into": "t_into", "srcs": "s_srcs", "reads": "s_reads",
             "writes": "s_writes", "target": "s_target"}
SIG0, SIG1 = ir.SignalRef(signal="flag", index=0), ir.SignalRef(signal="flag", index=1)
LOC = ir.SourceLoc(file="sample.py", line=1)


def _choices(cls, name: str, field) -> list:
    """The values a sample of `cls` takes for field `name`: every value of a Literal or bool, both
    arms of a SignalRef | Region; one plain value otherwise."""
    ann = field.annotation
    args = [a for a in get_args(ann) if a is not type(None)]
    region = ir.Region(buffer=REGION_OF.get(name, name), start=0, stop=4)
    if get_origin(ann) is Literal:
        return list(get_args(ann))
    if get_origin(ann) is Union and len(args) == 1 and get_origin(args[0]) is Literal:
        return [None, *get_args(args[0])]
    if ann is bool:
        return [False, True]
    if set(args) == {ir.SignalRef, ir.Region}:
        return [SIG0, ir.Region(buffer=REGION_OF["target"], start=0, stop=1)]
    if ann is ir.Region or (args == [ir.Region] and field.is_required()):
        return [region]
    if ann is ir.SignalRef:
        return [SIG0]
    if get_origin(ann) is tuple:
        inner = get_args(ann)[0]
        if inner is ir.SignalRef:
            return [(SIG0, SIG1)]
        if inner is ir.Region:
            return [(region,)]
        if inner is str or get_args(inner)[:1] == (str,):  # names (a thread barrier's threads)
            return [("t0", "t1")]
        return [(sample(ir.Send), sample(ir.Recv))]  # a group's members
    if ann is int:
        return [{"peer": PE, "pe": PE, "root": 0, "cond": 0}.get(name, 3)]
    if ann is float:
        return [1.0]
    if not field.is_required():
        return [field.default]
    if ann is str:
        return ["kernel"]
    raise AssertionError(f"tests/test_add_an_op.py: teach _choices() to build field {cls.__name__}.{name} ({ann})")


def samples(cls) -> list:
    """Instances of op class `cls`: every combination of its enumerable fields' values."""
    fields = {n: f for n, f in cls.model_fields.items() if n not in ("kind", "loc")}
    names = list(fields)
    return [cls(loc=LOC, **dict(zip(names, values)))
            for values in itertools.product(*(_choices(cls, n, fields[n]) for n in names))]


def sample(cls):
    return samples(cls)[0]


ALL_SAMPLES = [(KIND[cls], op) for cls in ir.OP_CLASSES for op in samples(cls)]


def _ids(cases):
    return [f"{kind}-{i}" for i, (kind, _) in enumerate(cases)]


# ------------------------------------------------------------------ 2. semantics/rules.py: the rule
@pytest.mark.parametrize("cls", ir.OP_CLASSES, ids=KIND.get)
def test_every_op_class_has_a_rule(cls):
    assert cls in rules.RULES, (f"clockworks_dist/semantics/rules.py: no rule for {cls.__name__} (a Rule subclass "
                                f"with op_class = ir.{cls.__name__})")
    assert rules.rule(KIND[cls]) is rules.RULES[cls]


def _signal_accesses(op):
    """The accesses of `op` (issued by RANK) to a signal word that are not a wait's reads of its own words."""
    r = rules.rule(op)
    if r.sync is Sync.WAIT:
        return []
    return [a for a in r.accesses(op, RANK) if a.space == rules.SIG]


# effects a signal access of each mode may have (a fetch_add is SIG_SET: ordered with everything)
_EFFECTS_OF_MODE = {rules.Mode.SIG_ADD: {"add"}, rules.Mode.SIG_SET: {"add", "set", "clear", "any"},
                   rules.Mode.SIG_STORE: {"set"},
                    rules.Mode.SIG_READ: {"read"}}


@pytest.mark.parametrize("kind,op", ALL_SAMPLES, ids=_ids(ALL_SAMPLES))
def test_a_rule_that_touches_a_signal_word_says_how_in_signal_effect(kind, op):
    """The reduction (`machine.Model._may_wrap`) lets a ge/gt wait commute with adds only on words
    no add can wrap, and counts the adds from `signal_effect`: an op that adds to a word but whose
    rule's signal_effect is None would make the reduction unsound."""
    effect = rules.rule(op).signal_effect(op)
    touched = _signal_accesses(op)
    where = f"clockworks_dist/semantics/rules.py: {type(rules.rule(op)).__name__}.signal_effect for {op!r}"
    if not touched:
        assert effect is None, f"{where}: returns {effect} but its accesses touch no signal word"
        return
    assert effect is not None, f"{where}: returns None but the rule's accesses touch {touched}"
    word, how, value = effect
    for a in touched:
        assert a.where == word and a.owner == op.pe, f"{where}: names {word}, the accesses {a}"
        assert how in _EFFECTS_OF_MODE.get(a.mode, set()), f"{where}: effect {how!r} but the access mode is {a.mode!r}"
    assert isinstance(value, int)


WAIT_SAMPLES = [(k, op) for k, op in ALL_SAMPLES if rules.rule(op).sync is Sync.WAIT]


@pytest.mark.parametrize("kind,op", ALL_SAMPLES, ids=_ids(ALL_SAMPLES))
def test_a_wait_says_what_it_awaits(kind, op):
    """The machine and the z3 wait check (`check/symbolic/waits.py`) read a wait's words and
    comparison from `rule.awaits`."""
    r = rules.rule(op)
    awaits = r.awaits(op, RANK)
    where = f"clockworks_dist/semantics/rules.py: {type(r).__name__}.awaits"
    if r.sync is not Sync.WAIT:
        assert awaits is None, f"{where} answers for an op that does not wait (sync {r.sync})"
        return
    assert awaits is not None, f"{where} is None for a wait"
    read = {a.where for a in r.accesses(op, RANK) if a.space == rules.SIG}
    assert set(awaits.words) == read, f"{where}: words {awaits.words}, but the accesses read {read}"


# ------------------------------------------------------------------- 3. dsl/trace.py: the DSL method
# The Rank methods that write an op of each kind, where the kind is not the method's name.
DSL_METHODS = {"fetch_atomic": "fetch_add", "team_split": "team_split_strided"}


@pytest.mark.parametrize("cls", ir.OP_CLASSES, ids=KIND.get)
def test_every_op_class_has_a_documented_dsl_method(cls):
    """That the methods write every op class is `tests/test_semantics.py::test_the_dsl_writes_every_op_class`."""
    from clockworks_dist.dsl.trace import Rank

    name = DSL_METHODS.get(KIND[cls], KIND[cls])
    method = getattr(Rank, name, None)
    assert callable(method), (f"clockworks_dist/dsl/trace.py: no Rank.{name} for {cls.__name__} (or name the method "
                              "in DSL_METHODS of tests/test_add_an_op.py)")
    assert (method.__doc__ or "").strip(), (f"clockworks_dist/dsl/trace.py: Rank.{name} needs a docstring that states "
                                            f"the op's semantics (help(r.{name}))")


@pytest.mark.parametrize("kind,op", ALL_SAMPLES, ids=_ids(ALL_SAMPLES))
def test_the_json_checker_knows_which_fields_live_on_the_target_pe(kind, op):
    """`dsl/validate_json.py` checks a JSON schedule's regions and signal words against the
    declarations of the rank they live on: `_REMOTE` and `_REMOTE_SIGNALS` must name the fields
    the rule accesses on `op.pe`."""
    from clockworks_dist.dsl import validate_json

    if getattr(op, "pe", None) is None:
        return
    remote = {(a.field, a.space) for a in rules.rule(op).accesses(op, RANK) if a.owner == PE}
    listed = {(f, rules.MEM) for f in validate_json._REMOTE.get(kind, ()) if isinstance(getattr(op, f), ir.Region)}
    if kind in validate_json._REMOTE_SIGNALS:
        listed |= {(f, rules.SIG) for f in ("signal", "target") if isinstance(getattr(op, f, None), ir.SignalRef)}
    assert listed == remote, (f"clockworks_dist/dsl/validate_json.py: _REMOTE / _REMOTE_SIGNALS for {kind} name "
                              f"{sorted(listed)}, but its rule accesses {sorted(remote)} on the target PE")


# ---------------------------------------------------------------------------- 4. perf/costs.py
def _module(*names):
    for name in names:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError:
            continue
    raise AssertionError(f"tests/test_add_an_op.py: none of {names} imports; it moved: name its new place here")


@pytest.mark.parametrize("cls", ir.OP_CLASSES, ids=KIND.get)
def test_every_op_class_has_a_cost(cls):
    costs = _module("clockworks_dist.perf.costs")
    assert KIND[cls] in costs.COSTS, f"clockworks_dist/perf/costs.py: COSTS has no entry for {KIND[cls]}"


# --------------------------------------------------------------------------- 5. the backend tables
# Every registered backend decides every op class: tests/test_semantics.py
# (test_every_registered_backend_decides_every_op_class), tests/test_runtime_cupy.py
# (test_the_cupy_table_decides_every_op_class) and tests/test_runtime.py; not repeated here.


# ------------------------------------- 6. lowering/repeat.py: epochs of the words an op updates
def _repeat():
    return _module("clockworks_dist.lowering.repeat")


def _one_op_schedule(op) -> ir.Schedule:
    buffers = tuple(ir.BufferDecl(name=n, count=4, dtype="int64", symmetric=True, loc=LOC) for n in REGION_OF.values())
    signals = (ir.SignalDecl(name="flag", count=2, loc=LOC),)
    programs = tuple(ir.Program(rank=r, buffers=buffers, signals=signals, ops=(op,) if r == RANK else ())
                     for r in (0, 1))
    return ir.Schedule(name="sample", world=2, ranks_per_node=2, loc=LOC, programs=programs)


EFFECT_SAMPLES = [(k, op) for k, op in ALL_SAMPLES if rules.rule(op).signal_effect(op) is not None]


@pytest.mark.parametrize("kind,op", EFFECT_SAMPLES, ids=_ids(EFFECT_SAMPLES))
def test_repeat_gives_every_updated_signal_word_an_epoch_or_refuses_it(kind, op):
    """`repeat.epochs` must see every op that changes a signal word (its `_updates`), and
    `repeat._shift` must shift every set value by the word's epoch: a repeated schedule whose
    update it missed would be verified with the word's value of one call."""
    repeat = _repeat()
    word, how, value = rules.rule(op).signal_effect(op)
    key = (op.pe, word.signal, word.index)
    where = f"{repeat.__file__}: _updates / _shift for {op!r}"
    try:
        steps = repeat.epochs(_one_op_schedule(op))
    except repeat.RepeatError:
        return  # refused, with its reason: sound
    assert how in ("add", "set"), f"{where}: effect {how!r} can carry no epoch, but repeat accepts it"
    assert key in steps and steps[key][0] == how, f"{where}: the word's epoch is {steps.get(key)}, the op {how}s"
    shifted = repeat._shift(op, RANK, 1, steps)
    moved = rules.rule(shifted).signal_effect(shifted)
    expected = value + steps[key][1] if how == "set" else value
    assert moved[2] == expected, f"{where}: call 1 {how}s {moved[2]}, expected {expected}"


@pytest.mark.parametrize("kind,op", WAIT_SAMPLES, ids=_ids(WAIT_SAMPLES))
def test_repeat_shifts_every_wait_by_its_words_epoch(kind, op):
    repeat = _repeat()
    words = rules.rule(op).awaits(op, RANK).words
    steps = {(RANK, w.signal, w.index): ("add", 5) for w in words}
    shifted = repeat._shift(op, RANK, 1, steps)
    assert shifted.value == op.value + 5, f"{repeat.__file__}: _shift leaves {op!r} unshifted in call 1"


# ------------------------------------------------ 7. tests/test_por_properties.py: the strategy
# Kinds the hypothesis strategy does not draw, and why. Every other kind must be drawn.
POR_PROPERTIES = Path(__file__).with_name("test_por_properties.py")
NOT_IN_POR_STRATEGY = {
    kind: "a collective other than all_reduce, all_gather, reduce_scatter and barrier differs from them only in "
          "its flows; the reduction treats every collective alike (one joint step, then one landing per member), "
          "and all_to_all reads its source until it lands as reduce_scatter does"
    for kind in ("broadcast", "reduce_to", "all_to_all")}


@pytest.fixture(scope="module")
def por_strategy_kinds() -> set[str]:
    from hypothesis import HealthCheck, given, settings

    spec = importlib.util.spec_from_file_location("_por_properties", POR_PROPERTIES)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    seen: set[str] = set()

    def drawn(strategy, examples: int):
        @settings(max_examples=examples, derandomize=True, database=None, deadline=None,
                  suppress_health_check=list(HealthCheck))
        @given(strategy)
        def draw(plan):
            for program in module.build(plan).programs:
                for op in program.all_ops():
                    seen.update([op.kind, *(m.kind for m in getattr(op, "ops", ()))])

        draw()

    # each strategy on its own, so that what one draws does not hide what the other never draws
    drawn(module.plans(), 400)
    drawn(module.threaded_plans(), 200)
    return seen


@pytest.mark.parametrize("cls", ir.OP_CLASSES, ids=KIND.get)
def test_the_por_property_strategy_draws_every_op_class(cls, por_strategy_kinds):
    kind = KIND[cls]
    if kind in NOT_IN_POR_STRATEGY:
        assert kind not in por_strategy_kinds, \
            f"tests/test_add_an_op.py: {kind} is drawn now: drop it from NOT_IN_POR_STRATEGY"
        return
    assert kind in por_strategy_kinds, (
        f"tests/test_por_properties.py: the strategy (`events`, `one_sided`, `_emit`) never draws {kind}; add it, or "
        "list it in NOT_IN_POR_STRATEGY of tests/test_add_an_op.py with the reason")
