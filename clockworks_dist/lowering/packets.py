"""Flag-in-data packets: put_signal + wait_until pairs of the NVSHMEM backend as LL packets.

A put_signal that sets a word on a peer, and the peer's wait for that value, cost a separate flag:
the sender's fence waits one NVLink round trip for its data stores' acknowledgement before the
signal may go out. Packets carry the flag in the data instead (NCCL's LL format): every 16-byte
store to the peer holds 8 bytes of payload and the call's flag twice, once in each 8-byte half, and
an 8-byte half lands whole; the receiver polls its own copy until every packet shows the flag, so no
fence and no separate signal are needed.

What this changes, and how it is proven. `lower(sched)` rewrites the schedule into the one the
generated code runs, and that schedule is what the checker verifies, the expected values come from
and the code is generated from:

- put_signal(pe, D, src, w set v) becomes put_signal(pe, K, src, w set v), K the packet area: a
  symmetric buffer per signal word (role "packets"), twice D's bytes in memory (payload and flags), of
  which the model uses the first D.count elements (the payload). Its memory is not the model's values,
  so it is not compared; what it carried is, in D;
- each wait_until(w eq v) on the receiver is followed by copy(D <- K): the unpacking;
- unless D is a scratch region whose only use is one reduce that reads it whole: then no copy, and
  that reduce reads K's payload in D's place (`Lowered.reads`; `_consumed` says when). D is then
  never written (its values stay the initial ones, in the model as on the GPU), and the generated
  code reads each packet once, in the reduce, instead of unpacking it into D and reading D again.

The code then implements exactly these ops: the put_signal's packets are its data and its signal
in one (each packet lands with its flag, all of them before the last flag is seen); the wait is
"every packet of K shows the flag v", which holds from the moment the last packet lands until the
next put_signal to K overwrites one; the copy reads the payload. If the rewritten schedule lets a
later put_signal overwrite K before the copy of the earlier one has read it, the checker reports it
(a race on K, or a wait that can miss its value: a deadlock), so a verified schedule never does; and
whatever the user's ops read of D, they read from the copy, at the point the checker's values say.

A word is lowered only when every update of it is such a put_signal from one sender to one region
(set, value 1 to 2**32 - 1, all values different, so a flag left by an earlier call or by the zeroed
area never matches), its only readers are the owner's wait_until ... eq of those values, the region
is at most `max_bytes` and 8-byte aligned, and the sender is another rank (reached by stores over
NVLink: `nvshmem_ptr`; the program stops with an error at setup where it is not), and the
receiver reads nothing after the wait that another rank writes, other than through the unpacking
copy (polling packets is no acquire of other published data: `lower`). Every other put_signal keeps
the separate flag, and `Lowered.refused` says why.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from .. import ir
from ..semantics.rules import signal_effect

DEFAULT_MAX_BYTES = 64 << 10  # payload per put_signal; every block of the receiver polls all of its packets
FLAG_MAX = (1 << 32) - 1  # the flag is the set value, in 32 bits


@dataclass(frozen=True)
class Channel:
    """One lowered signal word: `sender` puts packets of `region` (on `receiver`) into `area`."""

    receiver: int
    sender: int
    signal: str
    index: int
    region: ir.Region  # D on the receiver: what the unpacking copy writes
    area: str  # the packet area's buffer name (symmetric scratch, 2 x the payload's elements)
    nbytes: int  # payload bytes


@dataclass
class Lowered:
    """The rewritten schedule and where its packet ops are: (rank, op index) -> channel."""

    sched: ir.Schedule
    channels: list[Channel] = field(default_factory=list)
    sends: dict[tuple[int, int], Channel] = field(default_factory=dict)
    waits: dict[tuple[int, int], Channel] = field(default_factory=dict)
    unpacks: dict[tuple[int, int], Channel] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)
    moved: dict[int, list[int]] = field(default_factory=dict)  # rank -> the new index of each old op
    # (rank, reduce's index) -> ((source position, index of the wait that polls that area), ...): the
    # reduces that read packet payloads in place of an unpacking copy's destination (`_consumed`)
    reads: dict[tuple[int, int], tuple[tuple[int, int], ...]] = field(default_factory=dict)

    def remap(self, starts: dict[int, list[int]]) -> dict[int, list[int]]:
        """Op indices of the schedule before the rewrite (`repeat.call_starts`) in the rewritten one
        (a copy out of the packets follows its wait, so the ops after it move)."""
        return {rank: [self.moved[rank][m] if rank in self.moved else m for m in ms] for rank, ms in starts.items()}

    def area_bytes(self, name: str) -> int:
        """Bytes of packet area `name` in memory (16 per 8 bytes of payload)."""
        return 2 * max(c.nbytes for c in self.channels if c.area == name)


def _affine(a: ir.Affine | None, scale: int = 1, minus: ir.Affine | None = None) -> ir.Affine | None:
    """scale * (a - minus) as an `ir.Affine` (None when `a` is: the size is not symbolic)."""
    if a is None:
        return None
    terms: dict[str, int] = {}
    for name, coeff in a.terms:
        terms[name] = terms.get(name, 0) + scale * coeff
    for name, coeff in (minus.terms if minus is not None else ()):
        terms[name] = terms.get(name, 0) - scale * coeff
    const = scale * (a.const - (minus.const if minus is not None else 0))
    exact = a.exact and (minus is None or minus.exact)
    return ir.Affine(const=const, terms=tuple((n, c) for n, c in sorted(terms.items()) if c), exact=exact)


def _payload(area: str, dst: ir.Region) -> ir.Region:
    """[0, dst.count) of the packet area, as symbolic as `dst`'s size is."""
    stop = _affine(dst.stop_sym, 1, dst.start_sym)
    return ir.Region(buffer=area, start=0, stop=dst.count, start_sym=ir.Affine(const=0) if stop else None,
                     stop_sym=stop)


