"""The model checker: `check(schedule)` explores every interleaving DESIGN.md allows.

Pipeline, top to bottom:
1. `match`: pair sends with recvs and group collectives (static; mismatches stop here);
2. `Model`: compile the schedule into atoms, footprints and actions;
3. the search: depth first in place (`dfs.depth_first`) or breadth first over stored states
   (`explore`), with stubborn-set reduction (`por`) and the properties of `properties` checked at
   every visited state;
4. the symbolic checks (`symbolic`, z3) for sizes and waits;
5. a `CheckResult`: verified only if the search was complete and nothing was violated.
"""

from __future__ import annotations

import time
from typing import Callable

from .. import ir
from ..errors import CheckIncomplete, ScheduleError
from .bfs import BreadthFirst
from ..semantics.budget import Deadline, OutOfTime, cycle_collector_paused
from .dfs import depth_first
from .explore import Outcome, explore
from .hb import HappensBefore, happens_before as _stamp
from .must import MustOrder
from ..semantics.match import match
from ..semantics.machine import Model
from ..semantics.threads import Actors, expand
from .properties import expected_atoms
from .result import CheckResult, OpRef, Step, Violation
from ..semantics.rules import describe

_ORDER = {"collective_mismatch": 0, "send_recv_mismatch": 1, "symbolic_size": 2, "deadlock": 3,
          "unsatisfiable_wait": 4, "data_race": 5, "unfinished_output": 5.5, "wrong_result": 6,
          "nondeterministic_result": 7, "not_bitwise_reproducible": 8, "unfinished_deliveries": 9}


def check(schedule: ir.Schedule, *, strategy: str = "dfs", max_states: int | None = 1_000_000,
          timeout: float | None = 60.0, reduction: bool = True,
          progress: Callable[..., None] | None = None, symbolic: bool = True,
          found: list[CheckResult] | None = None) -> CheckResult:
    """Model-check a traced schedule; see the module docstring for the pipeline.

    `progress(states, transitions, seconds, depth=None, length=None)` is called now and then
    during the search (the depth-first search also says how far its current path is: `depth`
    actions of `length` in a complete execution).

    `timeout` bounds the whole check, every phase included: a phase that runs out of time makes
    the result incomplete (`stopped_by="timeout"`, `stopped_in` naming the phase), never
    verified; errors found before that still make it violated. The deadline stops the search, and
    the search leaves time to free the states it stored (`RELEASE_S` each): `check` returns within
    about 0.1 s of `timeout` (scripts/results/bench_checker_memory.md).

    `found`, for a caller that may have to stop the check from outside (the CLI's backstop): after the
    search, and before each later phase, the check appends the result it would return if its time ran
    out there, and the final result as soon as it is known, before the search's states are freed; so
    what the search found is never lost, whenever the check is stopped."""
    with cycle_collector_paused():
        return _check(schedule, strategy, max_states, timeout, reduction, progress, symbolic,
                      found if found is not None else [])


