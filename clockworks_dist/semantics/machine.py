"""The transition system of a schedule: states, enabled actions, and their effects.

This is DESIGN.md's semantics, executable, and the one machine every engine runs: the checker
searches it, the simulator (`perf.simulate`) times it. Each op's meaning comes from its rule in
`rules` (accesses, data flow, synchronisation); this module compiles the rules of a schedule into
atom spans and dispatches on `rule.sync`, never on an op's kind.

A `State` is `(pcs, group_done, memory, signals, in_flight)`: each rank's position, the completed
members of the group it is in, one value id per atom per rank, one uint64 per signal word per rank,
and the sorted tuple of in-flight deliveries `(issuer, op index, payload)`.

Actions (all replayable, all named by the program text, never by the state), tuples whose first
field names their type:
- `Step(rank, index)` = `("step", rank, index)`: a rank executes its current op alone (local ops,
  the issue of a delivery, blocking gets and fetching atomics, waits, fence, quiet);
- `P2P(rank, index, sub)` = `("p2p", rank, index, sub)`: the send at that key meets its matched
  recv: the send reads `src` and completes; the data is now in flight to the recv;
- `Coll(cid)` = `("coll", cid)`: every member of collective instance `cid` has arrived: the sources
  are read (also barrier_all, which also needs every delivery done, and sync_all); a member with
  nothing to write completes here;
- `Deliver(issuer, index)` = `("deliver", issuer, index)`: the delivery issued by that op lands. A
  *landing* is a delivery too: a recv, or a collective member, writes its `dst` and completes, on its
  own (`rules.lands`). Its index is negative (`Model.landing_of` names it), so it never collides
  with a one-sided op's. NCCL and MPI complete each side on its own: a sender, or a collective
  member, may go on while the receiver, or another member, still writes its output, and the
  checker sees those orders.

Each action has a static footprint: the atoms and signal words it reads and writes, with a `Mode`.
The checker's race detection and partial-order reduction both work on footprints.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import itemgetter
from typing import NamedTuple

from .. import ir
from .arithmetic import COMPARE, MASK64, atomic_result, fetch_result
from .atoms import Layout, collect_alignments, make_layout, split_atoms
from .budget import UNBOUNDED, Deadline
from .match import Key, Matches, members_of
from .rules import (MEM, SIG, WRITE_MODES, Access as RuleAccess, Mode, Move, Rule, Sync, When, collective_flows, lands,
                    p2p_flow, rule)
# re-exported: check/properties.py imports `conflicting` and check/por.py `dependent` from here
from .rules import conflicting, dependent  # noqa: F401
from .values import Values
from .words import may_wrap

SPAN_MEMO = 1 << 20  # (rank, region) spans kept by `Model.span`

# The modes under their short names (por, properties and actions read them).
READ, WRITE, ATOMIC_ADD, ATOMIC_OTHER, ATOMIC_READ = (Mode.READ, Mode.WRITE, Mode.ATOMIC_ADD, Mode.ATOMIC_OTHER,
                                                      Mode.ATOMIC_READ)
SIG_READ, SIG_READ_MONOTONE, SIG_ADD, SIG_SET = Mode.SIG_READ, Mode.SIG_READ_MONOTONE, Mode.SIG_ADD, Mode.SIG_SET

# An action's fields after its kind, as a tuple: the `key` of Step, P2P, Deliver and Post. A getter in C,
# not a Python function: the search reads keys per action, and `self[1:]` in a def costs it twice as much.
_AFTER_KIND = itemgetter(slice(1, None))
# `build(Step, ("step", rank, index))` is `Step("step", rank, index)` at half the cost: calling a NamedTuple
# class runs its generated __new__, a Python function, and the search builds an action or a posted op's tag
# per step (`rank_enabled`, check/dfs). The fields go in order, all of them: nothing checks their number.
build = tuple.__new__


class Access(NamedTuple):
    """A compiled access: atoms (MEM) or signal words (SIG) [lo, hi) of `owner`, with a mode."""

    owner: int
    space: int
    lo: int
    hi: int
    mode: Mode


class State(NamedTuple):
    pcs: tuple[int, ...]
    group_done: tuple[int, ...]  # per rank: bit i set when member i of its current group completed; 1 at
    # a collective whose sources are read, until the member's landing; bit n + i (n: the group's members)
    # for member i of a group, a collective, from its sources' read to its landing (`Model.arrived`)
    memory: tuple[tuple[int, ...], ...]  # per rank: one value id per atom
    signals: tuple[tuple[int, ...], ...]  # per rank: one uint64 per signal word
    in_flight: tuple[tuple, ...]  # sorted (issuer, op index, payload)


class Step(NamedTuple):
    kind: str
    rank: int
    index: int

    @classmethod
    def of(cls, rank: int, index: int) -> "Step":
        return cls("step", rank, index)

    key = property(_AFTER_KIND, doc="(rank, op index): the op, as the model's tables key it.")


class P2P(NamedTuple):
    kind: str
    rank: int
    index: int
    sub: int | None

    @classmethod
    def of(cls, rank: int, index: int, sub: int | None) -> "P2P":
        return cls("p2p", rank, index, sub)

    key = property(_AFTER_KIND, doc="(rank, op index, group member): the send, as the matching keys it.")


class Coll(NamedTuple):
    kind: str
    cid: int

    @classmethod
    def of(cls, cid: int) -> "Coll":
        return cls("coll", cid)


class Deliver(NamedTuple):
    kind: str
    issuer: int
    index: int

    @classmethod
    def of(cls, issuer: int, index: int) -> "Deliver":
        return cls("deliver", issuer, index)

    key = property(_AFTER_KIND, doc="(issuer, op index): the delivery, as the model's tables key it.")


class Post(NamedTuple):
    """A posted op's pending accesses (`Model.posted_accesses`): not an action of the machine, but
    the checker's race detection and its traces name it beside the actions."""

    kind: str
    rank: int
    index: int
    sub: int | None

    @classmethod
    def of(cls, rank: int, index: int, sub: int | None) -> "Post":
        return cls("post", rank, index, sub)

    key = property(_AFTER_KIND, doc="(rank, op index, group member): the posted op, as the matching keys it.")


Action = Step | P2P | Coll | Deliver
Span = tuple[int, int, int]  # (rank, first atom, end atom)


class Awaits(NamedTuple):
    """What a wait waits for: signal words of its own rank, each compared with `value` by `cmp`;
    `every`: all of them must hold (else any one)."""

    words: tuple[int, ...]
    cmp: str
    value: int
    every: bool


