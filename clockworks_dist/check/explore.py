"""The frontier search: visits states from the initial one, through the actions the reducer keeps,
until the frontier is empty (complete) or a bound stops it (incomplete). Every state it reaches is
kept, with its parent, so a frontier can be a queue (`BreadthFirst`: shortest counterexamples) or a
stack. Depth-first checks run on `dfs.depth_first` instead, which walks one path in place."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Protocol

from ..semantics.budget import Deadline
from ..semantics.machine import Model, State
from .por import Reducer
from .properties import Observer


class Frontier(Protocol):
    """The states still to visit: `DepthFirst` (a stack) or `BreadthFirst` (a queue)."""

    name: str

    def push(self, state: State) -> None: ...

    def pop(self) -> State: ...

    def __len__(self) -> int: ...


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
    init = model.initial()
    parents[init] = None
    frontier.push(init)
    transitions = 0
    stopped_by = None
    last_report = start
    visited = 0
    while len(frontier):
        state = frontier.pop()
        visited += 1
        enabled = model.enabled(state)
        observer.visit(state, enabled)
        chosen = reducer.choose(state, enabled) if reducer is not None else enabled
        for action in chosen:
            nxt = model.apply(state, action)
            transitions += 1
            if nxt not in parents:
                parents[nxt] = (state, action)
                frontier.push(nxt)
        if deadline.expired():  # every state: at thousands of ranks one state can take seconds
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
    seconds = time.perf_counter() - start
    terminals = [state for state in parents if not model.enabled(state)]
    first = next((state for state in terminals if model.done(state) and not state[4]), None)
    return Outcome(states=len(parents), transitions=transitions, seconds=seconds,
                   complete=stopped_by is None, stopped_by=stopped_by, observer=observer, terminals=terminals,
                   first_path=path_to(parents, first) if first is not None else None)
