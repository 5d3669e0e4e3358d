"""z3, imported here and nowhere else in the package (on first use), and the solver of the size
obligations: admissible valuations of the `cw.size` symbols, batched refutation, counterexamples."""

from __future__ import annotations

from typing import Iterable

from ... import ir
from ...errors import MissingDependency
from ...semantics.budget import UNBOUNDED, Deadline
from .forms import Form

SOLVER_TIMEOUT_MS = 10_000


def timeout_ms(deadline: Deadline) -> int:
    """A solver's timeout: the usual cap, or less when the check's deadline is nearer."""
    remaining = deadline.remaining()
    if remaining is None:
        return SOLVER_TIMEOUT_MS
    return max(1, min(SOLVER_TIMEOUT_MS, int(remaining * 1000)))


def z3_module():
    """The z3 module, or `MissingDependency` with the fix."""
    try:
        import z3
    except ImportError as exc:  # pragma: no cover - z3-solver is a declared dependency
        raise MissingDependency(
            "the symbolic checks need the z3 solver, which is not installed "
            "(fix: pip install z3-solver, or reinstall with pip install clockworks-dist)") from exc
    return z3


class Solver:
    """z3 variables for the symbols, their constraints, and batched refutation of obligations."""

    def __init__(self, z3, symbols: Iterable[ir.Symbol], deadline: Deadline = UNBOUNDED):
        self.z3 = z3
        self.deadline = deadline
        self.symbols = {s.name: s for s in symbols}
        self.vars: dict[str, object] = {}
        self.constraints: list = []
        self._exprs: dict[Form, object] = {}

    def var(self, name: str):
        """The z3 variable of a symbol, constrained to its admissible values on first use."""
        if name not in self.vars:
            z3 = self.z3
            symbol = self.symbols.get(name) or ir.Symbol(name=name, value=1)
            # multiple_of as a substitution (CHUNK = 2*t) keeps every formula linear without `mod`.
            if symbol.multiple_of > 1:
                var = symbol.multiple_of * z3.Int(f"{name}__q")
            else:
                var = z3.Int(name)
            self.constraints.append(var >= symbol.min)
            if symbol.max is not None:
                self.constraints.append(var <= symbol.max)
            self.vars[name] = var
        return self.vars[name]

    def expr(self, form: Form):
        """The z3 expression of a form."""
        if form not in self._exprs:
            z3 = self.z3
            terms = [coeff * self.var(name) for name, coeff in form[1]]
            self._exprs[form] = z3.Sum(terms + [z3.IntVal(form[0])]) if terms else z3.IntVal(form[0])
        return self._exprs[form]

    def _fresh(self):
        self.deadline.check("the z3 size proofs")
        solver = self.z3.Solver()
        solver.set(timeout=timeout_ms(self.deadline))
        solver.add(*self.constraints)
        return solver

    def refute(self, negations: list) -> tuple[list[int], list[int]]:
        """Indices of the negations that some admissible valuation satisfies, and of those z3 could
        not decide. One query proves a whole batch; each model found retires every negation it
        satisfies, so the query count is about the number of distinct failures plus one."""
        z3 = self.z3
        if not negations:
            return [], []
        solver = self._fresh()
        remaining = list(range(len(negations)))
        failing: list[int] = []
        while remaining:
            self.deadline.check("the z3 size proofs")
            solver.push()
            solver.add(z3.Or([negations[i] for i in remaining]))
            verdict = solver.check()
            model = solver.model() if verdict == z3.sat else None
            solver.pop()
            if verdict == z3.unsat:
                return failing, []
            self.deadline.check("the z3 size proofs")  # z3 gives up (unknown) at the deadline
            if model is None:  # unknown: decide one by one
                return self._one_by_one(solver, negations, remaining, failing)
            hit = [i for i in remaining if z3.is_true(model.eval(negations[i], model_completion=True))]
            if not hit:  # cannot happen for a sound model; do not loop forever
                return self._one_by_one(solver, negations, remaining, failing)
            failing.extend(hit)
            done = set(hit)
            remaining = [i for i in remaining if i not in done]
        return failing, []

    def _one_by_one(self, solver, negations, remaining, failing):
        unknown = []
        for i in remaining:
            self.deadline.check("the z3 size proofs")
            solver.push()
            solver.add(negations[i])
            verdict = solver.check()
            solver.pop()
            if verdict == self.z3.sat:
                failing.append(i)
            elif verdict != self.z3.unsat:
                unknown.append(i)
        return failing, unknown

    def failing_sizes(self, negation, names: set[str], traced: dict[str, int]) -> str:
        """Which sizes fail, as a note for the message: for one symbol, the range of failing values
        and whether every admissible value in it fails; always that the traced sizes are fine."""
        shown = ", ".join(f"{name} = {traced[name]}" for name in sorted(names) if name in traced)
        tail = ""
        if shown and set(names) <= set(traced):
            at_traced = self._fresh()
            at_traced.add(negation, *(self.var(name) == traced[name] for name in names))
            fails = at_traced.check() == self.z3.sat
            tail = f", the traced {shown} included" if fails else \
                f"; the traced {shown} {'is' if len(names) == 1 else 'are'} fine"
        if len(names) != 1 or not set(names) <= set(self.symbols):
            return f" (other sizes may fail too{tail})"
        name = next(iter(names))
        var = self.var(name)
        low, high = self._extreme(negation, var, minimize=True), self._extreme(negation, var, minimize=False)
        if low is None:
            return f" (other sizes may fail too{tail})"
        if high is None:
            span = f"{name} >= {low}"
            every = self._never_holds(self.z3.And(var >= low), negation)
        elif high == low:
            return f" (only {name} = {low} fails{tail})"
        else:
            span = f"{name} from {low} to {high}"
            every = self._never_holds(self.z3.And(var >= low, var <= high), negation)
        if every:
            return f" (it fails for every admissible {span}{tail})"
        if name in traced and self._never_holds(var != traced[name], negation):
            return f" (it fails for every admissible {name} but the traced {traced[name]})"
        return f" (it fails for some admissible {span}, not all{tail})"

    def _optimizer(self, negation):
        """A z3 optimizer over the admissible valuations that satisfy `negation`."""
        self.deadline.check("the z3 size proofs")
        opt = self.z3.Optimize()
        opt.set(timeout=timeout_ms(self.deadline))
        opt.add(*self.constraints)
        opt.add(negation)
        return opt

    def _extreme(self, negation, var, minimize: bool) -> int | None:
        """The least (or greatest) admissible value of `var` satisfying `negation`; None when
        unbounded or undecided."""
        z3 = self.z3
        opt = self._optimizer(negation)
        handle = opt.minimize(var) if minimize else opt.maximize(var)
        if opt.check() != z3.sat:
            return None
        value = opt.upper(handle) if not minimize else opt.lower(handle)
        return value.as_long() if z3.is_int_value(value) else None

    def _never_holds(self, within, negation) -> bool:
        """True if every admissible valuation `within` satisfies `negation` (z3 proves it)."""
        solver = self._fresh()
        solver.add(within, self.z3.Not(negation))
        return solver.check() == self.z3.unsat

    def valuation(self, negation) -> dict[str, int]:
        """An admissible valuation satisfying `negation`, as close as z3 finds to the traced one."""
        z3 = self.z3
        opt = self._optimizer(negation)
        distance = []
        for name, var in self.vars.items():
            if name in self.symbols:
                traced = self.symbols[name].value
                distance.append(z3.If(var >= traced, var - traced, traced - var))
        if distance:
            opt.minimize(z3.Sum(distance))
        if opt.check() != z3.sat:  # fall back to any model
            solver = self._fresh()
            solver.add(negation)
            if solver.check() != z3.sat:
                return {}
            model = solver.model()
        else:
            model = opt.model()
        return {name: model.eval(var, model_completion=True).as_long() for name, var in self.vars.items()}