def _itemsize(sched: ir.Schedule, rank: int, region: ir.Region) -> int:
    return ir.DTYPE_BYTES[sched.programs[rank].buffer(region.buffer).dtype]


def _problem(sched: ir.Schedule, rank: int, op: ir.PutSignal, max_bytes: int) -> str | None:
    """Why this put_signal cannot send packets (None: it can)."""
    size = _itemsize(sched, rank, op.src)
    nbytes = op.src.count * size
    if op.pe == rank:
        return "it puts to its own rank"
    if op.sig_op != "set":
        return f"its signal is an {op.sig_op}, not a set"
    if not 1 <= op.value <= FLAG_MAX:
        return f"its value {op.value} does not fit a 32-bit flag other than 0"
    if nbytes == 0 or nbytes % 8 or (op.src.start * size) % 8 or (op.dst.start * _itemsize(sched, op.pe, op.dst)) % 8:
        return "its data is not a whole number of 8-byte packets at 8-byte aligned offsets"
    if nbytes > max_bytes:
        return f"its {nbytes} bytes are more than the packet limit of {max_bytes}"
    if not sched.programs[op.pe].buffer(op.dst.buffer).symmetric:
        return "its destination is not symmetric"
    return None


def lower(sched: ir.Schedule, max_bytes: int = DEFAULT_MAX_BYTES) -> Lowered:
    """The schedule with every eligible put_signal + wait_until pair as packets (module docstring).

    One more condition, on the rewritten schedule: after its wait, the receiver reads nothing that
    another rank writes (other than the packets themselves, which the unpacking copy reads with
    volatile loads). A wait that polls packets is no acquire: data the sender published before its
    packets (a put and a fence, say) could be read stale from the receiver's L1 cache, so a word whose
    receiver reads such data keeps its signal. Dropping one word can change what another's receiver
    reads, so this repeats until nothing more is dropped."""
    dropped: dict[tuple[int, str, int], str] = {}
    while True:
        out = _lower(sched, max_bytes, dropped)
        found = _reads_published(out)
        if not found:
            out.refused.extend(f"signal word {name}[{index}] of rank {owner}: {why}"
                               for (owner, name, index), why in dropped.items())
            return out
        dropped.update(found)


