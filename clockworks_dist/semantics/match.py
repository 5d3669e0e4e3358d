"""Static matching: which recv each send meets, which ops form each collective.

NCCL matches point-to-point operations first-in-first-out per (communicator, sender, receiver) (and
per channel: `ir.Send.channel`), and
the k-th collective of every member of a communicator with each other, so both matchings are fixed
by the program text, independent of the interleaving. Collectives inside a group
(ncclGroupStart/End) count in posting order too: NCCL's group only defers the posting (the calls
return without blocking, and ncclGroupEnd posts them together), it does not reorder a communicator's
operations, so the k-th call on a communicator still meets the k-th call of every other member.
Collectives of different communicators in one group are posted together and wait for each other in
no order (NCCL's user guide, "Group Calls": managing several communicators from one thread, and
aggregating operations, inside one group). Mismatches are reported here, before any
search: sizes, dtypes, kinds, roots and reductions that differ, and ops that are never matched.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import ir
from .budget import UNBOUNDED, Deadline
from .rules import describe

Key = tuple[int, int, int | None]  # (rank, op index, group member index or None)


@dataclass(frozen=True)
class OpRef:
    """One op of the schedule: rank, index in the rank's program, member of a group (or None)."""

    rank: int
    index: int
    sub: int | None = None
    kind: str = ""
    loc: ir.SourceLoc | None = None
    text: str = ""
    thread: str | None = None  # the rank's thread that runs the op (`ir.Thread`), if it has threads

    def to_json(self) -> dict:
        out = {"rank": self.rank, "index": self.index, "sub": self.sub, "kind": self.kind,
               "file": self.loc.file if self.loc else None, "line": self.loc.line if self.loc else None,
               "op": self.text}
        if self.thread is not None:
            out["thread"] = self.thread
        return out

    @property
    def who(self) -> str:
        """"rank 1", or "rank 1 tb2" for an op of a thread."""
        return f"rank {self.rank}" + (f" {self.thread}" if self.thread is not None else "")

    def __str__(self) -> str:
        where = f"{self.loc} " if self.loc else ""
        return f"{where}{self.who}: {self.text or self.kind}"


@dataclass(frozen=True)
class Mismatch:
    """A static mismatch: ops that can never match (`kind` is the checker's violation kind,
    "send_recv_mismatch" or "collective_mismatch")."""

    kind: str
    message: str
    ranks: tuple[int, ...]
    ops: tuple[OpRef, ...]


def op_ref(sched: ir.Schedule, key: Key) -> OpRef:
    rank, index, sub = key
    op = sched.programs[rank].ops[index]
    if sub is not None:
        op = op.ops[sub]
    return OpRef(rank=rank, index=index, sub=sub, kind=op.kind, loc=op.loc, text=describe(op))


def members_of(op) -> list[tuple[int | None, object]]:
    return [(i, m) for i, m in enumerate(op.ops)] if op.kind == "group" else [(None, op)]


SHMEM_TEAM = "shmem_world"


@dataclass
class Matches:
    send_of: dict[Key, Key] = field(default_factory=dict)  # recv key -> send key
    recv_of: dict[Key, Key] = field(default_factory=dict)  # send key -> recv key
    # cid -> its members [(rank, index, sub)]: sub None for a collective of its own, else its member
    # index in the group at (rank, index) (`ir.Group`)
    collectives: list[list[Key]] = field(default_factory=list)
    cid_of: dict[Key, int] = field(default_factory=dict)
    sched: ir.Schedule | None = None

    def p2p_pairs(self):
        for send_key, recv_key in self.recv_of.items():
            yield self._op(send_key), self._op(recv_key)

    def collective_ops(self):
        for members in self.collectives:
            yield [(key[0], self._op(key)) for key in members]

    def fifo_gates(self) -> dict[Key, Key | None]:
        """For each send on a connection with slots (`ir.Send.slots`), the recv it waits for: the
        recv of the message `slots` before it on the connection (None for the first `slots`
        messages, which find the FIFO with room). Cached: the program text fixes it."""
        found = self.__dict__.get("_gates")
        if found is not None:
            return found
        sent: dict[tuple, list[Key]] = {}  # (comm, sender, receiver, channel) -> its sends in program order
        for prog in self.sched.programs:
            for index, op in enumerate(prog.ops):
                for sub, member in members_of(op):
                    if member.kind == "send" and member.slots:
                        sent.setdefault((member.comm, prog.rank, member.peer, member.channel), []).append(
                            (prog.rank, index, sub))
        found = {}
        for keys in sent.values():
            for k, skey in enumerate(keys):
                if skey in self.recv_of:
                    slots = self._op(skey).slots
                    found[skey] = self.recv_of.get(keys[k - slots]) if k >= slots else None
        self.__dict__["_gates"] = found
        return found

    def buffered(self, key: Key) -> bool:
        """Whether the send or recv at `key` is on a connection with slots."""
        return bool(self._op(key).slots)

    def _op(self, key: Key):
        rank, index, sub = key
        op = self.sched.programs[rank].ops[index]
        return op if sub is None else op.ops[sub]


