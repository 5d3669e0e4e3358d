"""Concurrency inside a rank: a rank's threads (`ir.Thread`: the thread blocks of a kernel, the
streams of a host) as actors of the machine.

`expand` turns a schedule whose ranks may run threads into one whose programs are *actors*, each a
sequence of ops, that the machine runs as it runs ranks:
- actors 0 .. world-1 are the ranks themselves, so ranks, PEs and the postcondition keep their
  numbers. A rank without threads is its own program. A rank with threads is its *end*: one wait
  until every one of its threads has ended (what the caller does before reading the rank's outputs);
- actors world .. are the threads, rank by rank, each its thread's ops followed by its end: a signal
  of that thread's word in `END_SIGNAL`, to its own rank. The end completes none of the thread's
  puts: a kernel's end does not complete its NVSHMEM puts, and a rank that reads what a thread put
  must wait for it (a quiet, a signal, a barrier);
- `home[actor]` is the rank whose memory and signal words an actor uses: the machine compiles every
  access of an actor against its home (`Model(home=...)`), so the threads of a rank share one memory
  and a conflict between two of them is a data race like any other;
- a send or recv of a thread names its peer rank; the actor that meets it is the one thread (or the
  rank) on the other side that uses the same connection (communicator, channel, the two ranks). Two
  threads of one rank on one connection would take its messages in an order nothing fixes (MSCCL's
  executor forbids it too): `expand` reports it as a send/recv mismatch naming both;
- a fence or quiet orders or completes its own thread's deliveries (the issuer is the actor);
- events and thread barriers (`ir.THREAD_SYNC_KINDS`) become signal words of the rank, so the
  machine, the reduction and its proofs need nothing new (`lower_thread_sync`): event e gets the
  words `cw_event_<i>[0..n]`, record k sets word k (a signal to its own rank, so it completes none
  of the thread's puts), a wait for record k waits until word k is 1, and a wait with no record
  before it waits on word 0, which nothing sets (a deadlock naming the event). Barrier b gets one
  word per listed thread: the k-th arrival adds 1 to the thread's word, then waits until every
  listed word is at least k. The rank's end also waits for every record it made, as a host's final
  synchronisation waits for every stream. Reports name the ops as the user wrote them (`origin`).

Collectives, barrier_all and sync_all are not yet supported inside threads (which thread of a rank
meets the others is then a matter of order): `expand` refuses them with the reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .. import ir
from .match import Mismatch, OpRef
from .rules import describe

END_SIGNAL = "cw_thread_end"  # the threads' end words (another name if the schedule uses this one)


@dataclass(frozen=True)
class Actors:
    """A schedule as actors: `sched` (one program per actor), each actor's home rank and thread
    name (None for a rank's own program or end), and the number of ranks."""

    sched: ir.Schedule
    home: tuple[int, ...]
    thread: tuple[str | None, ...]
    ranks: int
    kinds: dict[tuple[int, str], str] = field(default_factory=dict)  # (rank, thread) -> "block" or "stream"
    # a lowered op (actor, index) -> (its index in the user's thread, the op as written): events and barriers
    origin: dict[tuple[int, int], tuple[int, object]] = field(default_factory=dict)
    # how a lowered op renders -> how the op as written renders, for the messages
    renamed: dict[str, str] = field(default_factory=dict)

    @property
    def threaded(self) -> bool:
        return len(self.home) > self.ranks or any(t is not None for t in self.thread)

    def who(self, actor: int) -> str:
        """How a report names an actor: "rank 1" (a rank, its memory, or the end of its threads),
        "rank 1 block tb2" (a thread)."""
        rank, name = self.home[actor], self.thread[actor]
        if name is not None:
            kind = self.kinds.get((rank, name), "thread")
            return f"rank {rank} {kind} {name}"
        return f"rank {rank}"

    def ref(self, ref: OpRef) -> OpRef:
        """An op named by actor, named by its rank and thread."""
        actor = ref.rank
        if actor >= len(self.home):
            return ref
        index, kind, text = ref.index, ref.kind, self.text(ref.text)
        found = self.origin.get((actor, ref.index))
        if found is not None:
            index, op = found
            if op is not None:
                kind, text = op.kind, describe(op)
        return OpRef(rank=self.home[actor], index=index, sub=ref.sub, kind=kind, loc=ref.loc, text=text,
                     thread=self.thread[actor] if self.thread[actor] is not None else (
                         "end" if actor < self.ranks and _is_end(self.sched.programs[actor]) else None))

    def text(self, message: str) -> str:
        """A message that names actors ("rank 5", "rank(s) 0, 5", "cycle 0 -> 5 -> 0"), naming
        ranks and threads instead."""
        def one(number: str) -> str:
            actor = int(number)
            return self.who(actor) if actor < len(self.home) else f"rank {number}"

        def many(match: re.Match) -> str:
            return ", ".join(one(n) for n in re.findall(r"\d+", match.group(2)))

        for lowered, written in self.renamed.items():
            message = message.replace(lowered, written)
        message = _PEER.sub(lambda m: f"peer={self.home[int(m.group(1))]}" if int(m.group(1)) < len(self.home)
                            else m.group(0), message)
        message = _CYCLE.sub(lambda m: m.group(1) + " -> ".join(one(n) for n in re.findall(r"\d+", m.group(2))),
                             message)
        message = _RANKS.sub(many, message)
        return _RANK.sub(lambda m: one(m.group(1)), message)


_PEER = re.compile(r"\bpeer=(\d+)")
_RANK = re.compile(r"\brank (\d+)\b(?! (?:block|stream|thread) )")
_RANKS = re.compile(r"\b(ranks?\(s\)|ranks) (\d+(?:, \d+)+|\d+)\b")
_CYCLE = re.compile(r"(wait-for cycle )(\d+(?: -> \d+)+)")


def _is_end(program: ir.Program) -> bool:
    ops = program.ops
    return len(ops) == 1 and ops[0].kind == "wait_until_all" and ops[0].signals[0].signal.startswith(END_SIGNAL)


def threaded(sched: ir.Schedule) -> bool:
    """Whether any rank of `sched` runs threads."""
    return any(p.threads for p in sched.programs)


def identity(sched: ir.Schedule) -> Actors:
    return Actors(sched=sched, home=tuple(range(sched.world)), thread=(None,) * sched.world, ranks=sched.world)


def _refuse(thread: ir.Thread, rank: int, index: int, op) -> Mismatch:
    ref = OpRef(rank=rank, index=index, kind=op.kind, loc=op.loc, text=describe(op), thread=thread.name)
    return Mismatch(kind="collective_mismatch", ranks=(rank,), ops=(ref,),
                    message=f"{op.loc}: rank {rank} {thread.kind} {thread.name}: {describe(op)}: collectives, "
                            "barrier_all and sync_all inside threads are not supported yet (which thread meets the "
                            "other ranks would depend on the order the threads run in); call it from a rank "
                            "without threads")


def expand(sched: ir.Schedule) -> tuple[Actors, list[Mismatch]]:
    """The actors of `sched` (see the module docstring), and what makes it impossible to build them."""
    if not threaded(sched):
        return identity(sched), []
    world = sched.world
    problems: list[Mismatch] = []
    used = {d.name for p in sched.programs for d in p.signals}
    end_name = END_SIGNAL
    while end_name in used:
        end_name += "_"
    most = max(len(p.threads) for p in sched.programs)
    end_decl = ir.SignalDecl(name=end_name, count=max(most, 1), loc=sched.loc)
    sync, sync_problems = _thread_sync(sched, used | {end_name})
    problems += sync_problems
    signals = (*sched.programs[0].signals, end_decl, *sync.decls)
    # every actor: (home rank, thread or None, its ops as written)
    actors: list[tuple[int, ir.Thread | None]] = [(p.rank, None) for p in sched.programs]
    for p in sched.programs:
        actors += [(p.rank, t) for t in p.threads]
    # which actor of each rank uses each connection: (comm, channel, sender rank, receiver rank, side)
    users: dict[tuple, list[tuple[int, ir.Thread | None]]] = {}
    for actor, (rank, thread) in enumerate(actors):
        if thread is None and sched.programs[rank].threads:
            continue
        ops = thread.ops if thread is not None else sched.programs[rank].ops
        for index, op in enumerate(ops):
            if thread is not None and (op.kind in ir.COLLECTIVE_KINDS
                                       or op.kind in ("barrier_all", "sync_all", "team_barrier")):
                problems.append(_refuse(thread, rank, index, op))
            for member in (op.ops if op.kind == "group" else (op,)):
                if member.kind == "send":
                    key = (member.comm, member.channel, rank, member.peer, "send")
                elif member.kind == "recv":
                    key = (member.comm, member.channel, member.peer, rank, "recv")
                else:
                    continue
                found = users.setdefault(key, [])
                if not any(a == actor for a, _, _ in found):
                    found.append((actor, member, index))
    if problems:
        return identity(sched), problems
    for (comm, channel, src, dst, side), found in users.items():
        if len(found) > 1:
            rank = src if side == "send" else dst
            refs = tuple(OpRef(rank=rank, index=index, kind=op.kind, loc=op.loc, text=describe(op),
                               thread=actors[a][1].name if actors[a][1] is not None else None)
                         for a, op, index in found[:2])
            on = comm + (f" channel {channel}" if channel else "")
            problems.append(Mismatch(
                kind="send_recv_mismatch", ranks=(src, dst), ops=refs,
                message=f"two threads of rank {rank} {'send to' if side == 'send' else 'receive from'} rank "
                        f"{dst if side == 'send' else src} on {on} ({refs[0].loc} and {refs[1].loc}): the order in "
                        "which they take the connection's messages is not fixed; give each thread its own channel"))
    if problems:
        return identity(sched), problems

    def partner(comm: str, channel: int, src: int, dst: int, side: str) -> int:
        """The actor on the other side of a connection (the rank itself when nobody uses it: the
        matcher then reports the unmatched op)."""
        found = users.get((comm, channel, src, dst, side))
        return found[0][0] if found else (dst if side == "recv" else src)

    def peers(op, rank: int):
        if op.kind == "send":
            return op.model_copy(update={"peer": partner(op.comm, op.channel, rank, op.peer, "recv")})
        if op.kind == "recv":
            return op.model_copy(update={"peer": partner(op.comm, op.channel, op.peer, rank, "send")})
        if op.kind == "group":
            return op.model_copy(update={"ops": tuple(peers(m, rank) for m in op.ops)})
        return op

    programs, home, names = [], [], []
    kinds: dict[tuple[int, str], str] = {}
    origin: dict[tuple[int, int], tuple[int, object]] = {}
    for actor, (rank, thread) in enumerate(actors):
        p = sched.programs[rank]
        if thread is None and p.threads:  # the rank's end: every thread has ended, every record is done
            refs = tuple(ir.SignalRef(signal=end_name, index=i) for i in range(len(p.threads)))
            refs += sync.records.get(rank, ())
            ops = (ir.WaitUntilAll(signals=refs, cmp="ge", value=1, loc=p.threads[-1].loc),)
        elif thread is None:
            ops = tuple(peers(op, rank) for op in p.ops)
        else:
            index = p.threads.index(thread)
            kinds[(rank, thread.name)] = thread.kind
            end = ir.SignalUpdate(pe=rank, signal=ir.SignalRef(signal=end_name, index=index), value=1, sig_op="set",
                                  loc=thread.loc)
            lowered = sync.lower(rank, thread, actor, origin) if sync.decls else thread.ops
            ops = (*(peers(op, rank) for op in lowered), end)
        programs.append(ir.Program(rank=actor, buffers=p.buffers, signals=signals, ops=ops))
        home.append(rank)
        names.append(thread.name if thread is not None else None)
    comms = tuple(c.model_copy(update={"color": c.color + (None,) * (len(actors) - world),
                                       "key": c.key + (0,) * (len(actors) - world)}) for c in sched.comms)
    flat = sched.model_copy(update={"world": len(actors), "programs": tuple(programs), "comms": comms})
    return Actors(sched=flat, home=tuple(home), thread=tuple(names), ranks=world, kinds=kinds, origin=origin,
                  renamed=sync.renamed), []


@dataclass
class _Sync:
    """The signal words of a schedule's events and thread barriers, and how each op lowers to them."""

    decls: tuple[ir.SignalDecl, ...] = ()
    event_word: dict[str, str] = field(default_factory=dict)
    barrier_word: dict[str, str] = field(default_factory=dict)
    records: dict[int, tuple[ir.SignalRef, ...]] = field(default_factory=dict)  # rank -> the words its records set
    renamed: dict[str, str] = field(default_factory=dict)

    def lower(self, rank: int, thread: ir.Thread, actor: int, origin: dict) -> tuple:
        """The thread's ops with every event and barrier replaced by its signal words (`origin`: each
        lowered op's place and op as written)."""
        out: list = []
        arrivals: dict[str, int] = {}
        for index, op in enumerate(thread.ops):
            if op.kind == "record_event":
                made = (ir.SignalUpdate(pe=rank, signal=ir.SignalRef(signal=self.event_word[op.event], index=op.record),
                                        value=1, sig_op="set", loc=op.loc),)
            elif op.kind == "wait_event":
                made = (ir.WaitUntil(signal=ir.SignalRef(signal=self.event_word[op.event], index=op.record), cmp="ge",
                                     value=1, loc=op.loc),)
            elif op.kind == "thread_barrier":
                k = arrivals[op.name] = arrivals.get(op.name, 0) + 1
                word = self.barrier_word[op.name]
                made = (ir.SignalUpdate(pe=rank, signal=ir.SignalRef(signal=word, index=op.threads.index(thread.name)),
                                        value=1, sig_op="add", loc=op.loc),
                        ir.WaitUntilAll(signals=tuple(ir.SignalRef(signal=word, index=i)
                                                      for i in range(len(op.threads))), cmp="ge", value=k, loc=op.loc))
            else:
                if len(out) != index:
                    origin[(actor, len(out))] = (index, None)
                out.append(op)
                continue
            for piece in made:
                origin[(actor, len(out))] = (index, op)
                self.renamed.setdefault(describe(piece), describe(op))
                out.append(piece)
        return tuple(out)


def _thread_sync(sched: ir.Schedule, used: set[str]) -> tuple[_Sync, list[Mismatch]]:
    """The words of the schedule's events and thread barriers, and what makes them ill-formed (records
    of an event not numbered 1, 2, ... in host order, a wait for a record never made, a barrier whose
    threads differ between its calls or do not include the caller)."""
    problems: list[Mismatch] = []
    events: dict[str, int] = {}
    barriers: dict[str, int] = {}
    records: dict[int, list[ir.SignalRef]] = {}
    seen: list[tuple[int, ir.Thread, int, object]] = []
    for p in sched.programs:
        names = {t.name for t in p.threads}
        made: dict[str, list[int]] = {}
        lists: dict[str, tuple[str, ...]] = {}
        for thread in p.threads:
            for index, op in enumerate(thread.ops):
                if op.kind == "record_event":
                    made.setdefault(op.event, []).append(op.record)
                elif op.kind == "thread_barrier":
                    first = lists.setdefault(op.name, op.threads)
                    why = None
                    if first != op.threads:
                        why = f"lists threads [{', '.join(op.threads)}], another call [{', '.join(first)}]"
                    elif len(set(op.threads)) != len(op.threads):
                        why = "lists a thread twice"
                    elif thread.name not in op.threads:
                        why = f"is called by thread {thread.name}, which it does not list"
                    elif not set(op.threads) <= names:
                        why = f"lists {sorted(set(op.threads) - names)[0]}, which is not a thread of the rank"
                    if why:
                        problems.append(_ill_formed(p.rank, thread, index, op, why, "list the same threads of the "
                                                    "rank in every call, the caller among them"))
                    barriers[op.name] = max(barriers.get(op.name, 0), len(op.threads))
                if op.kind in ("record_event", "wait_event"):
                    seen.append((p.rank, thread, index, op))
        for event, numbers in made.items():
            events[event] = max(events.get(event, 0), len(numbers))
            if sorted(numbers) != list(range(1, len(numbers) + 1)):
                problems.append(Mismatch(kind="collective_mismatch", ranks=(p.rank,), ops=(), message=(
                    f"rank {p.rank}: the records of event {event} are numbered {sorted(numbers)}; they count the "
                    f"records in host order, 1 to {len(numbers)}")))
        for rank_, thread, index, op in seen:
            if rank_ == p.rank and op.kind == "wait_event" and op.record > len(made.get(op.event, ())):
                problems.append(_ill_formed(p.rank, thread, index, op, f"waits for record {op.record}, but the rank "
                                            f"makes {len(made.get(op.event, ()))}", "wait for a record made before"))
        for event in made:
            events.setdefault(event, 0)
    for _rank, _thread, _index, op in seen:
        events.setdefault(op.event, 0)
    sync = _Sync()
    decls = []
    for prefix, found, table in (("cw_event_", events, sync.event_word), ("cw_barrier_", barriers, sync.barrier_word)):
        for number, name in enumerate(sorted(found)):
            word = f"{prefix}{number}"
            while word in used:
                word += "_"
            used.add(word)
            table[name] = word
            # an event's word 0 is never set: a wait with no record before it waits on it
            decls.append(ir.SignalDecl(name=word, count=found[name] + 1 if prefix == "cw_event_" else found[name],
                                       loc=sched.loc))
    sync.decls = tuple(decls)
    for p in sched.programs:
        for thread in p.threads:
            for op in thread.ops:
                if op.kind == "record_event":
                    records.setdefault(p.rank, []).append(ir.SignalRef(signal=sync.event_word[op.event],
                                                                       index=op.record))
    sync.records = {rank: tuple(refs) for rank, refs in records.items()}
    return sync, problems


def _ill_formed(rank: int, thread: ir.Thread, index: int, op, why: str, fix: str) -> Mismatch:
    ref = OpRef(rank=rank, index=index, kind=op.kind, loc=op.loc, text=describe(op), thread=thread.name)
    return Mismatch(kind="collective_mismatch", ranks=(rank,), ops=(ref,),
                    message=f"{op.loc}: rank {rank} {thread.kind} {thread.name}: {describe(op)} {why} ({fix})")
