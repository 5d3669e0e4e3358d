"""The transition system of a schedule: states, enabled actions, and their effects.

This is DESIGN.md's semantics, executable. A state is
`(pcs, group_done, memory, signals, in_flight)`: each rank's position, the completed members of the
group it is in, one value id per atom per rank, one uint64 per signal word per rank, and the sorted
tuple of in-flight deliveries `(issuer, op index, payload)`.

Actions (all replayable, all named by the program text, never by the state):
- `("step", rank, index)`: a rank executes its current op alone (local ops, put/put_signal/signal_op
  and atomic issue, get, fetching atomics, wait_until, fence, quiet);
- `("p2p", rank, index, sub)`: the send at that key and its matched recv complete together;
- `("coll", cid)`: every member of collective instance `cid` completes it together (also
  barrier_all, which also needs every delivery done, and sync_all);
- `("deliver", rank, index)`: the delivery issued by that op lands at its target.

Each action has a static footprint: the atoms and signal words it reads and writes, with a mode.
The checker's race detection and partial-order reduction both work on footprints.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import ir
from .arithmetic import COMPARE, MASK64, atomic_result, fetch_result, signal_effect
from .budget import UNBOUNDED, Deadline
from .match import Key, Matches, members_of
from .atoms import Layout, collect_alignments, make_layout, split_atoms
from .values import Values

# footprint: (owner rank, space, lo, hi, mode); space MEM: atoms, SIG: signal words
MEM, SIG = 0, 1
# memory modes: a plain read or write, an atomic add, another atomic update (set, and, or, xor,
# swap, compare-swap), an atomic read (a fetch that writes nothing back)
READ, WRITE, ATOMIC_ADD, ATOMIC_OTHER, ATOMIC_READ = "r", "w", "aa", "ax", "ar"
# signal modes: a read (wait_until, fetch), a read by a `ge`/`gt` wait on a word whose adds are
# proven not to wrap (see `Model._may_wrap`), an add, any other update
SIG_READ, SIG_READ_MONOTONE, SIG_ADD, SIG_SET = "sr", "sm", "sa", "ss"
SIG_READS = frozenset({SIG_READ, SIG_READ_MONOTONE})
ATOMIC_MODES = frozenset({ATOMIC_ADD, ATOMIC_OTHER, ATOMIC_READ})
WRITE_MODES = frozenset({WRITE, ATOMIC_ADD, ATOMIC_OTHER})

Access = tuple[int, int, int, int, str]
State = tuple


def conflicting(m1: str, m2: str) -> bool:
    """Two overlapping memory accesses race (DESIGN.md): at least one writes, and they are not both
    atomic. Two reads never race, an atomic fetch beside a plain load included."""
    if m1 not in WRITE_MODES and m2 not in WRITE_MODES:
        return False
    return not (m1 in ATOMIC_MODES and m2 in ATOMIC_MODES)


def dependent(space: int, m1: str, m2: str) -> bool:
    """Overlapping accesses whose order can matter. Reads commute with reads, and adds with adds
    (addition modulo 2**64 is commutative, wrapping or not). A `ge`/`gt` wait commutes with an add
    only when it reads with SIG_READ_MONOTONE, which `Model` grants just for words whose adds can
    never wrap (then adding never makes the condition false again)."""
    if space == MEM:
        if m1 not in WRITE_MODES and m2 not in WRITE_MODES:
            return False
        return not (m1 == ATOMIC_ADD and m2 == ATOMIC_ADD)
    if m1 in SIG_READS and m2 in SIG_READS:
        return False
    pair = {m1, m2}
    return not (pair == {SIG_ADD} or pair == {SIG_ADD, SIG_READ_MONOTONE})




@dataclass
class Delivery:
    """What the delivery of a one-sided op does at its target."""

    issuer: int
    index: int
    target: int
    epoch: int  # fences issued before it: orders deliveries to the same target
    dst: tuple[int, int] | None = None  # atom span at the target
    src: tuple[int, int] | None = None  # atom span at the issuer, read now if nbi
    nbi: bool = False
    signal: tuple[int, str, int] | None = None  # (word, set|add, value)
    atomic: tuple[str, str, int, int] | None = None  # (space, op, word or atom, value)
    footprint: tuple[Access, ...] = ()


@dataclass
class Code:
    """One compiled op (a group keeps its members in `members`)."""

    rank: int
    index: int
    op: object
    kind: str
    footprint: tuple[Access, ...] = ()
    members: list = field(default_factory=list)  # group: [(sub, op)]
    cid: int | None = None
    delivery: Delivery | None = None
    partners: frozenset = frozenset()  # other ranks that must take part


class Model:
    """A schedule compiled for exploration."""

    def __init__(self, sched: ir.Schedule, matches: Matches, deadline: Deadline = UNBOUNDED):
        self.sched = sched
        self.matches = matches
        self.world = sched.world
        bounds, transfers = collect_alignments(sched, matches, deadline)
        self.layout: Layout = make_layout(sched, split_atoms(bounds, transfers, deadline))
        self.values = Values()
        self.sig_offset: dict[str, int] = {}
        self.sig_count = 0
        for decl in sched.programs[0].signals:  # symmetric: the same layout on every rank
            self.sig_offset[decl.name] = self.sig_count
            self.sig_count += decl.count
        self.may_wrap = self._may_wrap()
        deadline.check("compiling the model")
        self.code: list[list[Code]] = []
        for p in sched.programs:
            self.code.append([self._compile(p.rank, i, op) for i, op in enumerate(p.ops)])
            deadline.check("compiling the model")
        self.nops = tuple(len(p.ops) for p in sched.programs)
        self.coll_members: list[list[tuple[int, int]]] = matches.collectives
        self.coll_footprint = [self._coll_footprint(cid) for cid in range(len(matches.collectives))]
        self.coll_kind = [sched.programs[m[0][0]].ops[m[0][1]].kind for m in matches.collectives]
        self.p2p_footprint: dict[Key, tuple[Access, ...]] = {}
        for skey, rkey in matches.recv_of.items():
            send, recv = matches._op(skey), matches._op(rkey)
            fp = [(skey[0], MEM, *self.span(skey[0], send.src), READ),
                  (rkey[0], MEM, *self.span(rkey[0], recv.dst), WRITE)]
            if recv.reduce:
                fp.append((rkey[0], MEM, *self.span(rkey[0], recv.dst), READ))
            self.p2p_footprint[skey] = tuple(a for a in fp if a[2] < a[3])
        self.deliveries: dict[tuple[int, int], Delivery] = {
            (c.rank, c.index): c.delivery for row in self.code for c in row if c.delivery is not None}
        self._build_por_index()

    # -- compilation --------------------------------------------------------------------------
    def span(self, rank: int, region: ir.Region) -> tuple[int, int]:
        return self.layout.span(rank, region)

    def sig_word(self, ref: ir.SignalRef) -> int:
        return self.sig_offset[ref.signal] + ref.index

    def _may_wrap(self) -> frozenset[tuple[int, int]]:
        """The (rank, word) signal words that adds might wrap around 2**64 in some execution.

        Words are uint64 and arithmetic is modulo 2**64 (DESIGN.md), so an add of 2**64 - 1 is a
        decrement. Every op of a traced program runs at most once, so a word's value never exceeds
        the largest value any op can set it to (0 at the start) plus the sum of every add that can
        reach it. When that bound fits in 64 bits no add wraps, and a `ge`/`gt` wait that holds
        stays true under adds: only then may the reduction treat it as commuting with them. `and`
        only clears bits and `fetch` writes nothing; `or`/`xor` can set any bit, so a word they
        reach is never proven."""
        sets: dict[tuple[int, int], int] = {}
        adds: dict[tuple[int, int], int] = {}
        unbounded: set[tuple[int, int]] = set()
        for program in self.sched.programs:
            for op in program.ops:
                effect = signal_effect(op)
                if effect is None:
                    continue
                word = (op.pe, self.sig_word(effect[0]))
                how, value = effect[1], effect[2]
                if how == "add":
                    adds[word] = adds.get(word, 0) + value
                elif how == "set":
                    sets[word] = max(sets.get(word, 0), value)
                elif how == "any":
                    unbounded.add(word)
        over = {word for word in set(sets) | set(adds) if sets.get(word, 0) + adds.get(word, 0) > MASK64}
        return frozenset(unbounded | over)

    def _compile(self, rank: int, index: int, op) -> Code:
        c = Code(rank=rank, index=index, op=op, kind=op.kind)
        k = op.kind
        fp: list[Access] = []
        mem = lambda region, mode, who=rank: fp.append((who, MEM, *self.span(who, region), mode))  # noqa: E731
        if k == "group":
            c.members = members_of(op)
            c.partners = frozenset(m.peer for _, m in c.members) - {rank}
        elif k in ("send", "recv"):
            c.partners = frozenset({op.peer}) - {rank}
        elif k in ir.COLLECTIVE_KINDS or k in ("barrier_all", "sync_all"):
            c.cid = self.matches.cid_of.get((rank, index))
            if c.cid is not None:
                c.partners = frozenset(r for r, _ in self.matches.collectives[c.cid]) - {rank}
        elif k == "reduce":
            for src in op.srcs:
                mem(src, READ)
            mem(op.dst, WRITE)
        elif k == "copy":
            mem(op.src, READ)
            mem(op.dst, WRITE)
        elif k == "fill":
            mem(op.dst, WRITE)
        elif k == "compute":
            for region in op.reads:
                mem(region, READ)
            for region in op.writes:
                mem(region, WRITE)
        elif k in ir.DELIVERY_KINDS:
            c.delivery = self._delivery(rank, index, op)
            if k in ("put", "put_signal") and not op.nbi:
                mem(op.src, READ)
        elif k == "get":
            mem(op.src, READ, op.pe)
            mem(op.dst, WRITE)
        elif k == "fetch_atomic":
            reads_only = op.op == "fetch"
            if isinstance(op.target, ir.SignalRef):
                word = self.sig_word(op.target)
                fp.append((op.pe, SIG, word, word + 1, SIG_READ if reads_only else SIG_SET))
            else:
                mem(op.target, ATOMIC_READ if reads_only else ATOMIC_OTHER, op.pe)
            mem(op.into, WRITE)
        elif k == "wait_until":
            word = self.sig_word(op.signal)
            monotone = op.cmp in ("ge", "gt") and (rank, word) not in self.may_wrap
            fp.append((rank, SIG, word, word + 1, SIG_READ_MONOTONE if monotone else SIG_READ))
        c.footprint = tuple(a for a in fp if a[2] < a[3])
        return c

    def _delivery(self, rank: int, index: int, op) -> Delivery:
        ops = self.sched.programs[rank].ops
        epoch = sum(1 for o in ops[:index] if o.kind == "fence")
        d = Delivery(issuer=rank, index=index, target=op.pe, epoch=epoch)
        fp: list[Access] = []
        if op.kind in ("put", "put_signal"):
            d.dst = self.span(op.pe, op.dst)
            d.src = self.span(rank, op.src)
            d.nbi = op.nbi
            fp.append((op.pe, MEM, *d.dst, WRITE))
            if op.nbi:
                fp.append((rank, MEM, *d.src, READ))
        if op.kind in ("put_signal", "signal_op"):
            word = self.sig_word(op.signal)
            d.signal = (word, op.sig_op, op.value)
            fp.append((op.pe, SIG, word, word + 1, SIG_ADD if op.sig_op == "add" else SIG_SET))
        if op.kind == "atomic":
            commutes = op.op in ("add", "inc")
            if isinstance(op.target, ir.SignalRef):
                word = self.sig_word(op.target)
                d.atomic = ("sig", op.op, word, op.value)
                fp.append((op.pe, SIG, word, word + 1, SIG_ADD if commutes else SIG_SET))
            else:
                lo, hi = self.span(op.pe, op.target)
                d.atomic = ("mem", op.op, lo, op.value)
                fp.append((op.pe, MEM, lo, hi, ATOMIC_ADD if commutes else ATOMIC_OTHER))
        d.footprint = tuple(a for a in fp if a[2] < a[3])
        return d

    def _coll_footprint(self, cid: int) -> tuple[Access, ...]:
        fp: list[Access] = []
        for rank, index in self.matches.collectives[cid]:
            op = self.sched.programs[rank].ops[index]
            src, dst = getattr(op, "src", None), getattr(op, "dst", None)
            if src is not None:
                fp.append((rank, MEM, *self.span(rank, src), READ))
            if dst is not None:
                fp.append((rank, MEM, *self.span(rank, dst), WRITE))
        return tuple(a for a in fp if a[2] < a[3])

    # -- partial-order reduction index --------------------------------------------------------
    def _build_por_index(self) -> None:
        """Per owner rank and space: every op of any rank that may touch that memory, and per rank
        the ops that need other ranks (a rank cannot pass them while those ranks stand still)."""
        self.accessors: list[list[list[tuple]]] = [[[], []] for _ in range(self.world)]
        self.joints: list[list[tuple[int, frozenset]]] = [[] for _ in range(self.world)]
        for row in self.code:
            for c in row:
                entries: list[tuple[Access, int | None, frozenset]] = []
                if c.kind == "group":
                    for sub, m in c.members:
                        for acc in self._member_footprint(c.rank, c.index, sub, m):
                            entries.append((acc, sub, frozenset({m.peer}) - {c.rank}))
                elif c.kind in ("send", "recv"):
                    for acc in self._member_footprint(c.rank, c.index, None, c.op):
                        entries.append((acc, None, c.partners))
                elif c.cid is not None:
                    for acc in self.coll_footprint[c.cid]:
                        if acc[0] == c.rank:
                            entries.append((acc, None, c.partners))
                for acc in c.footprint:
                    entries.append((acc, None, frozenset()))
                if c.delivery is not None:
                    for acc in c.delivery.footprint:
                        entries.append((acc, None, frozenset()))
                for (owner, space, lo, hi, mode), sub, others in entries:
                    self.accessors[owner][space].append((c.rank, c.index, sub, lo, hi, mode, others))
                if c.partners:
                    self.joints[c.rank].append((c.index, c.partners))

    def _member_footprint(self, rank: int, index: int, sub, op) -> tuple[Access, ...]:
        key = (rank, index, sub)
        if op.kind == "send":
            return tuple(a for a in self.p2p_footprint.get(key, ()) if a[0] == rank)
        skey = self.matches.send_of.get(key)
        return tuple(a for a in self.p2p_footprint.get(skey, ()) if a[0] == rank) if skey else ()

    # -- states -------------------------------------------------------------------------------
    def initial(self) -> State:
        mem = tuple(tuple(self.values.initial(rank, *atom) for atom in self.layout.atom_names[rank])
                    for rank in range(self.world))
        sigs = tuple((0,) * self.sig_count for _ in range(self.world))
        return (tuple([0] * self.world), tuple([0] * self.world), mem, sigs, ())

    def posted(self, state: State, key: Key) -> bool:
        rank, index, sub = key
        if state[0][rank] != index:
            return False
        return sub is None or not (state[1][rank] >> sub) & 1

    def in_flight_from(self, state: State, rank: int) -> bool:
        return any(d[0] == rank for d in state[4])

    def delivery_blocked(self, state: State, issuer: int, index: int) -> bool:
        d = self.deliveries[(issuer, index)]
        if d.epoch == 0:  # no fence before it: nothing can be ordered ahead of it
            return False
        for other_issuer, other_index, _ in state[4]:
            if other_issuer == issuer and other_index != index:
                e = self.deliveries[(other_issuer, other_index)]
                if e.target == d.target and e.epoch < d.epoch:
                    return True
        return False

    def enabled(self, state: State) -> list[tuple]:
        pcs, done, _mem, sigs, infl = state
        acts: list[tuple] = []
        recv_of = self.matches.recv_of
        for rank in range(self.world):
            pc = pcs[rank]
            if pc >= self.nops[rank]:
                continue
            c = self.code[rank][pc]
            k = c.kind
            if k == "group":
                for sub, m in c.members:
                    if m.kind == "send" and not (done[rank] >> sub) & 1:
                        peer = recv_of.get((rank, pc, sub))
                        if peer is not None and self.posted(state, peer):
                            acts.append(("p2p", rank, pc, sub))
            elif k == "send":
                peer = recv_of.get((rank, pc, None))
                if peer is not None and self.posted(state, peer):
                    acts.append(("p2p", rank, pc, None))
            elif k == "recv":
                continue
            elif c.cid is not None or k in ir.COLLECTIVE_KINDS or k in ("barrier_all", "sync_all"):
                if c.cid is None:
                    continue
                members = self.coll_members[c.cid]
                if members[0][0] != rank:
                    continue
                if all(pcs[r] == i for r, i in members):
                    if k == "barrier_all" and infl:
                        continue
                    acts.append(("coll", c.cid))
            elif k == "wait_until":
                op = c.op
                if COMPARE[op.cmp](sigs[rank][self.sig_word(op.signal)], op.value):
                    acts.append(("step", rank, pc))
            elif k == "quiet":
                if not self.in_flight_from(state, rank):
                    acts.append(("step", rank, pc))
            else:
                acts.append(("step", rank, pc))
        for issuer, index, _ in infl:
            if not self.delivery_blocked(state, issuer, index):
                acts.append(("deliver", issuer, index))
        return acts

    def footprint(self, action: tuple) -> tuple[Access, ...]:
        kind = action[0]
        if kind == "step":
            return self.code[action[1]][action[2]].footprint
        if kind == "p2p":
            return self.p2p_footprint[(action[1], action[2], action[3])]
        if kind == "coll":
            return self.coll_footprint[action[1]]
        return self.deliveries[(action[1], action[2])].footprint

    # -- effects ------------------------------------------------------------------------------
    def apply(self, state: State, action: tuple) -> State:
        pcs, done, mem, sigs, infl = state
        kind = action[0]
        pcs, done, mem, sigs = list(pcs), list(done), list(mem), list(sigs)
        writes: dict[int, list[int]] = {}

        def mut(rank: int) -> list[int]:
            found = writes.get(rank)
            if found is None:
                found = writes[rank] = list(mem[rank])
            return found

        if kind == "step":
            rank, index = action[1], action[2]
            infl = self._step(rank, self.code[rank][index], mem, sigs, mut, infl)
            pcs[rank] += 1
        elif kind == "p2p":
            skey = (action[1], action[2], action[3])
            rkey = self.matches.recv_of[skey]
            send, recv = self.matches._op(skey), self.matches._op(rkey)
            s_lo, s_hi = self.span(skey[0], send.src)
            d_lo, _ = self.span(rkey[0], recv.dst)
            incoming = mem[skey[0]][s_lo:s_hi]
            out = mut(rkey[0])
            for i, v in enumerate(incoming):
                out[d_lo + i] = v if recv.reduce is None else self.values.combine(recv.reduce, (out[d_lo + i], v))
            for rank, index, sub in (skey, rkey):
                if sub is None:
                    pcs[rank] += 1
                else:
                    done[rank] |= 1 << sub
                    group = self.code[rank][index]
                    if done[rank] == (1 << len(group.members)) - 1:
                        done[rank] = 0
                        pcs[rank] += 1
        elif kind == "coll":
            self._collective(action[1], mem, mut)
            for rank, _ in self.coll_members[action[1]]:
                pcs[rank] += 1
        else:
            key = (action[1], action[2])
            d = self.deliveries[key]
            payload = next(p for i, j, p in infl if (i, j) == key)
            infl = tuple(x for x in infl if (x[0], x[1]) != key)
            self._deliver(d, payload, mem, sigs, mut)
        for rank, cells in writes.items():
            mem[rank] = tuple(cells)
        return (tuple(pcs), tuple(done), tuple(mem), tuple(sigs), infl)

    def _step(self, rank: int, c: Code, mem, sigs, mut, infl):
        op, k, vals = c.op, c.kind, self.values
        if k == "reduce":
            d_lo, d_hi = self.span(rank, op.dst)
            spans = [self.span(rank, s) for s in op.srcs]
            old = mem[rank]
            out = mut(rank)
            for i in range(d_hi - d_lo):
                children = tuple(old[lo + i] for lo, _ in spans)
                out[d_lo + i] = children[0] if len(children) == 1 else vals.combine(op.op, children)
        elif k == "copy":
            s_lo, s_hi = self.span(rank, op.src)
            d_lo, _ = self.span(rank, op.dst)
            src = mem[rank][s_lo:s_hi]
            mut(rank)[d_lo:d_lo + len(src)] = src
        elif k == "fill":
            d_lo, d_hi = self.span(rank, op.dst)
            mut(rank)[d_lo:d_hi] = [vals.const(op.value)] * (d_hi - d_lo)
        elif k == "compute":
            reads = tuple(v for region in op.reads for v in mem[rank][slice(*self.span(rank, region))])
            out = mut(rank)
            n = 0
            for region in op.writes:
                lo, hi = self.span(rank, region)
                for a in range(lo, hi):
                    out[a] = vals.intern(("opaque", op.name, rank, c.index, n, reads))
                    n += 1
        elif c.delivery is not None:
            d = c.delivery
            payload = None
            if k in ("put", "put_signal") and not op.nbi:
                payload = mem[rank][d.src[0]:d.src[1]]
            infl = tuple(sorted(infl + ((rank, c.index, payload),), key=lambda x: (x[0], x[1])))
        elif k == "get":
            s_lo, s_hi = self.span(op.pe, op.src)
            d_lo, _ = self.span(rank, op.dst)
            src = mem[op.pe][s_lo:s_hi]
            mut(rank)[d_lo:d_lo + len(src)] = src
        elif k == "fetch_atomic":
            self._fetch(rank, op, mem, sigs, mut)
        return infl

    def _fetch(self, rank: int, op, mem, sigs, mut) -> None:
        vals = self.values
        i_lo, _ = self.span(rank, op.into)
        if isinstance(op.target, ir.SignalRef):
            word = self.sig_word(op.target)
            row = list(sigs[op.pe])
            old = row[word]
            row[word] = fetch_result(op.op, old, op.value, op.cond)
            sigs[op.pe] = tuple(row)
            mut(rank)[i_lo] = vals.const(old)
        else:
            lo, _ = self.span(op.pe, op.target)
            old = mut(op.pe)[lo] if op.pe == rank else mem[op.pe][lo]
            if op.op == "fetch":  # an atomic read: the target keeps its value
                new = old
            elif op.op in ("fetch_add", "fetch_inc"):
                new = self._atomic_term("add", op.value if op.op == "fetch_add" else 1, old)
            else:
                new = vals.intern(("atomic", op.op, (op.value, op.cond), (old,)))
            mut(op.pe)[lo] = new
            mut(rank)[i_lo] = old

    def _deliver(self, d: Delivery, payload, mem, sigs, mut) -> None:
        if d.dst is not None:
            data = payload if payload is not None else mem[d.issuer][d.src[0]:d.src[1]]
            mut(d.target)[d.dst[0]:d.dst[0] + len(data)] = data
        if d.signal is not None:
            word, how, value = d.signal
            row = list(sigs[d.target])
            row[word] = value if how == "set" else (row[word] + value) & MASK64
            sigs[d.target] = tuple(row)
        if d.atomic is not None:
            space, op, where, value = d.atomic
            if space == "sig":
                row = list(sigs[d.target])
                row[where] = atomic_result(op, row[where], value)
                sigs[d.target] = tuple(row)
            else:
                cells = mut(d.target)
                cells[where] = self._atomic_term(op, value, cells[where])

    def _atomic_term(self, op: str, value: int, old: int) -> int:
        """The value of a data word after an atomic. Integer adds commute, so consecutive adds fold
        into one total: the same final term whatever order they land in."""
        if op in ("add", "inc"):
            value = 1 if op == "inc" else value
            term = self.values.terms[old]
            if term[0] == "atomic" and term[1] == "add":
                return self.values.intern(("atomic", "add", (term[2] + value) & MASK64, term[3]))
            return self.values.intern(("atomic", "add", value, (old,)))
        return self.values.intern(("atomic", op, value, (old,)))

    def _collective(self, cid: int, mem, mut) -> None:
        vals = self.values
        members = self.coll_members[cid]
        ops = [self.sched.programs[r].ops[i] for r, i in members]
        ranks = [r for r, _ in members]
        n = len(members)
        k = ops[0].kind
        srcs = [mem[r][slice(*self.span(r, op.src))] if getattr(op, "src", None) is not None else ()
                for r, op in zip(ranks, ops)]

        def chunks(seq, parts):
            size = len(seq) // parts
            return [seq[i * size:(i + 1) * size] for i in range(parts)]

        def write(rank, region, data):
            lo, _ = self.span(rank, region)
            mut(rank)[lo:lo + len(data)] = data

        if k == "all_reduce":
            total = tuple(vals.combine(ops[0].op, tuple(s[i] for s in srcs)) for i in range(len(srcs[0])))
            for r, op in zip(ranks, ops):
                write(r, op.dst, total)
        elif k == "broadcast":
            root = ranks.index(ops[0].root)
            for r, op in zip(ranks, ops):
                write(r, op.dst, srcs[root])
        elif k == "reduce_to":
            total = tuple(vals.combine(ops[0].op, tuple(s[i] for s in srcs)) for i in range(len(srcs[0])))
            for r, op in zip(ranks, ops):
                if op.dst is not None:
                    write(r, op.dst, total)
        elif k == "all_gather":
            gathered = tuple(v for s in srcs for v in s)
            for r, op in zip(ranks, ops):
                write(r, op.dst, gathered)
        elif k == "reduce_scatter":
            parts = [chunks(s, n) for s in srcs]
            for i, (r, op) in enumerate(zip(ranks, ops)):
                write(r, op.dst, tuple(vals.combine(op.op, tuple(p[i][j] for p in parts))
                                       for j in range(len(parts[0][i]))))
        elif k == "all_to_all":
            parts = [chunks(s, n) for s in srcs]
            for i, (r, op) in enumerate(zip(ranks, ops)):
                write(r, op.dst, tuple(v for j in range(n) for v in parts[j][i]))

    def done(self, state: State) -> bool:
        return all(pc >= n for pc, n in zip(state[0], self.nops))