def _reads_published(out: Lowered) -> dict[tuple[int, str, int], str]:
    """The lowered words whose receiver, after the word's first wait, reads memory another rank writes
    (the packet areas aside): why, by word."""
    from ..semantics.rules import SIG, When
    from .nvshmem_plan import _touches, touch_index

    sched = out.sched
    index = touch_index(sched)
    areas = {c.area for c in out.channels}
    found: dict[tuple[int, str, int], str] = {}
    seen: set[tuple[int, str, int]] = set()
    for (rank, m), channel in sorted(out.waits.items()):  # by rank, then op: each word's first wait first
        word = (channel.receiver, channel.signal, channel.index)
        if word in seen:
            continue
        seen.add(word)
        later = [member for op in sched.programs[rank].ops[m + 1:]
                 for member in (op.ops if isinstance(op, ir.Group) else (op,))]
        for member in later:
            hit = next((t for t in _touches(member, rank, (When.ISSUE, When.DELIVERY, When.JOINT))
                        if not t.write and t.space != SIG and t.key not in areas
                        and any(other != rank and u.write and t.conflicts(u)
                                for u, other in index.get((t.space, t.owner, t.key), ()))), None)
            if hit is not None:
                found[word] = (f"{member.loc}: after the wait it reads {hit.key}[{hit.start}:{hit.stop}], which "
                               "another rank writes (polled packets are no acquire of other data)")
                break
    return found