def _dtype(sched: ir.Schedule, rank: int, region: ir.Region | None) -> str | None:
    if region is None:
        return None
    return sched.programs[rank].buffer(region.buffer).dtype


def match(sched: ir.Schedule, deadline: Deadline = UNBOUNDED) -> tuple[Matches, list[Mismatch]]:
    """Match sends with recvs and group collectives; report every mismatch."""
    out = Matches(sched=sched)
    problems: list[Mismatch] = []
    sends: dict[tuple[str, int, int, int], list[Key]] = {}
    recvs: dict[tuple[str, int, int, int], list[Key]] = {}
    colls: dict[tuple[str, tuple[int, ...]], dict[int, list[Key]]] = {}
    for prog in sched.programs:
        deadline.check("matching sends, receives and collectives")
        for index, op in enumerate(prog.ops):
            for sub, member in members_of(op):
                if member.kind == "send":
                    sends.setdefault((member.comm, prog.rank, member.peer, member.channel),
                                     []).append((prog.rank, index, sub))
                elif member.kind == "recv":
                    recvs.setdefault((member.comm, member.peer, prog.rank, member.channel),
                                     []).append((prog.rank, index, sub))
                elif sub is not None:  # a collective in a group: matched in posting order, as NCCL does
                    group = sched.members(member.comm, prog.rank)
                    colls.setdefault((member.comm, group), {}).setdefault(prog.rank, []).append((prog.rank, index, sub))
            if op.kind in ir.TEAM_KINDS and op.comm == "world":  # on NVSHMEM_TEAM_WORLD, as barrier_all
                colls.setdefault((SHMEM_TEAM, tuple(range(sched.world))), {}).setdefault(prog.rank, []).append(
                    (prog.rank, index, None))
            elif op.kind in ir.COLLECTIVE_KINDS or op.kind in ir.TEAM_KINDS:
                group = sched.members(op.comm, prog.rank)
                colls.setdefault((op.comm, group), {}).setdefault(prog.rank, []).append((prog.rank, index, None))
            elif op.kind in ("barrier_all", "sync_all"):
                group = tuple(range(sched.world))
                colls.setdefault((SHMEM_TEAM, group), {}).setdefault(prog.rank, []).append((prog.rank, index, None))
    _match_allocations(sched, problems)
    _match_p2p(sched, sends, recvs, out, problems)
    _match_collectives(sched, colls, out, problems)
    return out, problems


def _match_allocations(sched: ir.Schedule, problems: list[Mismatch]) -> None:
    """Symmetric allocation is collective (`nvshmem_malloc`: every PE allocates the same objects in
    the same order): the k-th symmetric buffer of every rank must be the same one. In another order,
    NVSHMEM hangs (sizes differ) or hands each name another PE's object (sizes equal)."""
    def order(program: ir.Program) -> list[ir.BufferDecl]:
        return [d for d in program.buffers if d.symmetric]

    first = order(sched.programs[0])
    for program in sched.programs[1:]:
        mine = order(program)
        for k, (a, b) in enumerate(zip(first, mine)):
            if a.name != b.name:
                refs = (OpRef(rank=0, index=k, kind="symmetric", loc=a.loc, text=f"symmetric {a.name}"),
                        OpRef(rank=program.rank, index=k, kind="symmetric", loc=b.loc, text=f"symmetric {b.name}"))
                problems.append(Mismatch(
                    kind="collective_mismatch", ranks=(0, program.rank), ops=refs,
                    message=f"symmetric allocation is collective, in one order on every PE (nvshmem_malloc): the "
                            f"{_nth(k)} symmetric buffer is {a.name} on rank 0 ({a.loc}) but {b.name} on rank "
                            f"{program.rank} ({b.loc}); NVSHMEM hangs there, or gives each name another PE's buffer "
                            "(declare the symmetric buffers in the same order on every rank)"))
                break


