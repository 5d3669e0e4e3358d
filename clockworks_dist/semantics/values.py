"""Symbolic values: what the checker's memory holds.

A value is an interned term: `in(rank, buffer, start, stop)` for initial contents, `const(v)`,
`op(name, children)` for a reduction exactly as associated by the schedule, `opaque(...)` for a
compute kernel and `atomic(...)` for an atomic update. Correctness compares *multisets* (sums
flattened and sorted), bitwise reproducibility compares the exact trees.
"""

from __future__ import annotations

# ------------------------------------------------------------------------------------ values
COMMUTATIVE = frozenset({"sum", "prod", "max", "min"})


class Values:
    """Interning table of value terms; ids are small ints, so states hash fast."""

    def __init__(self) -> None:
        self.terms: list[tuple] = []
        self.ids: dict[tuple, int] = {}
        self._norm: dict[int, tuple] = {}
        self._normal_ids: dict[tuple, int] = {}  # normal form -> its number
        self._normal_id_of: dict[int, int] = {}  # value id -> the number of its normal form

    def intern(self, term: tuple) -> int:
        found = self.ids.get(term)
        if found is None:
            found = len(self.terms)
            self.terms.append(term)
            self.ids[term] = found
        return found

    def initial(self, rank: int, buffer: str, start: int, stop: int) -> int:
        return self.intern(("in", rank, buffer, start, stop))

    def const(self, value) -> int:
        return self.intern(("const", value))

    def combine(self, op: str, children: tuple[int, ...]) -> int:
        """`children[0] op children[1] op ...`, associated left to right as a kernel computes it.

        Each node is binary, and the operands of a commutative node are put in a canonical order:
        `a + b` and `b + a` are bitwise equal in IEEE arithmetic; only association can differ."""
        acc = children[0]
        for child in children[1:]:
            pair = (acc, child) if op not in COMMUTATIVE or acc <= child else (child, acc)
            acc = self.intern(("op", op, pair))
        return acc

    def normal(self, vid: int) -> tuple:
        """Multiset normal form: nested same-op reductions flattened, operands sorted. A chain of
        same-op nodes is flattened in one walk, without the normal forms of its inner nodes (a sum
        of n terms costs n log n, not n squared, and no recursion n deep)."""
        found = self._norm.get(vid)
        if found is not None:
            return found
        term = self.terms[vid]
        if term[0] == "op" and term[1] in COMMUTATIVE:
            op, items, stack = term[1], [], list(term[2])
            while stack:
                child = stack.pop()
                norm = self._norm.get(child)
                if norm is None:
                    inner = self.terms[child]
                    if inner[0] == "op" and inner[1] == op:
                        stack.extend(inner[2])
                        continue
                    norm = self.normal(child)
                if norm[0] == "op" and norm[1] == op:
                    items.extend(norm[2])
                else:
                    items.append(norm)
            found = ("op", op, tuple(sorted(items, key=repr)))
        elif term[0] in ("opaque", "atomic"):
            found = term[:-1] + (tuple(self.normal(c) if isinstance(c, int) else c for c in term[-1]),)
        else:
            found = term
        self._norm[vid] = found
        return found

    def normal_number(self, norm: tuple) -> int:
        """A number per distinct normal form: equal numbers, equal multisets."""
        found = self._normal_ids.get(norm)
        if found is None:
            found = self._normal_ids[norm] = len(self._normal_ids)
        return found

    def normal_id(self, vid: int) -> int:
        """The number of `vid`'s normal form (`normal_number`), kept per value: comparing final
        values with the postcondition then costs a lookup, not a walk over their terms."""
        found = self._normal_id_of.get(vid)
        if found is None:
            found = self._normal_id_of[vid] = self.normal_number(self.normal(vid))
        return found

    def render(self, vid: int) -> str:
        return render_term(self.terms[vid], self.render)

    def render_normal(self, norm: tuple) -> str:
        return render_term(norm, self.render_normal, normal=True)

    def render_tree(self, vid: int) -> str:
        """The exact tree (association kept, as bitwise reproducibility compares it), with the two
        operands of each commutative node in the order of their renderings rather than of their ids:
        ids follow the order a search happened to create values in, so two searches of one schedule
        can put `a + b` and `b + a` (equal in IEEE arithmetic) the two ways round."""
        term = self.terms[vid]
        if term[0] == "op" and term[1] in COMMUTATIVE:
            parts = sorted(self.render_tree(c) for c in term[2])
            sym = _SYMBOL.get(term[1])
            return f"({sym.join(parts)})" if sym else f"{term[1]}({', '.join(parts)})"
        return render_term(term, self.render_tree)


_SYMBOL = {"sum": " + ", "prod": " * "}


def render_in(rank: int, buffer: str, start: int, stop: int) -> str:
    return f"{buffer}@r{rank}[{start}:{stop}]"


def render_term(term: tuple, child, normal: bool = False) -> str:
    kind = term[0]
    if kind == "in":
        return render_in(*term[1:])
    if kind == "const":
        return f"{term[1]:g}" if isinstance(term[1], float) else str(term[1])
    if kind == "op":
        parts = [child(c) for c in term[2]]
        sym = _SYMBOL.get(term[1])
        if sym:
            inner = sym.join(parts)
            return inner if normal else f"({inner})"
        return f"{term[1]}({', '.join(parts)})"
    if kind == "opaque":
        _, name, rank, index, k, children = term
        return f"{name}@r{rank}#{index}.{k}({', '.join(child(c) for c in children)})"
    if kind == "atomic":
        _, op, operand, children = term
        return f"atomic_{op}({child(children[0])}, {operand})"
    return repr(term)
