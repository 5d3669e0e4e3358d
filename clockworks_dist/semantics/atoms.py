"""Atoms: the coarsest partition of each buffer consistent with every region the schedule names
and with every transfer (a copy from src to dst aligns the boundaries of both sides, so values move
atom by atom). Buffers with the same name share one partition on every rank; `Layout` places each
rank's atoms in one flat tuple, which is the memory of a machine state.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from .. import ir
from .budget import UNBOUNDED, Deadline
from .rules import Move, collective_flows, p2p_flow, rule

# ------------------------------------------------------------------------------------- atoms


def collect_alignments(sched: ir.Schedule, matches, deadline: Deadline = UNBOUNDED
                       ) -> tuple[dict[str, set[int]], list]:
    """Boundaries named by regions, and the transfers (bufA, offA, bufB, offB, len) that align them:
    every data flow of the rules (`rules.Move`: local ops, one-sided ops, matched sends and recvs,
    collective instances) and every expectation."""
    bounds: dict[str, set[int]] = {}
    transfers: list[tuple[str, int, str, int, int]] = []
    added: dict[int, ir.Region] = {}  # the tracer shares regions: each is added once (and held here)

    def add(region: ir.Region) -> None:
        if added.get(id(region)) is region:
            return
        added[id(region)] = region
        bounds.setdefault(region.buffer, set()).update((region.start, region.stop))

    def link(a: ir.Region, b: ir.Region) -> None:
        add(a)
        add(b)
        if a.count == b.count and a.count > 0:
            transfers.append((a.buffer, a.start, b.buffer, b.start, a.count))

    def align(move: Move) -> None:
        """Every place of a move holds the same elements in the same order (an opaque kernel's do
        not), so linking each to the first aligns them all: boundaries propagate along chains."""
        places = [region for _, region in move.srcs + move.dsts]
        if move.opaque is not None or move.value is not None:
            for region in places:
                add(region)
            return
        for region in places[1:]:
            link(places[0], region)

    # An op object the tracer shares among ranks and steps is aligned once: a rule's flows name
    # the op's own regions whatever the rank (the rank only says whose memory they are in), and
    # boundaries are kept per buffer name, on every rank alike.
    seen: dict[int, object] = {}
    for prog in sched.programs:
        deadline.check("compiling the model")
        for decl in prog.buffers:
            bounds.setdefault(decl.name, set()).update((0, decl.count))
        for op in prog.ops:
            if seen.get(id(op)) is op:
                continue
            seen[id(op)] = op
            for member in (op.ops if op.kind == "group" else (op,)):
                for _, region in ir.op_regions(member):
                    add(region)
                for move in rule(member).flows(member, prog.rank):
                    align(move)
    for send_key, recv_key in matches.recv_of.items():
        align(p2p_flow(matches._op(send_key), send_key[0], matches._op(recv_key), recv_key[0]))
    for members in matches.collective_ops():
        for move in collective_flows([op for _, op in members], [rank for rank, _ in members]):
            align(move)
    for exp in sched.expect:
        add(exp.region)
        for contrib in exp.contributions:
            add(contrib.region)
            link(contrib.region, exp.region)
    return bounds, transfers


def split_atoms(bounds: dict[str, set[int]], transfers: list, deadline: Deadline = UNBOUNDED
                ) -> dict[str, list[int]]:
    """Propagate boundaries through transfers to a fixpoint; return sorted boundaries per buffer.

    A worklist: a transfer is looked at again only when one of its buffers gained a boundary, and
    only the boundaries inside its window are read (by bisection). Transfers repeat across ranks
    (buffers are split by name, on every rank alike), so each distinct one is kept once."""
    transfers = list(dict.fromkeys(transfers))
    users: dict[str, list[int]] = {}  # buffer -> the transfers that read its boundaries
    for number, (a, _off_a, b, _off_b, _length) in enumerate(transfers):
        users.setdefault(a, []).append(number)
        if b != a:
            users.setdefault(b, []).append(number)
    points = {name: sorted(found) for name, found in bounds.items()}
    work = list(range(len(transfers) - 1, -1, -1))
    queued = set(work)
    steps = 0
    while work:
        number = work.pop()
        queued.discard(number)
        steps += 1
        if steps & 1023 == 0:
            deadline.check("compiling the model")
        a, off_a, b, off_b, length = transfers[number]
        for src, src_off, dst, dst_off in ((a, off_a, b, off_b), (b, off_b, a, off_a)):
            inside = points[src]
            first, last = bisect.bisect_right(inside, src_off), bisect.bisect_left(inside, src_off + length)
            for p in inside[first:last]:
                q = dst_off + (p - src_off)
                if q not in bounds[dst]:
                    bounds[dst].add(q)
                    bisect.insort(points[dst], q)
                    for other in users[dst]:
                        if other not in queued:
                            queued.add(other)
                            work.append(other)
    return {name: sorted(found) for name, found in bounds.items()}


@dataclass(frozen=True)
class Layout:
    """Where each rank's buffers' atoms sit in that rank's flat memory tuple."""

    bounds: dict[str, list[int]]
    offset: tuple[dict[str, int], ...]  # per rank: buffer -> first atom index
    size: tuple[int, ...]  # per rank: number of atoms
    atom_names: tuple[tuple[tuple[str, int, int], ...], ...]  # per rank: (buffer, start, stop)

    def atom(self, rank: int, buffer: str, start: int) -> int:
        """The index of the atom of `buffer` on `rank` that starts at element `start`."""
        return self.offset[rank][buffer] + bisect.bisect_left(self.bounds[buffer], start)

    def span(self, rank: int, region: ir.Region) -> tuple[int, int]:
        """Atom index range [lo, hi) of a region on a rank."""
        points = self.bounds[region.buffer]
        base = self.offset[rank][region.buffer]
        lo = bisect.bisect_left(points, region.start)
        hi = bisect.bisect_left(points, region.stop)
        return base + lo, base + hi


def make_layout(sched: ir.Schedule, bounds: dict[str, list[int]]) -> Layout:
    offsets, sizes, names = [], [], []
    for prog in sched.programs:
        table: dict[str, int] = {}
        atoms: list[tuple[str, int, int]] = []
        for decl in prog.buffers:
            table[decl.name] = len(atoms)
            points = [p for p in bounds[decl.name] if p <= decl.count]
            atoms.extend((decl.name, a, b) for a, b in zip(points, points[1:]))
        offsets.append(table)
        sizes.append(len(atoms))
        names.append(tuple(atoms))
    return Layout(bounds=bounds, offset=tuple(offsets), size=tuple(sizes), atom_names=tuple(names))