def _match_p2p(sched, sends, recvs, out: Matches, problems: list[Mismatch]) -> None:
    for channel in sorted(set(sends) | set(recvs)):
        comm, src, dst, number = channel
        on = f"{comm}" + (f" channel {number}" if number else "")
        ss, rr = sends.get(channel, []), recvs.get(channel, [])
        for k, (skey, rkey) in enumerate(zip(ss, rr)):
            send, recv = out._op(skey), out._op(rkey)
            why = None
            if send.src.count != recv.dst.count:
                why = (f"the {_nth(k)} send from rank {src} to rank {dst} has {send.src.count} elements but "
                       f"the matching recv expects {recv.dst.count}")
            elif _dtype(sched, src, send.src) != _dtype(sched, dst, recv.dst):
                why = (f"the {_nth(k)} send from rank {src} to rank {dst} is {_dtype(sched, src, send.src)} but "
                       f"the matching recv is {_dtype(sched, dst, recv.dst)}")
            elif send.slots != recv.slots:
                why = (f"the {_nth(k)} send from rank {src} to rank {dst} on {on} says the connection has "
                       f"{send.slots} slots but the matching recv says {recv.slots} (0: rendezvous); both ends of a "
                       "connection declare the same slots")
            if why:
                problems.append(Mismatch(
                    kind="send_recv_mismatch", message=why + " (sends and recvs match in order per peer pair)",
                    ranks=(src, dst), ops=(op_ref(sched, skey), op_ref(sched, rkey))))
            out.recv_of[skey] = rkey
            out.send_of[rkey] = skey
        for key in ss[len(rr):]:
            problems.append(Mismatch(
                kind="send_recv_mismatch", ranks=(src, dst), ops=(op_ref(sched, key),),
                message=f"rank {src} sends {len(ss)} message(s) to rank {dst} on {on}, but rank {dst} posts only "
                        f"{len(rr)} recv(s) from rank {src}: this send is never matched"))
        for key in rr[len(ss):]:
            problems.append(Mismatch(
                kind="send_recv_mismatch", ranks=(src, dst), ops=(op_ref(sched, key),),
                message=f"rank {dst} posts {len(rr)} recv(s) from rank {src} on {on}, but rank {src} sends only "
                        f"{len(ss)}: this recv is never matched"))


def _signature(sched: ir.Schedule, rank: int, op) -> dict:
    sig: dict = {"kind": op.kind}
    if op.kind in ("all_reduce", "reduce_scatter", "reduce_to"):
        sig["op"] = op.op
    if op.kind in ("broadcast", "reduce_to"):
        sig["root"] = op.root
    if op.kind == "team_split":
        sig.update(team=op.team, start=op.start, stride=op.stride, size=op.size)
    src = getattr(op, "src", None)
    if src is not None:
        sig["count"] = src.count
        sig["dtype"] = _dtype(sched, rank, src)
    return sig


_FIELDS = ("kind", "count", "dtype", "op", "root", "team", "start", "stride", "size")  # as `_signature` names them


def _match_collectives(sched, colls, out: Matches, problems: list[Mismatch]) -> None:
    for (comm, group), per_rank in colls.items():
        longest = max(len(v) for v in per_rank.values())
        for k in range(longest):
            present = [per_rank[rank][k] for rank in group if k < len(per_rank.get(rank, []))]
            missing = [rank for rank in group if k >= len(per_rank.get(rank, []))]
            refs = tuple(op_ref(sched, key) for key in present)
            if missing:
                first = refs[0]
                problems.append(Mismatch(
                    kind="collective_mismatch", ranks=tuple(missing) + tuple(key[0] for key in present), ops=refs,
                    message=f"the {_nth(k)} collective on {_team(comm, sched)} ({first.text}) is reached by rank(s) "
                            f"{_ranks([key[0] for key in present])} but never by rank(s) {_ranks(missing)}"))
                continue
            sigs = [_signature(sched, key[0], out._op(key)) for key in present]
            base = sigs[0]
            for (rank, _index, _sub), sig, ref in zip(present, sigs, refs):
                if sig != base:
                    field_name = next(f for f in _FIELDS if sig.get(f) != base.get(f))
                    problems.append(Mismatch(
                        kind="collective_mismatch", ranks=(present[0][0], rank), ops=(refs[0], ref),
                        message=f"the {_nth(k)} collective on {_team(comm, sched)} differs in {field_name}: rank "
                                f"{present[0][0]} calls {refs[0].text}, rank {rank} calls {ref.text} "
                                "(every member must call the same collectives in the same order"
                                f"{_grouped(refs[0], ref)})"))
                    break
            else:
                cid = len(out.collectives)
                out.collectives.append(present)
                for key in present:
                    out.cid_of[key] = cid


def _grouped(*refs: OpRef) -> str:
    """The reminder for collectives inside groups: NCCL counts them in posting order too."""
    if all(ref.sub is None for ref in refs):
        return ""
    return "; inside a group too, they match in the order each rank posts them"


def _team(comm: str, sched: ir.Schedule) -> str:
    if comm == SHMEM_TEAM:
        return "the NVSHMEM world team"
    if comm != "world" and sched.comm(comm).team is not None:
        return f"team {comm}"
    return f"communicator {comm}"


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks))


def _nth(k: int) -> str:
    n = k + 1
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
