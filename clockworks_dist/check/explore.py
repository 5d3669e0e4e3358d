"""The frontier search: visits states from the initial one, through the actions the reducer keeps,
until the frontier is empty (complete) or a bound stops it (incomplete). Every state it reaches is
kept, with its parent, so a frontier can be a queue (`BreadthFirst`: shortest counterexamples) or a
stack. Depth-first checks run on `dfs.depth_first` instead, which walks one path in place."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Protocol

from ..semantics.budget import RELEASE_S, Deadline
from ..semantics.machine import Model, State
from .por import Reducer
from .properties import Observer


class Frontier(Protocol):
    """The states still to visit: `DepthFirst` (a stack) or `BreadthFirst` (a queue)."""

    name: str

    def push(self, state: State) -> None: ...

    def pop(self) -> State: ...

    def __len__(self) -> int: ...

    def __iter__(self): ...  # the states still to visit, in the order they were pushed


@dataclass
class Outcome:
    """What a search found: counts, whether it covered every reachable state (`complete`) or what
    stopped it, the properties' observer (its violations), every terminal state it reached (nothing
    enabled) and the actions of the first complete execution it found (every op done, nothing in
    flight), if any."""

    states: int
    transitions: int
    seconds: float
    complete: bool
    stopped_by: str | None
    observer: Observer
    terminals: list[State]
    first_path: list[tuple] | None
    order: object | None = None  # the static order the reduction built (`must.MustOrder`), if it did
    stored: int | None = None  # the states the search keeps (dfs: its branch points; bfs: every state)


def compact(state: State, pool: dict) -> State:
    """`state` with its parts shared with the states stored before it: one copy of each equal
    program-counter vector, memory row, memory, signals and deliveries in flight (`pool` holds them).
    Equal to `state`, so what the search visits and counts is the same; a stored state then costs its
    own tuple and the parts no state before it had (bench_checker_memory.py)."""
    get = pool.setdefault
    pcs, done, mem, sigs, flight = state
    rows = tuple([get(row, row) for row in mem])
    return State(get(pcs, pcs), get(done, done), get(rows, rows), get(sigs, sigs), get(flight, flight))


def path_to(parents: dict, state: State) -> list[tuple]:
    """Follow the parent links back to the initial state; the actions in execution order."""
    actions = []
    link = parents[state]
    while link is not None:
        state, action = link
        actions.append(action)
        link = parents[state]
    return actions[::-1]


def explore(model: Model, frontier: Frontier, *, reduction: bool = True, max_states: int | None = None,
            timeout: float | None = None, progress: Callable[[int, int, float], None] | None = None,
            deadline: Deadline | None = None) -> Outcome:
    """Search the state space from `model.initial()`; stop at `max_states` states or when
    `timeout` seconds have passed (or the caller's `deadline`, which then replaces it). Raises
    `OutOfTime` if the deadline passes before the search starts (evaluating the postcondition)."""
    start = time.perf_counter()
    if deadline is None:
        deadline = Deadline(timeout)
    parents: dict[State, tuple[State, tuple] | None] = {}
    observer = Observer(model, lambda state: path_to(parents, state), deadline)
    reducer = Reducer(model) if reduction else None
    pool: dict = {}  # the parts of the stored states, one copy each (`compact`)
    init = compact(model.initial(), pool)
    parents[init] = None
    frontier.push(init)
    transitions = 0
    stopped_by = None
    last_report = start
    visited = 0
    ends: list[State] = []  # the terminal states visited, in the order visited
    while len(frontier):
        state = frontier.pop()
        visited += 1
        enabled = model.enabled(state)
        observer.visit(state, enabled)
        if not enabled:
            ends.append(state)
        chosen = reducer.choose(state, enabled) if reducer is not None else enabled
        for action in chosen:
            nxt = model.apply(state, action)
            transitions += 1
            if nxt not in parents:
                nxt = compact(nxt, pool)
                parents[nxt] = (state, action)
                frontier.push(nxt)
        if deadline.expired(len(parents) * RELEASE_S):  # every state: at thousands of ranks one can take seconds
            stopped_by = "timeout"
            break
        if visited & 255 == 0:
            now = time.perf_counter()
            if progress is not None and now - last_report > 0.25:
                progress(len(parents), transitions, now - start)
                last_report = now
        if max_states is not None and len(parents) >= max_states and len(frontier):
            stopped_by = "max_states"
            break
    # The terminal states reached: those visited, then those still in the frontier (a search that
    # stopped early), each found once. A queue visits in the order it stores, so this is the order of
    # `parents`. Looking at every stored state again here cost ~40 us a state after the search, past
    # the deadline; the frontier is looked at only while time is left (the outcome is incomplete then).
    terminals = ends
    for i, state in enumerate(frontier):
        if i & 255 == 0 and deadline.expired():
            break
        if not model.enabled(state):
            terminals.append(state)
    seconds = time.perf_counter() - start
    first = next((state for state in terminals if model.done(state) and not state.in_flight), None)
    return Outcome(states=len(parents), transitions=transitions, seconds=seconds,
                   complete=stopped_by is None, stopped_by=stopped_by, observer=observer, terminals=terminals,
                   first_path=path_to(parents, first) if first is not None else None, stored=len(parents))
