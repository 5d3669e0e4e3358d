"""Max-min fair sharing of link bandwidth between concurrent flows.

A flow crosses a list of resources (directed links, a GPU's HBM) and may carry its own ceiling
(a channel or thread-block rate). A flow may also load a resource with only a fraction of its rate
(`weights`: e.g. the acknowledgements its data draws on the opposite direction of a link).
Progressive filling: raise every unfrozen flow's rate together until a resource saturates or a flow
reaches its ceiling; freeze those flows; repeat. The result is the unique max-min fair allocation,
recomputed whenever a flow starts or finishes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

EPS = 1e-12


@dataclass
class Flow:
    """`remaining` bytes over `resources`, at most `ceiling` bytes/us (None: no ceiling)."""

    fid: int
    resources: tuple[int, ...]
    remaining: float
    ceiling: float | None = None
    rate: float = 0.0
    tag: object = None
    carried: dict[int, float] = field(default_factory=dict)
    weights: tuple[float, ...] | None = None  # per resource; None: 1.0 each

    def loads(self):
        """(resource, bytes on it per byte of the flow) pairs."""
        return zip(self.resources, self.weights or (1.0,) * len(self.resources))


def max_min_rates(flows: list[Flow], capacity: list[float]) -> None:
    """Set `flow.rate` for every flow (bytes per microsecond), max-min fair."""
    active = [f for f in flows if f.remaining > EPS]
    for f in flows:
        f.rate = 0.0
    left = {}
    users: dict[int, list[tuple[Flow, float]]] = {}  # per resource: its unfrozen flows, in order
    for f in active:
        for r, w in f.loads():
            if w > 0:
                left.setdefault(r, capacity[r])
                users.setdefault(r, []).append((f, w))
    unfrozen = active
    level = 0.0
    while unfrozen:
        # the next increment at which a resource fills up or a flow hits its ceiling
        step = float("inf")
        loads = {r: sum(w for _, w in fs) for r, fs in users.items()}
        for r, load in loads.items():
            if load:
                step = min(step, left[r] / load)
        for f in unfrozen:
            if f.ceiling is not None:
                step = min(step, f.ceiling - level)
        if step == float("inf"):  # flows that use no resource and have no ceiling
            for f in unfrozen:
                f.rate = float("inf")
            break
        step = max(step, 0.0)
        level += step
        for r, load in loads.items():
            left[r] -= step * load
        frozen = set()
        for f in unfrozen:
            f.rate = level
            if f.ceiling is not None and f.ceiling - level <= EPS * max(1.0, level):
                frozen.add(id(f))
        for r, fs in users.items():
            if left[r] <= EPS * max(1.0, capacity[r]):
                frozen.update(id(f) for f, _ in fs)
        if not frozen:
            break
        unfrozen = [f for f in unfrozen if id(f) not in frozen]
        users = _without(users, frozen)


def _without(users: dict[int, list[tuple[Flow, float]]], frozen: set[int]) -> dict[int, list[tuple[Flow, float]]]:
    """The resources' flows less the frozen ones, in the same order (so every sum of loads adds the
    same numbers in the same order, to the last bit), and no resource left without flows."""
    kept = {}
    for r, fs in users.items():
        rest = [(f, w) for f, w in fs if id(f) not in frozen]
        if rest:
            kept[r] = rest
    return kept