def _lower(sched: ir.Schedule, max_bytes: int, dropped: dict) -> Lowered:
    """`lower` without its last condition; the words in `dropped` keep their signal."""
    updates: dict[tuple[int, str, int], list[tuple[int, int, object]]] = defaultdict(list)
    readers: dict[tuple[int, str, int], list[tuple[int, int, object]]] = defaultdict(list)
    for program in sched.programs:
        for m, op in enumerate(program.ops):
            for member in (op.ops if isinstance(op, ir.Group) else (op,)):
                effect = signal_effect(member)
                if effect is not None:
                    word = (member.pe, effect[0].signal, effect[0].index)
                    (readers if effect[1] == "read" else updates)[word].append((program.rank, m, member))
                    if member.kind == "fetch_atomic":
                        readers[word].append((program.rank, m, member))
                if isinstance(member, ir.WaitUntil):
                    readers[(program.rank, member.signal.signal, member.signal.index)].append((program.rank, m, member))
                elif isinstance(member, (ir.WaitUntilAll, ir.WaitUntilAny)):
                    for ref in member.signals:
                        readers[(program.rank, ref.signal, ref.index)].append((program.rank, m, member))
    out = Lowered(sched)
    chosen: dict[tuple[int, str, int], tuple[list, list]] = {}
    for word in sorted(updates):
        owner, name, index = word
        where = f"signal word {name}[{index}] of rank {owner}"
        ups = updates[word]
        why = None
        for rank, _m, op in ups:
            if not isinstance(op, ir.PutSignal):
                why = f"{op.loc}: {op.kind} updates it"
            else:
                why = _problem(sched, rank, op, max_bytes)
                why = None if why is None else f"{op.loc}: {why}"
            if why:
                break
        if why is None and len({rank for rank, _m, _op in ups}) > 1:
            why = "more than one rank puts to it"
        if why is None and len({op.dst for _r, _m, op in ups}) > 1:
            why = "its put_signals write different regions"
        values = [op.value for _r, _m, op in ups]
        if why is None and len(set(values)) != len(values):
            why = "two of its put_signals set the same value (a flag would not tell them apart)"
        waits = readers.get(word, [])
        if why is None:
            for _rank, _m, op in waits:
                if not (isinstance(op, ir.WaitUntil) and op.cmp == "eq" and op.value in values):
                    why = f"{op.loc}: {op.kind} reads it (only wait_until eq one of the set values can poll packets)"
                    break
        if why is None and not waits:
            why = "nobody waits for it"
        if why is None and word in dropped:
            continue  # refused by `lower`, which says why
        if why is not None:
            out.refused.append(f"{where}: {why}")
            continue
        chosen[word] = (ups, waits)
    if not chosen:
        return out
    taken = {d.name for p in sched.programs for d in (*p.buffers, *p.signals)}
    areas: dict[tuple[str, int], tuple[str, int, str]] = {}  # (signal, index) -> (area name, elements, dtype)
    area_sym: dict[str, ir.Affine | None] = {}
    for (owner, name, index), (ups, _waits) in chosen.items():
        dst = ups[0][2].dst
        decl = sched.programs[owner].buffer(dst.buffer)
        key = (name, index)
        if key not in areas:
            area = f"packets_{name}_{index}"
            while area in taken:
                area += "_"
            taken.add(area)
            areas[key] = (area, 0, decl.dtype)
        area, count, dtype = areas[key]
        if dtype != decl.dtype:  # one area per (signal, index) on every rank: one dtype
            out.refused.append(f"signal word {name}[{index}] of rank {owner}: its regions differ in dtype between "
                               "ranks")
            continue
        if 2 * dst.count > count:
            areas[key] = (area, 2 * dst.count, dtype)
            payload = _payload(area, dst)
            area_sym[area] = _affine(payload.stop_sym, 2)
    ops = [list(p.ops) for p in sched.programs]
    inserts: dict[int, dict[int, ir.Copy]] = defaultdict(dict)
    for (owner, name, index), (ups, waits) in chosen.items():
        area, _count, dtype = areas[(name, index)]
        dst = ups[0][2].dst
        if sched.programs[owner].buffer(dst.buffer).dtype != dtype:
            continue
        payload = _payload(area, dst)
        channel = Channel(owner, ups[0][0], name, index, dst, area, dst.count * ir.DTYPE_BYTES[dtype])
        out.channels.append(channel)
        for rank, m, op in ups:
            ops[rank][m] = op.model_copy(update={"dst": payload})
            out.sends[(rank, m)] = channel
        for rank, m, op in waits:
            inserts[rank][m] = ir.Copy(loc=op.loc, dst=dst, src=payload)
    redirected = {(rank, m) for rank, m in out.sends}
    dropped_copies, consumers = _consumed(sched, inserts, redirected)
    programs, sends = [], {}
    for program in sched.programs:
        new_ops: list = []
        out.moved[program.rank] = []
        wait_at: dict[int, int] = {}  # old index of a wait whose copy is dropped -> its new index
        for m, op in enumerate(ops[program.rank]):
            new_index = len(new_ops)
            out.moved[program.rank].append(new_index)
            reads = consumers.get((program.rank, m))
            if reads is not None:  # a reduce reading the payloads in place of the copies' destinations
                srcs = list(op.srcs)
                for position, wait_m in reads:
                    srcs[position] = inserts[program.rank][wait_m].src
                op = op.model_copy(update={"srcs": tuple(srcs)})
                out.reads[(program.rank, new_index)] = tuple((position, wait_at[wait_m]) for position, wait_m in reads)
            new_ops.append(op)
            if (program.rank, m) in out.sends:
                sends[(program.rank, new_index)] = out.sends[(program.rank, m)]
            copy = inserts[program.rank].get(m)
            if copy is not None:
                channel = next(c for c in out.channels if c.receiver == program.rank and c.area == copy.src.buffer)
                out.waits[(program.rank, new_index)] = channel
                if (program.rank, m) in dropped_copies:
                    wait_at[m] = new_index
                    continue
                out.unpacks[(program.rank, new_index + 1)] = channel
                new_ops.append(copy)
        decls = [ir.BufferDecl(name=area, count=count, dtype=dtype, role="packets", symmetric=True,
                               count_sym=area_sym.get(area), loc=sched.loc)
                 for area, count, dtype in areas.values() if any(c.area == area for c in out.channels)]
        programs.append(program.model_copy(update={"ops": tuple(new_ops), "buffers": (*program.buffers, *decls)}))
    out.sends = sends
    out.sched = sched.model_copy(update={"programs": tuple(programs)})
    return out


MAX_REDUCE_SOURCES = 16  # cw_nv_pk_reduce holds a reduce's sources in registers, this many at most


