"""Naming actions in the user's terms: which ops an action executes, replay with last writers."""

from __future__ import annotations

from .. import ir
from ..semantics.match import Key, op_ref
from ..semantics.machine import (MEM, SIG, WRITE, ATOMIC_ADD, ATOMIC_OTHER, Action, Model, Post,
                                 State)
from .result import OpRef, Step
from ..semantics.rules import SIG_UPDATES


def action_keys(model: Model, action: Action | Post) -> list[Key]:
    """The op keys an action executes, issuer first."""
    kind = action.kind
    if kind == "step":
        return [(action.rank, action.index, None)]
    if kind == "p2p":
        skey = action.key
        return [skey, model.matches.recv_of[skey]]
    if kind == "coll":
        return list(model.coll_members[action.cid])
    if kind == "post":  # a posted op's pending accesses (`properties`): not an action of the machine
        return [action.key]
    landing = model.deliveries[action.key].completes
    return [landing] if landing is not None else [(action.issuer, action.index, None)]


def key_on(model: Model, action: Action | Post, owner: int) -> Key:
    """The op of `action` that accesses `owner`'s memory (deliveries: the issuing op)."""
    keys = action_keys(model, action)
    if action.kind in ("p2p", "coll"):
        for key in keys:
            if key[0] == owner:
                return key
    return keys[0]


def describe_action(model: Model, action: Action | Post) -> str:
    sched = model.sched
    kind = action.kind
    refs = [op_ref(sched, k) for k in action_keys(model, action)]
    if kind == "step":
        return f"rank {refs[0].rank}: {refs[0].text}"
    if kind == "p2p":
        return f"rank {refs[0].rank} -> rank {refs[1].rank}: {refs[0].text} / {refs[1].text}"
    if kind == "coll":
        return f"ranks {', '.join(str(r.rank) for r in refs)}: {refs[0].text}"
    if kind == "post":
        return f"rank {refs[0].rank}: {refs[0].text}, posted and not complete"
    d = model.deliveries[action.key]
    if d.completes is not None:
        return f"rank {refs[0].rank}: {refs[0].text} completing"
    if d.target == d.issuer:  # a non-blocking get lands in the issuer's own memory
        return f"rank {refs[0].rank}'s {refs[0].text} landing"
    return f"delivery to rank {d.target} of rank {refs[0].rank}'s {refs[0].text}"


def make_step(model: Model, action: Action | Post) -> Step:
    refs = tuple(op_ref(model.sched, k) for k in action_keys(model, action))
    at = model.deliveries[action.key].target if action.kind == "deliver" else None
    return Step(action=action, label=describe_action(model, action), ops=refs, at=at)


def region_text(model: Model, owner: int, lo: int, hi: int) -> str:
    names = model.layout.atom_names[owner]
    first, last = names[lo], names[hi - 1]
    if first[0] == last[0]:
        return f"{first[0]}[{first[1]}:{last[2]}]"
    return f"{first[0]}[{first[1]}:...] .. {last[0]}[...:{last[2]}]"


class ReplayError(Exception):
    """A recorded action is not enabled on replay: the model is not deterministic."""


def replay(model: Model, actions: list[Action]) -> tuple[list[State], dict[tuple[int, int], Key]]:
    """Re-execute a path from the initial state, tracking the op that last wrote each atom."""
    state = model.initial()
    states = [state]
    writer: dict[tuple[int, int], Key] = {}
    for step, action in enumerate(actions):
        if action not in model.enabled(state):
            raise ReplayError(f"step {step}: {action} is not enabled on replay; the model is nondeterministic "
                              "(a bug in the checker, please report it)")
        for owner, space, lo, hi, mode in model.footprint(action):
            if space == MEM and mode in (WRITE, ATOMIC_ADD, ATOMIC_OTHER):
                for atom in range(lo, hi):
                    writer[(owner, atom)] = key_on(model, action, owner)
        state = model.apply(state, action)
        states.append(state)
    return states, writer


def blocked_ops(model: Model, state: State, rank: int) -> list[OpRef]:
    """The op(s) a rank is stopped at (pending group members)."""
    pc = state.pcs[rank]
    if pc >= model.nops[rank]:
        return []
    c = model.code[rank][pc]
    if c.kind == "group":
        return [op_ref(model.sched, (rank, pc, sub)) for sub, _ in c.members if not (state.group_done[rank] >> sub) & 1]
    return [op_ref(model.sched, (rank, pc, None))]


def future_signal_writers(model: Model, state: State, owner: int, word: int) -> list[int]:
    """Ranks whose remaining ops (or in-flight deliveries) may still update a signal word."""
    found = set()
    for actor, index, _sub, lo, _hi, mode, _others in model.accessors[owner][SIG]:
        if lo == word and mode in SIG_UPDATES and index >= state.pcs[actor]:
            found.add(actor)
    for i, j, _ in state.in_flight:
        if any(o == owner and s == SIG and lo == word for o, s, lo, _h, _m in model.deliveries[(i, j)].footprint):
            found.add(i)
    return sorted(found)


def signal_text(model: Model, word: int) -> str:
    for name, offset in model.sig_offset.items():
        decl = next(d for d in model.sched.programs[0].signals if d.name == name)
        if offset <= word < offset + decl.count:
            return str(ir.SignalRef(signal=name, index=word - offset))
    return f"signal#{word}"