def _check(schedule: ir.Schedule, strategy: str, max_states: int | None, timeout: float | None, reduction: bool,
           progress: Callable[..., None] | None, symbolic: bool, found: list[CheckResult]) -> CheckResult:
    started = time.perf_counter()
    deadline = Deadline(timeout)
    violations: list[Violation] = []
    outcome = None

    def interim(phase: str) -> None:
        found.append(_out_of_time(schedule, violations, outcome, phase, started, strategy, reduction))

    try:
        actors, problems = expand(schedule)
        flat = actors.sched  # the schedule as the machine runs it: one program per actor (rank or thread)
        if not problems:
            matches, problems = match(flat, deadline)
        if problems:
            return CheckResult(schedule=schedule, verdict="violated",
                               violations=_sorted(_relabel([Violation.of(p) for p in problems], actors)),
                               states=0, transitions=0, seconds=time.perf_counter() - started, complete=True,
                               strategy=strategy, reduction=reduction)
        model = Model(flat, matches, deadline, home=actors.home)
        outcome = _search(model, strategy, reduction=reduction, max_states=max_states, progress=progress,
                          deadline=deadline)
        violations += outcome.observer.violations()
        if symbolic and actors.threaded:
            # the z3 checks read each op's accesses as its rank's own: they do not know threads yet. The
            # search has covered every interleaving at the traced sizes (a wait nothing satisfies is a
            # deadlock there), so what is left unproven is the other sizes
            if flat.symbols:
                violations.append(Violation(
                    kind="symbolic_unproven", ranks=(), ops=(),
                    message="the size proofs (every admissible value of " + ", ".join(s.name for s in flat.symbols)
                            + ") do not cover ranks with threads yet: verified at the traced sizes only"))
        elif symbolic and flat.symbols or symbolic and _has_waits(flat):
            interim("the symbolic checks")
            violations += _symbolic(flat, model, outcome, deadline)
        if any(d.completes is None for d in model.deliveries.values()):  # one-sided ops, not landings
            interim("the check of unfinished deliveries")
            from .symbolic import unfinished_deliveries

            order = outcome.order if outcome.order is not None else MustOrder(model, deadline)
            reported = frozenset((o.rank, o.index) for v in violations if v.kind == "unfinished_output" for o in v.ops)
            violations += unfinished_deliveries(flat, deadline, order, reported)
        violations = _relabel(violations, actors)
    except OutOfTime as exc:
        found.append(_out_of_time(schedule, violations, outcome, exc.phase, started, strategy, reduction))
        return found[-1]
    errors = [v for v in violations if v.severity == "error"]
    if errors:
        verdict = "violated"
    elif not outcome.complete:
        verdict = "incomplete"
    else:
        verdict = "verified"
    found.append(CheckResult(
        schedule=schedule, verdict=verdict, violations=_sorted(violations), states=outcome.states,
        transitions=outcome.transitions, seconds=time.perf_counter() - started, complete=outcome.complete,
        stopped_by=outcome.stopped_by, strategy=strategy, reduction=reduction,
        terminal_states=outcome.observer.terminals,
        stopped_in="the state search" if outcome.stopped_by else None))
    return found[-1]  # the search's states are freed as this frame ends, after `found` has the result


def _relabel(violations: list[Violation], actors: Actors) -> list[Violation]:
    """Violations found on the actors of a schedule with threads, as the user's schedule names them:
    each op by its rank and thread, each rank by its number (`semantics.threads`)."""
    if not actors.threaded:
        return violations
    return [v.relabel(actors) for v in violations]


def _out_of_time(schedule, violations, outcome, phase: str, started: float, strategy: str,
                 reduction: bool) -> CheckResult:
    """The result of a check whose deadline passed in `phase`: violated if an error was already
    found, else incomplete; the search's states, transitions and violations as it found them."""
    if outcome is not None and outcome.stopped_by == "timeout":
        phase = "the state search"
    errors = [v for v in violations if v.severity == "error"]
    return CheckResult(
        schedule=schedule, verdict="violated" if errors else "incomplete", violations=_sorted(violations),
        states=outcome.states if outcome else 0, transitions=outcome.transitions if outcome else 0,
        seconds=time.perf_counter() - started, complete=False, stopped_by="timeout", stopped_in=phase,
        strategy=strategy, reduction=reduction, terminal_states=outcome.observer.terminals if outcome else 0)


def _search(model: Model, strategy: str, *, reduction: bool, max_states: int | None, progress=None,
            deadline: Deadline | None = None) -> Outcome:
    """The state-space search of `strategy`: "dfs" in place, "bfs" over stored states."""
    if strategy == "bfs":
        return explore(model, BreadthFirst(), reduction=reduction, max_states=max_states, progress=progress,
                       deadline=deadline)
    return depth_first(model, reduction=reduction, max_states=max_states, progress=progress, deadline=deadline)


def _sorted(violations: list[Violation]) -> list[Violation]:
    return sorted(violations, key=lambda v: _ORDER.get(v.kind, 99))


def _has_waits(schedule: ir.Schedule) -> bool:
    return any(op.kind in ir.WAIT_KINDS for p in schedule.programs for op in p.ops)


def _symbolic(schedule: ir.Schedule, model: Model, outcome, deadline: Deadline) -> list[Violation]:
    from . import symbolic

    hb = _LazyOrder(model, outcome.first_path, deadline) if outcome.first_path is not None else None
    found = []
    if schedule.symbols:
        # Accesses that overlap at the traced sizes are the search's: it reports each race there once,
        # as a data race, or, stopped by a bound before it got there, leaves the result incomplete (a
        # size error for it would report the race twice, or claim every size from an unfinished search).
        found += symbolic.check_sizes(schedule, hb.unordered if hb else None, beyond_traced=True,
                                      deadline=deadline, matches=model.matches)
    if _has_waits(schedule):
        found += symbolic.check_waits(schedule, hb.ordered if hb else None, deadline)
    return found