def _consumed(sched: ir.Schedule, inserts: dict[int, dict[int, ir.Copy]], redirected: set[tuple[int, int]]
              ) -> tuple[set[tuple[int, int]], dict[tuple[int, int], tuple[tuple[int, int], ...]]]:
    """The unpacking copies that need not run, and the reduces that read the payload instead.

    `inserts[rank][m]`: the copy (D <- K's payload) to insert after rank's wait at m; `redirected`: the
    put_signals (rank, index) whose destination moves from D to a packet area. A copy is dropped when
    D's buffer, on its rank, is scratch and touched by nothing but (a) the put_signals being redirected
    (they no longer write it) and (b) one reduce per copy, after it in program order, reading exactly
    D as one of its sources with nothing touching the buffer in between, the next copy into it coming
    only after that reduce. Then, the copies gone, nothing reads or writes the buffer: it keeps its
    initial values, and each reduce reads from K exactly the values the copy would have put in D,
    the packet area being untouched in between (a put_signal into it before the reduce reads it is a
    race or a missed flag the checker reports on the rewritten schedule). The reduce's plain sources
    and destination must be 8-byte aligned with whole 8-byte units and its element at most 8 bytes
    (`cw_nv_pk_reduce` works a packet, 8 bytes, at a time). All or none of a buffer's copies go.

    Returns (the (rank, wait index) pairs whose copy is dropped, {(rank, reduce index): ((source
    position, wait index), ...)}), indices of the schedule before the copies are inserted."""
    from ..semantics.rules import When
    from .nvshmem_plan import _touches

    when = (When.ISSUE, When.DELIVERY, When.JOINT)
    dropped: set[tuple[int, int]] = set()
    consumers: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for rank, copies in inserts.items():
        program = sched.programs[rank]
        for name in sorted({copy.dst.buffer for copy in copies.values()}):
            decl = program.buffer(name)
            if decl.role != "scratch":
                continue
            found = _consumers_of(sched, rank, name, copies, redirected, when, _touches)
            if found is None:
                continue
            for wait_m, reduce_m, position in found:
                dropped.add((rank, wait_m))
                consumers.setdefault((rank, reduce_m), []).append((position, wait_m))
    return dropped, {key: tuple(sorted(reads)) for key, reads in consumers.items()}


def _consumers_of(sched, rank, name, copies, redirected, when, touches_of):
    """[(wait index, reduce index, source position)] for buffer `name` of `rank` (`_consumed`), or
    None where one of its copies must stay."""
    for program in sched.programs:
        for m, op in enumerate(program.ops):
            if (program.rank, m) in redirected:
                continue
            for member in (op.ops if isinstance(op, ir.Group) else (op,)):
                hit = [t for t in touches_of(member, program.rank, when) if t.space == 0 and t.owner == rank
                       and t.key == name]
                if hit and (program.rank != rank or isinstance(op, ir.Group)):
                    return None  # another rank (or a group) touches it
    found = []
    pending: dict[tuple[int, int], int] = {}  # (start, stop) of a copy not read yet -> its wait's index
    for m, op in enumerate(sched.programs[rank].ops):
        if (rank, m) not in redirected and not isinstance(op, ir.Group):
            hit = [t for t in touches_of(op, rank, when) if t.space == 0 and t.owner == rank and t.key == name]
            if hit:
                if not isinstance(op, ir.LocalReduce) or not _whole_units(sched, rank, op):
                    return None
                positions = [j for j, src in enumerate(op.srcs) if src.buffer == name]
                spans = [(op.srcs[j].start, op.srcs[j].stop) for j in positions]
                if any(t.write for t in hit) or len(set(spans)) != len(spans) or any(sp not in pending for sp in spans):
                    return None  # it writes the buffer, or reads what no copy (or the same copy twice) put there
                found += [(pending.pop(sp), m, j) for sp, j in zip(spans, positions)]
        copy = copies.get(m)
        if copy is not None and copy.dst.buffer == name:
            span = (copy.dst.start, copy.dst.stop)
            if any(a < span[1] and span[0] < b for a, b in pending):
                return None  # a copy over one nobody has read yet
            pending[span] = m
    return None if pending else found


def _whole_units(sched: ir.Schedule, rank: int, op: ir.LocalReduce) -> bool:
    """Every region of the reduce is 8-byte aligned, whole 8-byte units, of an element of at most 8 bytes,
    it has at most MAX_REDUCE_SOURCES sources and none overlaps the destination at another offset (which
    would need a staged copy first: `nvshmem_plan.staged`)."""
    from .nvshmem_plan import staged

    if len(op.srcs) > MAX_REDUCE_SOURCES or staged(op, rank) is not None:
        return False
    for region in (op.dst, *op.srcs):
        size = _itemsize(sched, rank, region)
        if size > 8 or (region.start * size) % 8 or (region.count * size) % 8:
            return False
    return True