@dataclass(frozen=True, slots=True)
class AtomMove:
    """A `rules.Move` on atoms: each destination span receives the combine of the source spans."""

    dsts: tuple[Span, ...]
    srcs: tuple[Span, ...]
    combine: str | None = None
    value: float | None = None
    opaque: str | None = None


@dataclass(slots=True)
class Delivery:
    """What the delivery of a one-sided op does when it lands."""

    issuer: int
    index: int
    target: int  # the rank whose memory it writes (the PE of a put, the issuer of a non-blocking get)
    pe: int  # the remote PE: fence orders the issuer's deliveries per PE
    epoch: int  # fences issued before it
    fenced: bool  # whether fences order it at all
    moves: tuple[AtomMove, ...] = ()
    capture: Span | None = None  # read at issue (a blocking put's src): its values travel as the payload
    update: tuple[int, str, int, int] | None = None  # (space, word or atom, op, value) at the target
    footprint: tuple[Access, ...] = ()
    completes: tuple | None = None  # a landing: the key (rank, index, sub) of the recv/member it completes
    spans: tuple[Span, ...] = ()  # a landing: where its payload goes, in order
    combine: str | None = None  # a landing of a recv with reduce: dst = dst combine payload


@dataclass(slots=True)
class Code:
    """One compiled op (a group keeps its members in `members`). With slots, as `Delivery` and
    `AtomMove`: a model has one per op, and a 1024-rank ring has 3 million ops."""

    rank: int
    index: int
    op: object
    kind: str
    rule: Rule
    sync: Sync
    footprint: tuple[Access, ...] = ()
    members: list | tuple = ()  # group: [(sub, op)]
    sends: tuple = ()  # the subs of `members` that are sends
    cid: int | None = None
    colls: tuple = ()  # group: the (sub, cid) of its members that are collectives
    delivery: Delivery | None = None
    partners: frozenset = frozenset()  # other ranks that must take part
    moves: tuple[AtomMove, ...] = ()  # the data an op of one rank moves when it executes
    awaits: Awaits | None = None  # a wait
    store: tuple[int, int] | None = None  # a local store to a signal word of its rank: (word, value)


def _fifo_send(op) -> bool:
    """Whether `op` is a send on a connection with slots (it may complete without its recv)."""
    return op.kind == "send" and bool(op.slots)


def _sorted(infl: tuple) -> tuple:
    """In-flight deliveries in their canonical order: by (issuer, index)."""
    return tuple(sorted(infl, key=lambda x: (x[0], x[1])))


class Work:
    """A state held in mutable form and changed in place by `Model.execute`, for searches that
    walk one path at a time. `freeze()` gives the `State` it holds. With a journal, every change
    is recorded, so `undo(mark)` returns to the state of an earlier `mark()` (backtracking), and
    `changes(mark)` lists what changed since (the search's incremental bookkeeping reads it).

    Memory rows and signal rows start as the state's tuples and become lists when first written.
    A `State`'s field names read the same here (`pcs`, and the properties `group_done`, `memory`,
    `signals`, `in_flight`), so code that reads a state reads a Work too; `in_flight` iterates over
    the in-flight deliveries in no particular order. Indexing (`work[0]` .. `work[4]`) does too."""

    __slots__ = ("pcs", "done", "mem", "sigs", "flight", "journal")

    def __init__(self, state: State, journal: bool = True):
        self.pcs = list(state.pcs)
        self.done = list(state.group_done)
        self.mem = list(state.memory)
        self.sigs = list(state.signals)
        self.flight = {(i, j): (i, j, p) for i, j, p in state.in_flight}  # (issuer, index) -> (issuer, index, payload)
        self.journal: list | None = [] if journal else None

    def __getitem__(self, field: int):
        if field == 4:
            return self.flight.values()
        return (self.pcs, self.done, self.mem, self.sigs)[field]

    @property
    def group_done(self) -> list[int]:
        return self.done

    @property
    def memory(self) -> list:
        return self.mem

    @property
    def signals(self) -> list:
        return self.sigs

    @property
    def in_flight(self):
        """The in-flight deliveries (issuer, index, payload), in no particular order."""
        return self.flight.values()

    def freeze(self) -> State:
        """The immutable, canonical `State` this holds."""
        mem = tuple(row if type(row) is tuple else tuple(row) for row in self.mem)
        sigs = tuple(row if type(row) is tuple else tuple(row) for row in self.sigs)
        return State(tuple(self.pcs), tuple(self.done), mem, sigs,
                     tuple(self.flight[key] for key in sorted(self.flight)))

    # -- changes (each journaled as a tuple whose first field names it) -------------------------
    def set_pc(self, rank: int, value: int) -> None:
        if self.journal is not None:
            self.journal.append(("pc", rank, self.pcs[rank]))
        self.pcs[rank] = value

    def set_done(self, rank: int, value: int) -> None:
        if self.journal is not None:
            self.journal.append(("done", rank, self.done[rank]))
        self.done[rank] = value

    def write(self, rank: int, lo: int, values) -> None:
        """Atoms lo, lo + 1, ... of `rank` take `values`."""
        row = self.mem[rank]
        if type(row) is tuple:
            row = self.mem[rank] = list(row)
        hi = lo + len(values)
        if self.journal is not None:
            self.journal.append(("mem", rank, lo, row[lo:hi]))
        row[lo:hi] = values

    def set_signal(self, rank: int, word: int, value: int) -> None:
        row = self.sigs[rank]
        if type(row) is tuple:
            row = self.sigs[rank] = list(row)
        if self.journal is not None:
            self.journal.append(("sig", rank, word, row[word]))
        row[word] = value

    def launch(self, issuer: int, index: int, payload) -> None:
        """A delivery is now in flight."""
        if self.journal is not None:
            self.journal.append(("launch", issuer, index))
        self.flight[(issuer, index)] = (issuer, index, payload)

    def land(self, key: tuple[int, int]):
        """The delivery `key` leaves the in-flight set; its payload."""
        entry = self.flight.pop(key)
        if self.journal is not None:
            self.journal.append(("land", entry))
        return entry[2]

    # -- journal --------------------------------------------------------------------------------
    def mark(self) -> int:
        return len(self.journal)

    def changes(self, mark: int) -> list[tuple]:
        return self.journal[mark:]

    def undo(self, mark: int) -> None:
        """Return to the state at `mark`, undoing every later change, newest first."""
        journal = self.journal
        while len(journal) > mark:
            entry = journal.pop()
            what = entry[0]
            if what == "pc":
                self.pcs[entry[1]] = entry[2]
            elif what == "done":
                self.done[entry[1]] = entry[2]
            elif what == "mem":
                _, rank, lo, old = entry
                self.mem[rank][lo:lo + len(old)] = old
            elif what == "sig":
                self.sigs[entry[1]][entry[2]] = entry[3]
            elif what == "launch":
                del self.flight[(entry[1], entry[2])]
            else:
                triple = entry[1]
                self.flight[(triple[0], triple[1])] = triple


