"""The static order the reduction reads (`check.must.MustOrder`): every order it claims holds in
every execution prefix, checked on random walks through the corpus and through random schedules;
and what it derives by value (a one-shot's wait after its peer's put_signal, a counting barrier's
wait after both adds)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import clockworks_dist as cw
from clockworks_dist.check import compile_schedule
from clockworks_dist.check.must import MustOrder, _cannot_satisfy
from clockworks_dist.semantics.match import match
from clockworks_dist.semantics.order import delivery_event, op_event
from clockworks_dist.semantics.rules import Sync

from test_por_properties import SETTINGS, build, plans

ROOT = Path(__file__).resolve().parent.parent
PROTOCOLS = sorted((ROOT / "protocols").glob("*.py")) + sorted((ROOT / "protocols" / "buggy").glob("*.py"))


def assert_claims_hold_on_random_walks(sched, walks: int, rng: random.Random) -> None:
    """Walk the machine at random (to the end or a deadlock): whenever an event happens, every
    event the order puts before it has happened already, and no event it says never happens does.
    An action is its event (a step, a joint step, a landing, a delivery); the post of an op that
    completes jointly, and a rank's end, happen as the rank reaches them; a fence line is no one's
    event."""
    model = compile_schedule(sched)
    order = MustOrder(model)
    alive = [n for n in range(len(order.events)) if not order.dead[n] and order.events[n][0] != "fence"]
    before = {y: {x for x in alive if order.before(x, y)} for y in alive}

    def reached(rank: int, pc: int) -> int | None:
        joint = pc == model.nops[rank] or model.code[rank][pc].sync is Sync.P2P or model.code[rank][pc].cid is not None
        return order.ids.get(op_event(rank, pc)) if joint else None

    for _ in range(walks):
        state, happened = model.initial(), set()
        new = [reached(rank, 0) for rank in range(model.world)]
        while True:
            for event in new:
                if event is None:
                    continue
                assert not order.dead[event], f"{order.events[event]} happened; the order says it never does"
                missing = [order.events[x] for x in before[event] - happened]
                assert not missing, f"{order.events[event]} happened before {missing}, which the order puts first"
                happened.add(event)
            enabled = model.enabled(state)
            if not enabled:
                break
            action = rng.choice(enabled)
            after = model.apply(state, action)
            new = [order.action_event(action)] + [reached(rank, pc) for rank, pc in enumerate(after.pcs)
                                                  if pc != state.pcs[rank]]
            state = after


@pytest.mark.parametrize("path", PROTOCOLS, ids=lambda p: p.relative_to(ROOT / "protocols").as_posix())
def test_the_order_holds_on_random_walks_through_the_corpus(path):
    definition = cw.load_file(str(path))[0]
    world = min(definition.ranks)
    sched = definition.trace(world)
    if match(sched)[1]:
        pytest.skip("a static mismatch: no machine to walk")
    assert_claims_hold_on_random_walks(sched, 20, random.Random(path.stem))


@settings(max_examples=200, **SETTINGS)
@given(plans(), st.randoms(use_true_random=False))
def test_the_order_holds_on_random_walks_through_random_schedules(plan, rng):
    sched = build(plan)
    assume(not match(sched)[1])
    assert_claims_hold_on_random_walks(sched, 8, rng)


@settings(max_examples=80, **SETTINGS)
@given(plans(max_events=4, required="grouped_collective"), st.randoms(use_true_random=False))
def test_the_order_holds_on_random_walks_through_grouped_collectives(plan, rng):
    """Collectives inside groups, beside sends and recvs, posted in a different order per rank: each
    member's joint step and landing are events of their own, unordered with the group's other members."""
    sched = build(plan)
    assume(not match(sched)[1])
    assert_claims_hold_on_random_walks(sched, 8, rng)


def test_a_one_shot_wait_comes_after_its_peers_first_put_signal_only():
    (oneshot,) = cw.load_file(str(ROOT / "protocols" / "nvshmem_oneshot_allreduce.py"))
    sched = oneshot.trace(4)
    order = MustOrder(compile_schedule(sched))
    ops = sched.programs[1].ops
    waits = [i for i, op in enumerate(ops) if op.kind == "wait_until"]
    puts = {(r, i) for r, p in enumerate(sched.programs) for i, op in enumerate(p.ops)
            if op.kind == "put_signal" and op.pe == 1}
    first, again = waits[0], waits[3]  # ready[2] >= 1, then ready[2] >= 2 (peers 2, 3, 0 in turn)
    assert ops[first].signal.index == ops[again].signal.index == 2
    (_, one), (_, two) = sorted((r, i) for r, i in puts if r == 2)
    # the first wait returns after rank 2's first put_signal to rank 1 has landed, and before its
    # second one lands (that comes after the sync_all); the wait in the second iteration after it
    assert order.happens_before(delivery_event(2, one), op_event(1, first))
    assert order.happens_before(op_event(1, first), delivery_event(2, two))
    assert order.happens_before(delivery_event(2, two), op_event(1, again))


def test_a_counting_wait_needs_every_add_it_counts():
    def counting(r):
        flag = r.signal("flag")
        if r.rank == 0:
            r.signal_op(1, flag, 1, op="add")  # 0
            r.signal_op(1, flag, 1, op="add")  # 1
        else:
            r.wait_until(flag, "ge", 2)  # 0

    order = MustOrder(compile_schedule(cw.schedule(counting).trace(2)))
    assert order.happens_before(delivery_event(0, 0), op_event(1, 0))
    assert order.happens_before(delivery_event(0, 1), op_event(1, 0))


def test_the_value_test_is_sound_on_what_it_decides():
    updates = [(0, "add", 1), (1, "add", 1)]
    assert _cannot_satisfy("ge", 3, updates)
    assert not _cannot_satisfy("ge", 2, updates)
    assert _cannot_satisfy("eq", 2, [(0, "set", 1), (1, "set", 3)])
    assert not _cannot_satisfy("eq", 2, [(0, "set", 1), (1, "add", 1)])  # 1 + 1
    assert not _cannot_satisfy("ge", 1, [(0, "add", (1 << 64) - 1), (1, "add", 1)])  # may wrap: undecided
    assert not _cannot_satisfy("ge", 1, [(0, "any", 0)])
    assert not _cannot_satisfy("le", 1, [])  # 0 satisfies it
    assert _cannot_satisfy("ne", 0, [])