class _LazyOrder:
    """The happens-before order of the first complete execution, stamped on the first question
    (the size check of a schedule whose regions are all chunk k against chunk m asks none)."""

    def __init__(self, model: Model, path: list[tuple], deadline: Deadline):
        self.model, self.path, self.deadline = model, path, deadline
        self.order: HappensBefore | None = None

    def _get(self) -> HappensBefore:
        if self.order is None:
            self.order = _stamp(self.model, self.path, self.deadline)
        return self.order

    def ordered(self, *args) -> bool:
        return self._get().ordered(*args)

    def unordered(self, *args) -> bool:
        return self._get().unordered(*args)


def compile_schedule(schedule: ir.Schedule) -> Model:
    """The schedule's transition system, for the APIs that need one execution or the expected
    values. A schedule that does not match statically (a send without its recv, collectives that
    differ) raises `ScheduleError` at the first mismatch's file:line; `check` reports every
    mismatch instead."""
    actors, problems = expand(schedule)
    if not problems:
        matches, problems = match(actors.sched)
    if problems:
        first = problems[0]
        ref = first.ops[0] if first.ops else None
        loc = ref.loc if ref is not None and ref.loc is not None else schedule.loc
        raise ScheduleError(first.message, file=loc.file, line=loc.line,
                            rank=ref.rank if ref is not None else None,
                            hint="run `clockworks check` for every mismatch")
    return Model(actors.sched, matches, home=actors.home)


def run_to_end(schedule: ir.Schedule) -> tuple[Model, list[tuple]]:
    """One execution of a schedule that matches statically: the actions of a path to the end."""
    from .por import Reducer

    model = compile_schedule(schedule)
    reducer = Reducer(model)
    state = model.initial()
    actions = []
    while True:
        enabled = model.enabled(state)
        if not enabled:
            break
        action = reducer.choose(state, enabled)[0]
        actions.append(action)
        state = model.apply(state, action)
    if not model.done(state):
        stuck = next(r for r in range(model.world) if state.pcs[r] < model.nops[r])
        op = model.sched.programs[stuck].ops[state.pcs[stuck]]
        raise ScheduleError("the schedule deadlocks", file=op.loc.file, line=op.loc.line, rank=model.home[stuck],
                            op=describe(op), hint="run `clockworks check` for the counterexample")
    return model, actions


def happens_before(schedule: ir.Schedule) -> HappensBefore:
    """The happens-before order of one execution of `schedule` (the same for every execution of a
    schedule the checker verifies)."""
    model, actions = run_to_end(schedule)
    return _stamp(model, actions)


def terminal_outcomes(schedule: ir.Schedule, *, reduction: bool = True, max_states: int | None = 200_000,
                      strategy: str = "dfs") -> frozenset[tuple]:
    """Every terminal state the search reaches, as (finished, positions, final values rendered as
    exact trees (`Values.render_tree`), signals): the reduced and the unreduced search must give the same set."""
    model = compile_schedule(schedule)
    outcome = _search(model, strategy, reduction=reduction, max_states=max_states)
    if not outcome.complete:
        raise CheckIncomplete(f"the search stopped at {outcome.states:,} states (max_states), so the set of "
                              "terminal states is not known")
    found = set()
    for state in outcome.terminals:
        values = tuple(tuple(model.values.render_tree(v) for v in row) for row in state.memory)
        found.add((model.done(state), state.pcs, values, state.signals))
    return frozenset(found)


def expected_values(schedule: ir.Schedule) -> dict[tuple[int, str, int, int], str]:
    """The postcondition, atom by atom: (rank, buffer, start, stop) -> expected value, rendered."""
    model = compile_schedule(schedule)
    out = {}
    for (rank, atom), (norm, _exp) in expected_atoms(model).items():
        buf, start, stop = model.layout.atom_names[rank][atom]
        out[(rank, buf, start, stop)] = model.values.render_normal(norm)
    return out


__all__ = ["CheckResult", "HappensBefore", "OpRef", "Step", "Violation", "check", "compile_schedule", "expected_values",
           "happens_before", "run_to_end", "terminal_outcomes"]