class Model:
    """A schedule compiled into a transition system: `initial()`, `enabled(state)`,
    `apply(state, action)`, `footprint(action)` and `done(state)`, in the manner of stateright's
    `Model`. Build it from a schedule that matches statically (`match.match` found no problem)."""

    def __init__(self, sched: ir.Schedule, matches: Matches, deadline: Deadline = UNBOUNDED,
                 home: tuple[int, ...] | None = None):
        self.sched = sched
        self.matches = matches
        self.world = sched.world
        # actor -> the rank whose memory and signal words it uses (`semantics.threads`: a rank's threads
        # are actors of their own); the identity for a schedule without threads
        self.home: tuple[int, ...] = home if home is not None else tuple(range(sched.world))
        bounds, transfers = collect_alignments(sched, matches, deadline)
        self.layout: Layout = make_layout(sched, split_atoms(bounds, transfers, deadline))
        self.values = Values()
        self._spans: dict[tuple[int, int], tuple] = {}
        self._interns: dict = {}
        # ranks whose buffers sit at the same offsets (all of them, mostly) share their spans
        offsets: dict[tuple, int] = {}
        self._layout_of = [offsets.setdefault(tuple(sorted(row.items())), len(offsets))
                           for row in self.layout.offset]
        self.sig_offset: dict[str, int] = {}
        self.sig_count = 0
        for decl in sched.programs[0].signals:  # symmetric: the same layout on every rank
            self.sig_offset[decl.name] = self.sig_count
            self.sig_count += decl.count
        self.may_wrap = self._may_wrap()
        # a plain store to a signal word races (`rules.conflicting`): only then are signal words searched for
        # races, as owner -1 - rank (`check.properties`)
        self.sig_races = any(op.kind == "signal_store" for p in sched.programs for op in p.ops)
        self._access_memo: dict[tuple, tuple] = {}  # see `_access`; dropped once the model is built
        self._accesses_memo: dict[tuple, tuple] = {}
        deadline.check("compiling the model")
        self.code: list[list[Code]] = []
        for p in sched.programs:
            self.code.append([self._compile(p.rank, i, op) for i, op in enumerate(p.ops)])
            deadline.check("compiling the model")
        self.nops = tuple(len(p.ops) for p in sched.programs)
        self.coll_members: list[list[Key]] = matches.collectives  # cid -> [(rank, index, sub)]
        self.coll_kind = [matches._op(m[0]).kind for m in matches.collectives]
        self.coll_sync = [rule(kind).sync for kind in self.coll_kind]
        # per collective that quiets first: the actors whose deliveries it waits for (None: every one)
        self.coll_quiets: list[frozenset[int] | None] = [
            frozenset(a for a in range(len(self.home)) if self.home[a] in {self.home[k[0]] for k in m})
            if kind == "team_barrier" else None for kind, m in zip(self.coll_kind, matches.collectives)]
        self.deliveries: dict[tuple[int, int], Delivery] = {
            (c.rank, c.index): c.delivery for row in self.code for c in row if c.delivery is not None}
        self.members_max = 1 + max((len(c.members) for row in self.code for c in row), default=0)
        self.landing_of: dict[Key, tuple[int, int]] = {}  # recv / collective member -> its landing's delivery key
        self.coll_footprint: list[tuple[Access, ...]] = []  # the joint step: every member's reads
        self.coll_member_footprint: list[tuple[Access, ...]] = []  # every access of every member
        self.coll_moves: list[tuple[AtomMove, ...]] = []
        for cid in range(len(matches.collectives)):
            full = self._coll_footprint(cid)
            self.coll_member_footprint.append(full)
            self.coll_footprint.append(tuple(a for a in full if a.mode not in WRITE_MODES))
            self.coll_moves.append(self._coll_moves(cid))
            for key in matches.collectives[cid]:
                self._landing(key, matches._op(key))
        self.p2p_footprint: dict[Key, tuple[Access, ...]] = {}  # the meeting: the send's reads
        self.p2p_member_footprint: dict[Key, tuple[Access, ...]] = {}  # the send's and the recv's accesses
        self.p2p_moves: dict[Key, AtomMove] = {}
        self.p2p_capture: dict[Key, Span] = {}
        for skey, rkey in matches.recv_of.items():
            send, recv = matches._op(skey), matches._op(rkey)
            sent = self._accesses(skey[0], send, When.JOINT)
            self.p2p_footprint[skey] = sent
            self.p2p_member_footprint[skey] = sent + self._accesses(rkey[0], recv, When.JOINT)
            self.p2p_moves[skey] = self._atoms(p2p_flow(send, self.home[skey[0]], recv, self.home[rkey[0]]))
            self.p2p_capture[skey] = self._interned((self.home[skey[0]], *self.span(skey[0], send.src)))
            self._landing(rkey, recv, force=send.slots > 0)
        # Connections with slots (`ir.Send.slots`): the send of message k on a connection waits for the
        # recv of message k - slots (`gate`, None for the first `slots` messages: the FIFO has room), and
        # a message's landing waits for its recv to be posted (`gated`: landing delivery -> the recv).
        self.gate: dict[Key, Key | None] = matches.fifo_gates()
        self.gated: dict[tuple[int, int], Key] = {self.landing_of[matches.recv_of[skey]]: matches.recv_of[skey]
                                                   for skey in self.gate}
        self.posted_fp: dict[tuple[int, int], tuple] = {}  # (rank, index) -> ((sub, accesses), ...)
        for row in self.code:
            for c in row:
                if c.sync is Sync.P2P:
                    found = tuple((sub, self._accesses(c.rank, m, When.JOINT)) for sub, m in c.members
                                  if m.kind == "send")
                    found += tuple((sub, tuple(a for a in self.coll_member_footprint[cid]
                                               if a.owner == self.home[c.rank])) for sub, cid in c.colls)
                elif c.cid is not None and c.sync is Sync.COLLECTIVE:
                    found = ((None, tuple(a for a in self.coll_member_footprint[c.cid]
                                          if a.owner == self.home[c.rank])),)
                else:
                    continue
                found = tuple(self._interned((sub, accs)) for sub, accs in found if accs)
                if found:
                    self.posted_fp[(c.rank, c.index)] = self._interned(found)
        # The caller reads a rank's outputs when the rank's program ends (DESIGN.md: outputs are
        # final when their rank finishes). That read is posted at the rank's end and never
        # completes, like a posted op's pending accesses: a delivery that can still write an
        # output of a finished rank is co-enabled with it (`check.properties` reports it).
        self.end_reads: tuple[tuple[Access, ...], ...] = tuple(self._end_reads(p.rank) for p in sched.programs)
        for rank, accesses in enumerate(self.end_reads):
            if accesses:
                self.posted_fp[(rank, self.nops[rank])] = self._interned(((None, accesses),))
        self._por_index: tuple | None = None
        self._member_fp: dict[Key, tuple[Access, ...]] = {}
        self._access_memo, self._accesses_memo, self._interns = {}, {}, {}

    # -- compilation --------------------------------------------------------------------------
    def _end_reads(self, rank: int) -> tuple[Access, ...]:
        """What the caller reads of `rank`'s memory when its program ends: every region the
        postcondition names on it, and its output and inout buffers (scratch and input buffers are
        not read back), as merged atom spans."""
        if self.home[rank] != rank:  # a thread: the caller reads the outputs at its rank's end
            return ()
        spans = [self.span(rank, exp.region) for exp in self.sched.expect if exp.rank == rank]
        for decl in self.sched.programs[rank].buffers:
            if decl.role in ("output", "inout") and decl.count > 0:
                spans.append(self.span(rank, ir.Region(buffer=decl.name, start=0, stop=decl.count)))
        merged: list[list[int]] = []
        for lo, hi in sorted(s for s in spans if s[0] < s[1]):
            if merged and lo <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        return tuple(Access(rank, MEM, lo, hi, READ) for lo, hi in merged)

    def is_end(self, rank: int, index: int) -> bool:
        """Whether op position `index` of `rank` is its end (the caller's read of its outputs)."""
        return index >= self.nops[rank]

    def span(self, rank: int, region: ir.Region) -> tuple[int, int]:
        """The atoms [lo, hi) of `region` in `rank`'s memory."""
        rank = self.home[rank]
        key = (self._layout_of[rank], id(region))
        found = self._spans.get(key)
        if found is not None and found[0] is region:
            return found[1]
        span = self.layout.span(rank, region)
        if len(self._spans) < SPAN_MEMO:  # shared regions, held here so that their identity stays theirs
            self._spans[key] = (region, span)
        return span

    def sig_word(self, ref: ir.SignalRef) -> int:
        """The index of a signal word in a rank's signal array."""
        return self.sig_offset[ref.signal] + ref.index

    def _may_wrap(self) -> frozenset[tuple[int, int]]:
        """The (rank, word) signal words that adds might wrap around 2**64 in some execution
        (`words.may_wrap`): only elsewhere may the reduction treat a `ge`/`gt` wait that holds as
        commuting with adds."""
        return frozenset((owner, self.sig_offset[signal] + index) for owner, signal, index in may_wrap(self.sched))

    def _access(self, a: RuleAccess) -> Access:
        # The tracer shares region objects among ops and ranks: one compiled access per (owner,
        # region, mode), held with the region (so that its identity is not reused meanwhile).
        key = (a.owner, id(a.where), a.mode)
        found = self._access_memo.get(key)
        if found is not None and found[0] is a.where:
            return found[1]
        if isinstance(a.where, ir.SignalRef):
            word = self.sig_word(a.where)
            access = Access(a.owner, SIG, word, word + 1, a.mode)
        else:
            access = Access(a.owner, MEM, *self.span(a.owner, a.where), a.mode)
        self._access_memo[key] = (a.where, access)
        return access

    def _accesses(self, rank: int, op, when: When) -> tuple[Access, ...]:
        """The non-empty compiled accesses of `op` on `rank` that happen `when` (asked several
        times per op while the model is built: a recv's for its meeting and for its landing)."""
        key = (rank, id(op), when)
        found = self._accesses_memo.get(key)
        if found is not None and found[0] is op:
            return found[1]
        compiled = (self._access(a) for a in rule(op).accesses(op, self.home[rank]) if a.when is when)
        result = tuple(a for a in compiled if a.lo < a.hi)
        self._accesses_memo[key] = (op, result)
        return result

    def _atoms(self, move: Move) -> AtomMove:
        atoms = AtomMove(dsts=self._spans_of(move.dsts), srcs=self._spans_of(move.srcs), combine=move.combine,
                         value=move.value, opaque=move.opaque)
        return atoms if move.value is not None else self._interned(atoms)  # -0.0 equals 0.0: fills kept apart

    def _spans_of(self, places) -> tuple[Span, ...]:
        """The atom spans of (rank, region) places, one tuple object per distinct value."""
        interns, span, found = self._interns, self.span, []
        for r, region in places:
            lo, hi = span(r, region)
            entry = (r, lo, hi)
            found.append(interns.setdefault(entry, entry))
        spans = tuple(found)
        return interns.setdefault(spans, spans)

    def _compile(self, rank: int, index: int, op) -> Code:
        r = rule(op)
        c = Code(rank=rank, index=index, op=op, kind=op.kind, rule=r, sync=r.sync)
        if c.sync is Sync.P2P:
            c.members = members_of(op)
            c.sends = tuple(sub for sub, m in c.members if m.kind == "send")
            # a send on a connection with slots needs no one while its FIFO has room (`gate`)
            c.colls = tuple((sub, self.matches.cid_of[(rank, index, sub)]) for sub, m in c.members
                            if (rank, index, sub) in self.matches.cid_of)
            peers = {m.peer for _, m in c.members if m.kind in ("send", "recv") and not _fifo_send(m)}
            peers |= {k[0] for _, cid in c.colls for k in self.matches.collectives[cid]}
            c.partners = self._interned(frozenset(peers) - {rank})
            return c
        if c.sync in (Sync.COLLECTIVE, Sync.BARRIER_ALL, Sync.SYNC_ALL):
            c.cid = self.matches.cid_of.get((rank, index, None))
            if c.cid is not None:
                c.partners = frozenset(k[0] for k in self.matches.collectives[c.cid]) - {rank}
            return c
        fp = list(self._accesses(rank, op, When.ISSUE))
        awaits = r.awaits(op, self.home[rank])
        if awaits is not None:
            words = tuple(self.sig_word(ref) for ref in awaits.words)
            c.awaits = Awaits(words, awaits.cmp, awaits.value, awaits.all)
            if awaits.cmp in ("ge", "gt"):  # see `_may_wrap`: adds never make such a wait false again
                fp = [a._replace(mode=SIG_READ_MONOTONE) if a.space == SIG and a.mode == SIG_READ
                      and (self.home[rank], a.lo) not in self.may_wrap else a for a in fp]
        if c.sync is Sync.DELIVERY:
            c.delivery = self._delivery(rank, index, op)
        else:
            c.moves = tuple(self._atoms(m) for m in r.flows(op, self.home[rank]))
            update = r.word_update(op)
            if update is not None:  # a store to a signal word of its own rank (`rules.SignalStoreRule`)
                c.store = (self.sig_word(update[0]), update[2])
        c.footprint = tuple(fp)
        return c

    def _interned(self, value):
        """One object per distinct value (a ring's ranks have the same few partner sets)."""
        return self._interns.setdefault(value, value)

    def _delivery(self, rank: int, index: int, op) -> Delivery:
        r = rule(op)
        ops = self.sched.programs[rank].ops
        moves = tuple(self._atoms(m) for m in r.flows(op, self.home[rank]))
        target = moves[0].dsts[0][0] if moves else op.pe
        d = Delivery(issuer=rank, index=index, target=target, pe=op.pe, fenced=r.fenced,
                     epoch=sum(1 for o in ops[:index] if o.kind == "fence"), moves=moves)
        at_issue = [a for a in r.accesses(op, self.home[rank]) if a.when is When.ISSUE and a.mode == READ]
        if at_issue and moves:  # a blocking put: the data leaves with the issue
            d.capture = moves[0].srcs[0]
        update = r.word_update(op)
        if update is not None:
            ref, how, value = update
            if isinstance(ref, ir.SignalRef):
                d.update = (SIG, self.sig_word(ref), how, value)
            else:
                d.update = (MEM, self.span(op.pe, ref)[0], how, value)
        d.footprint = self._accesses(rank, op, When.DELIVERY)
        return d

    def _coll_footprint(self, cid: int) -> tuple[Access, ...]:
        return tuple(a for key in self.matches.collectives[cid]
                     for a in self._accesses(key[0], self.matches._op(key), When.JOINT))

    def _coll_moves(self, cid: int) -> tuple[AtomMove, ...]:
        members = self.matches.collectives[cid]
        ops = [self.matches._op(key) for key in members]
        return tuple(self._atoms(m) for m in collective_flows(ops, [key[0] for key in members]))

    def arrived(self, pcs, dones, key: Key) -> bool:
        """Whether the collective member `key` = (rank, index, sub) has arrived and its sources are not
        read yet: its rank stands at the op and, in a group, the member has neither completed (bit sub)
        nor had its sources read (bit n + sub, n the group's members); alone, the rank's done word is 0."""
        rank, index, sub = key
        if pcs[rank] != index:
            return False
        if sub is None:
            return not dones[rank]
        return not (dones[rank] >> sub) & 1 and not (dones[rank] >> (len(self.code[rank][index].members) + sub)) & 1

    def received(self, pcs, dones, key: Key) -> bool:
        """Whether the recv at `key` = (rank, index, sub) has completed."""
        rank, index, sub = key
        pc = pcs[rank]
        return pc > index or (pc == index and sub is not None and bool((dones[rank] >> sub) & 1))

    def _landing(self, key: Key, op, force: bool = False) -> None:
        """Compile the landing of a recv or collective member that writes (`rules.lands`); `force`: a
        recv on a connection with slots, which takes its message in a landing even when it writes
        nothing."""
        rank, index, sub = key
        joint = self._accesses(rank, op, When.JOINT)
        writes = tuple(a for a in joint if a.mode in WRITE_MODES)
        mine = self.home[rank]
        if not force and not any(a.owner == mine for a in writes) and not lands(op, mine):
            return
        r = rule(op)
        footprint = joint if (op.kind == "recv" or getattr(r, "reads_until_done", False)) else writes
        at = (rank, -1 - (index * self.members_max + (0 if sub is None else sub + 1)))
        self.landing_of[key] = at
        self.deliveries[at] = Delivery(issuer=rank, index=at[1], target=mine, pe=mine, epoch=0, fenced=False,
                                       footprint=footprint, completes=key,
                                       spans=self._interned(tuple((mine, a.lo, a.hi) for a in writes)),
                                       combine=op.reduce if op.kind == "recv" else None)

    def landing(self, state: State, key: Key) -> Deliver | None:
        """The pending landing action of the recv or collective member `key`, if it is in flight."""
        at = self.landing_of.get(key)
        if at is None:
            return None
        if type(state) is Work:
            return build(Deliver, ("deliver", *at)) if at in state.flight else None
        at_issuer, at_index = at
        for issuer, index, _ in state.in_flight:
            if issuer == at_issuer and index == at_index:
                return Deliver("deliver", at_issuer, at_index)
        return None

    def posted_accesses(self, state: State) -> list[tuple[tuple, tuple[Access, ...]]]:
        """The accesses of posted ops that have not completed: NCCL and MPI may read a send's `src`
        at any time from its post until it completes (not only when it meets its recv), and a
        collective member's `src` and `dst` from its arrival until the sources are read (its
        landing holds them after that). Each comes as (`Post`("post", rank, index, sub), accesses):
        an action of no one, which races with any enabled action it conflicts with, except its own."""
        found = []
        pcs, done = state.pcs, state.group_done
        for rank in range(self.world):
            entries = self.posted_fp.get((rank, pcs[rank]))
            if entries is None:
                continue
            for sub, accesses in entries:
                if sub is not None and (done[rank] >> sub) & 1:
                    continue
                if sub is not None and (done[rank] >> (len(self.code[rank][pcs[rank]].members) + sub)) & 1:
                    continue  # a grouped collective whose sources are read: its landing holds them
                if sub is None and done[rank]:
                    continue  # a collective whose sources are read: its landing holds its accesses
                found.append((Post("post", rank, pcs[rank], sub), accesses))
        return found

    def own_action(self, post: Post, action: Action) -> bool:
        """Whether `action` is the meeting or joint step of the posted op `post` itself."""
        rank, index, sub = post.key
        if index >= self.nops[rank]:
            return False  # the caller's read at the rank's end belongs to no action
        kind = action.kind
        if kind == "p2p":
            return action.key == (rank, index, sub)
        if kind == "coll":
            if sub is not None:
                return self.matches.cid_of.get((rank, index, sub)) == action.cid
            return self.code[rank][index].cid == action.cid
        return False

    def land_all(self, state: State, ready=None) -> State:
        """`state` after every pending landing (the simulator lands each at once: a recv's or a
        collective member's completion costs no time of its own there); a message on a connection with
        slots only once its recv is posted, and `ready(recv key)` says that its rank has reached it."""
        def takes(i: int, j: int) -> bool:
            if j >= 0:
                return False
            recv = self.gated.get((i, j))
            return recv is None or (self.posted(state, recv) and (ready is None or ready(recv)))

        while True:
            pending = [(i, j) for i, j, _ in state.in_flight if takes(i, j)]
            if not pending:
                return state
            for i, j in pending:
                state = self.apply(state, Deliver("deliver", i, j))

    # -- partial-order reduction index --------------------------------------------------------
    @property
    def accessors(self) -> list[list[list[tuple]]]:
        """Per owner rank and space: every op of any rank that may touch that memory, as
        (rank, index, sub, lo, hi, mode, other ranks it needs). Built on first use (the simulator
        never needs it)."""
        return self._index()[0]

    @property
    def joints(self) -> list[list[tuple[int, frozenset]]]:
        """Per rank, the ops that need other ranks (a rank cannot pass them while those ranks
        stand still), as (index, partners)."""
        return self._index()[1]

    def _index(self) -> tuple:
        if self._por_index is None:
            self._por_index = self._build_por_index()
        return self._por_index

    def _build_por_index(self) -> tuple:
        accessors: list[list[list[tuple]]] = [[[], []] for _ in range(self.world)]
        joints: list[list[tuple[int, frozenset]]] = [[] for _ in range(self.world)]
        for row in self.code:
            for c in row:
                entries: list[tuple[Access, int | None, frozenset]] = []
                if c.sync is Sync.P2P:
                    colls = dict(c.colls)
                    for sub, m in c.members:
                        if sub in colls:
                            others = frozenset(k[0] for k in self.coll_members[colls[sub]]) - {c.rank}
                            for acc in self.coll_member_footprint[colls[sub]]:
                                if acc.owner == self.home[c.rank]:
                                    entries.append((acc, sub, others))
                            continue
                        others = (frozenset() if _fifo_send(m) else frozenset({m.peer}) - {c.rank}) \
                            if c.kind == "group" else c.partners
                        for acc in self._member_footprint(c.rank, c.index, sub, m):
                            entries.append((acc, sub, others))
                elif c.cid is not None:
                    for acc in self.coll_member_footprint[c.cid]:
                        if acc.owner == self.home[c.rank]:
                            entries.append((acc, None, c.partners))
                for acc in c.footprint:
                    entries.append((acc, None, frozenset()))
                if c.delivery is not None:
                    for acc in c.delivery.footprint:
                        entries.append((acc, None, frozenset()))
                for (owner, space, lo, hi, mode), sub, others in entries:
                    accessors[owner][space].append((c.rank, c.index, sub, lo, hi, mode, others))
                if c.partners:
                    joints[c.rank].append((c.index, c.partners))
        for rank, accesses in enumerate(self.end_reads):  # after every op of the rank: sorted by index
            for owner, space, lo, hi, mode in accesses:
                accessors[owner][space].append((rank, self.nops[rank], None, lo, hi, mode, frozenset()))
        return accessors, joints

    def _member_footprint(self, rank: int, index: int, sub, op) -> tuple[Access, ...]:
        """The accesses of a group member to its own rank's memory: a send's or recv's, or a
        collective member's (its sources and its own destination)."""
        key = (rank, index, sub)
        found = self._member_fp.get(key)
        if found is None:
            mine = self.home[rank]  # a thread's accesses are to its rank's memory
            cid = self.matches.cid_of.get(key)
            if cid is not None:
                found = tuple(a for a in self.coll_member_footprint[cid] if a.owner == mine)
            else:
                skey = key if op.kind == "send" else self.matches.send_of.get(key)
                found = tuple(a for a in self.p2p_member_footprint.get(skey, ()) if a.owner == mine) if skey else ()
            self._member_fp[key] = found
        return found

    # -- states -------------------------------------------------------------------------------
    def initial(self) -> State:
        """Every rank at its first op, buffers holding their initial values, signal words 0."""
        mem = tuple(tuple(self.values.initial(rank, *atom) for atom in self.layout.atom_names[rank])
                    for rank in range(self.world))
        sigs = tuple((0,) * self.sig_count for _ in range(self.world))
        return State(tuple([0] * self.world), tuple([0] * self.world), mem, sigs, ())

    def posted(self, state: State, key: Key) -> bool:
        """Whether the send or recv at `key` = (rank, index, sub) is posted and not yet complete."""
        rank, index, sub = key
        if state.pcs[rank] != index:
            return False
        return sub is None or not (state.group_done[rank] >> sub) & 1

    def in_flight_from(self, state: State, rank: int) -> bool:
        """Whether a one-sided delivery `rank` issued has yet to land (what its quiet waits for). A
        landing is none: a message in a connection's FIFO is keyed by its recv, which may come after
        the quiet, and a recv's own landing completes that recv, not a quiet."""
        deliveries = self.deliveries
        return any(issuer == rank and deliveries[(issuer, index)].completes is None
                   for issuer, index, _ in state.in_flight)

    def one_sided_in_flight(self, state: State) -> bool:
        """Whether any one-sided delivery has yet to land (what barrier_all's quiet waits for)."""
        deliveries = self.deliveries
        return any(deliveries[(issuer, index)].completes is None for issuer, index, _ in state.in_flight)

    def orders_before(self, first: Delivery, then: Delivery) -> bool:
        """Whether a fence makes `first` land before `then`: same issuer and PE, an earlier epoch."""
        return (first.fenced and then.fenced and first.issuer == then.issuer and first.pe == then.pe
                and first.epoch < then.epoch)

    def delivery_blocked(self, state: State, issuer: int, index: int) -> bool:
        """Whether a delivery in flight must wait for another one (fence order)."""
        d = self.deliveries[(issuer, index)]
        if d.epoch == 0 or not d.fenced:  # no fence before it: nothing can be ordered ahead of it
            return False
        for other_issuer, other_index, _ in state.in_flight:
            if other_issuer == issuer and other_index != index:
                if self.orders_before(self.deliveries[(other_issuer, other_index)], d):
                    return True
        return False

    def waiting_holds(self, state: State, c: Code) -> bool:
        """Whether the comparison of the wait `c` holds in `state`."""
        words, cmp, value, every = c.awaits
        row, test = state.signals[self.home[c.rank]], COMPARE[cmp]
        if every:
            return all(test(row[w], value) for w in words)
        return any(test(row[w], value) for w in words)

    def enabled(self, state: State) -> list[Action]:
        """The actions that can fire in `state`, in a fixed order (rank by rank, then deliveries)."""
        acts: list[Action] = []
        for rank in range(self.world):
            acts += self.rank_enabled(state, rank)
        in_flight = state.in_flight
        floors = self.fence_floors(in_flight)
        gated = self.gated
        for issuer, index, _ in in_flight:
            if not self.fenced_behind(floors, issuer, index):
                if gated and (issuer, index) in gated and not self.posted(state, gated[(issuer, index)]):
                    continue  # a message in a FIFO: its recv takes it once posted
                acts.append(Deliver("deliver", issuer, index))
        return acts

    def rank_enabled(self, state: State, rank: int, collectives: bool = True) -> list[Action]:
        """The enabled actions of `rank`'s current op: its step, the sends of its group whose recv
        is posted, or (`collectives`, and `rank` its first member) its collective, once every
        member has arrived."""
        if type(state) is Work:  # the in-place search asks this after every action: `done`, its slot, costs less
            pcs, dones = state.pcs, state.done
        else:
            pcs, dones = state.pcs, state.group_done
        pc = pcs[rank]
        if pc >= self.nops[rank]:
            return []
        c = self.code[rank][pc]
        sync = c.sync
        if sync is Sync.P2P:
            done, recv_of, acts = dones[rank], self.matches.recv_of, []
            gate = self.gate
            for sub in c.sends:
                if not (sub is not None and (done >> sub) & 1):
                    if gate and (rank, pc, sub) in gate:  # a connection with slots: room in its FIFO
                        before = gate[(rank, pc, sub)]
                        if before is None or self.received(pcs, dones, before):
                            acts.append(build(P2P, ("p2p", rank, pc, sub)))
                        continue
                    peer = recv_of.get((rank, pc, sub))
                    # posted: the recv's rank stands at it and it has not completed
                    if peer is not None and pcs[peer[0]] == peer[1] and (
                            peer[2] is None or not (dones[peer[0]] >> peer[2]) & 1):
                        acts.append(build(P2P, ("p2p", rank, pc, sub)))
            if c.colls and collectives:  # its collectives, each from its first member, once all have arrived
                for _sub, cid in c.colls:
                    if self.coll_members[cid][0][0] == rank and self.coll_ready(state, cid):
                        acts.append(build(Coll, ("coll", cid)))
            return acts
        if c.cid is not None or sync in (Sync.COLLECTIVE, Sync.BARRIER_ALL, Sync.SYNC_ALL):
            if c.cid is None or not collectives or self.coll_members[c.cid][0][0] != rank:
                return []
            return [build(Coll, ("coll", c.cid))] if self.coll_ready(state, c.cid) else []
        if sync is Sync.WAIT:
            return [build(Step, ("step", rank, pc))] if self.waiting_holds(state, c) else []
        if sync is Sync.QUIET:
            return [] if self.in_flight_from(state, rank) else [build(Step, ("step", rank, pc))]
        return [build(Step, ("step", rank, pc))]

    def coll_ready(self, state: State, cid: int) -> bool:
        """Whether every member of collective `cid` has arrived (and, for barrier_all, nothing is in
        flight)."""
        pcs, done = state.pcs, state.group_done
        if not all(self.arrived(pcs, done, key) for key in self.coll_members[cid]):  # done: landing pending
            return False
        if self.coll_sync[cid] is not Sync.BARRIER_ALL or not state.in_flight:
            return True
        if self.coll_quiets[cid] is None:  # barrier_all: every rank's quiet, then they meet
            return not self.one_sided_in_flight(state)
        return not self.team_held(cid, state.in_flight)

    def team_held(self, cid: int, in_flight) -> bool:
        """Whether team barrier `cid` must wait: one of its members' one-sided deliveries is in flight
        (its quiet). A landing is no delivery a quiet waits for: a message in a connection's FIFO is
        keyed by its recv, which may come after the barrier."""
        quiets, deliveries = self.coll_quiets[cid], self.deliveries
        return any(entry[0] in quiets and deliveries[(entry[0], entry[1])].completes is None for entry in in_flight)

    def fence_floors(self, in_flight) -> dict[tuple[int, int], int]:
        """(issuer, PE) -> the earliest fence epoch among the issuer's fenced deliveries to that PE
        in flight: a fenced delivery of a later epoch must wait (`fenced_behind`)."""
        floors: dict[tuple[int, int], int] = {}
        deliveries = self.deliveries
        for issuer, index, _ in in_flight:
            d = deliveries[(issuer, index)]
            if d.fenced:
                key = (issuer, d.pe)
                if d.epoch < floors.get(key, d.epoch + 1):
                    floors[key] = d.epoch
        return floors

    def fenced_behind(self, floors: dict, issuer: int, index: int) -> bool:
        """Whether the delivery (issuer, index) must wait for an earlier one to its PE, given the
        in-flight set's `fence_floors`."""
        d = self.deliveries[(issuer, index)]
        return d.fenced and floors.get((issuer, d.pe), d.epoch) < d.epoch

    def footprint(self, action: Action) -> tuple[Access, ...]:
        """The atoms and signal words `action` touches, with their modes."""
        kind = action.kind
        if kind == "step":
            return self.code[action.rank][action.index].footprint
        if kind == "p2p":
            return self.p2p_footprint[action.key]
        if kind == "coll":
            return self.coll_footprint[action.cid]
        return self.deliveries[action.key].footprint

    # -- effects ------------------------------------------------------------------------------
    def apply(self, state: State, action: Action) -> State:
        """The state after `action` (which must be enabled in `state`)."""
        work = Work(state, journal=False)
        self.execute(work, action)
        return work.freeze()

    def execute(self, work: "Work", action: Action) -> None:
        """Apply `action` (enabled in the state `work` holds) to `work`, in place. Every source is
        read in the state before the action, so an action's writes never feed its own reads."""
        kind = action.kind
        if kind == "step":
            rank = action.rank
            self._step(work, rank, self.code[rank][action.index])
            work.set_pc(rank, work.pcs[rank] + 1)
        elif kind == "p2p":
            skey = action.key
            rkey = self.matches.recv_of[skey]
            at = self.landing_of.get(rkey)
            if at is None:
                self._write(work, self._move(self.p2p_moves[skey], work.mem))
            else:  # the data is in flight: the recv lands later
                r, lo, hi = self.p2p_capture[skey]
                work.launch(at[0], at[1], tuple(work.mem[r][lo:hi]))
            self._complete(work, skey)
            if at is None:
                self._complete(work, rkey)
        elif kind == "coll":
            self._collect(work, action.cid)
        else:
            key = action.key
            payload = work.land(key)
            d = self.deliveries[key]
            if d.completes is None:
                self._deliver(work, d, payload)
            else:
                self._land(work, d, payload)
                self._complete(work, d.completes)

    def _complete(self, work: "Work", key: Key) -> None:
        """The op (or group member) at `key` is complete: the rank moves on (after its group's last)."""
        rank, index, sub = key
        if sub is None:
            work.set_pc(rank, work.pcs[rank] + 1)
            if work.done[rank]:
                work.set_done(rank, 0)
            return
        members = len(self.code[rank][index].members)
        done = (work.done[rank] | 1 << sub) & ~(1 << (members + sub))  # a grouped collective: landed
        if done == (1 << members) - 1:
            work.set_done(rank, 0)
            work.set_pc(rank, work.pcs[rank] + 1)
        else:
            work.set_done(rank, done)

    def _collect(self, work: "Work", cid: int) -> None:
        """Every member has arrived: read the sources and compute every output; a member that writes
        gets its values as the payload of its landing, the others complete now."""
        mem = work.mem
        out: dict[int, dict[int, int]] = {}  # rank -> atom -> value, what the moves compute
        for move in self.coll_moves[cid]:
            for r, lo, values in self._move(move, mem):
                cells = out.setdefault(r, {})
                for n, v in enumerate(values):
                    cells[lo + n] = v
        for key in self.coll_members[cid]:
            rank, index, sub = key
            at = self.landing_of.get(key)
            if at is None:
                if sub is None:
                    work.set_pc(rank, work.pcs[rank] + 1)
                else:
                    self._complete(work, key)
                continue
            if sub is None:
                work.set_done(rank, 1)  # the sources are read; the member completes at its landing
            else:
                work.set_done(rank, work.done[rank] | 1 << (len(self.code[rank][index].members) + sub))
            cells, row = out.get(rank, {}), mem[rank]
            payload = tuple(cells.get(a, row[a]) for _r, lo, hi in self.deliveries[at].spans for a in range(lo, hi))
            work.launch(at[0], at[1], payload)

    def _land(self, work: "Work", d: Delivery, payload: tuple) -> None:
        """A landing: the payload goes to its spans (a recv with reduce: dst combine payload)."""
        n = 0
        for r, lo, hi in d.spans:
            if d.combine is None:
                values = payload[n:n + hi - lo]
            else:
                row, combine = work.mem[r], self.values.combine
                values = tuple(combine(d.combine, (row[a], payload[n + a - lo])) for a in range(lo, hi))
            work.write(r, lo, values)
            n += hi - lo

    @staticmethod
    def _write(work: "Work", writes: list) -> None:
        for r, lo, values in writes:
            work.write(r, lo, values)

    def _move(self, move: AtomMove, mem, values: tuple | None = None, rank: int = 0, index: int = 0) -> list:
        """One data move, as the writes [(rank, first atom, values)] it makes: sources read in
        `mem` (or `values`, a payload read at issue)."""
        vals = self.values
        if move.value is not None:
            const = vals.const(move.value)
            return [(r, lo, (const,) * (hi - lo)) for r, lo, hi in move.dsts]
        if move.opaque is not None:  # every output depends on everything the kernel read
            reads = tuple(v for r, lo, hi in move.srcs for v in mem[r][lo:hi])
            writes, n = [], 0
            for r, lo, hi in move.dsts:
                writes.append((r, lo, tuple(vals.intern(("opaque", move.opaque, rank, index, n + k, reads))
                                            for k in range(hi - lo))))
                n += hi - lo
            return writes
        if values is None:
            columns = [mem[r][lo:hi] for r, lo, hi in move.srcs]
            if len(columns) == 1:
                values = tuple(columns[0])
            else:
                values = tuple(vals.combine(move.combine, tuple(col[i] for col in columns))
                               for i in range(len(columns[0])))
        return [(r, lo, values) for r, lo, _hi in move.dsts]

    def _step(self, work: "Work", rank: int, c: Code) -> None:
        if c.delivery is not None:
            d = c.delivery
            payload = tuple(work.mem[d.capture[0]][d.capture[1]:d.capture[2]]) if d.capture is not None else None
            work.launch(rank, c.index, payload)
            return
        writes = []
        if c.rule.fetches:
            writes += self._fetch(work, rank, c.op)
        for move in c.moves:  # every move reads the state before the op
            writes += self._move(move, work.mem, rank=rank, index=c.index)
        self._write(work, writes)
        if c.store is not None:
            work.set_signal(self.home[rank], c.store[0], c.store[1])

    def _fetch(self, work: "Work", rank: int, op) -> list:
        vals = self.values
        i_lo, _ = self.span(rank, op.into)
        if isinstance(op.target, ir.SignalRef):
            word = self.sig_word(op.target)
            old = work.sigs[op.pe][word]
            work.set_signal(op.pe, word, fetch_result(op.op, old, op.value, op.cond))
            return [(self.home[rank], i_lo, (vals.const(old),))]
        lo, _ = self.span(op.pe, op.target)
        old = work.mem[op.pe][lo]
        if op.op == "fetch":  # an atomic read: the target keeps its value
            new = old
        elif op.op in ("fetch_add", "fetch_inc"):
            new = self._atomic_term("add", op.value if op.op == "fetch_add" else 1, old)
        else:
            new = vals.intern(("atomic", op.op, (op.value, op.cond), (old,)))
        return [(op.pe, lo, (new,)), (self.home[rank], i_lo, (old,))]

    def _deliver(self, work: "Work", d: Delivery, payload) -> None:
        writes = []
        for move in d.moves:
            writes += self._move(move, work.mem, values=payload)
        self._write(work, writes)
        if d.update is not None:
            space, where, how, value = d.update
            if space == SIG:
                work.set_signal(d.target, where, atomic_result(how, work.sigs[d.target][where], value))
            else:
                work.write(d.target, where, (self._atomic_term(how, value, work.mem[d.target][where]),))

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

    def done(self, state: State) -> bool:
        """Whether every rank has executed its whole program (deliveries may still be in flight)."""
        return all(pc >= n for pc, n in zip(state.pcs, self.nops))
