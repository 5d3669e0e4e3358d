"""The runtime simulator: the checker's semantics, executed in time on a network model.

Ranks run their programs in order, exactly as in `semantics.machine`: sends and recvs meet first-in-
first-out (rendezvous), collectives start when every member has arrived, one-sided puts are
deliveries that land later (ordered only by fence and quiet), waits block until the simulated
signal word satisfies them. What the checker leaves abstract gets a cost:

- every transfer is a flow along its route, forwarded cut-through in packets (the last packet
  crosses each hop after the first whole); concurrent flows share each link max-min fairly
  (`flows`), recomputed at every flow start and finish; data over NVLink also loads the opposite
  direction with its acknowledgements; a flow may carry a ceiling (NCCL channels times the
  per-channel rate, NVSHMEM thread blocks times the per-block rate);
- NCCL calls run the algorithm, protocol and channels NCCL itself picks (`nccl_tuning`), timed
  by `nccl`; a send to itself (an all-to-all's own chunk) is a copy in HBM;
- local ops are flows over the GPU's HBM, so they slow down when other traffic uses it;
- fixed costs: kernel launch, NCCL protocol base and step latencies, NVSHMEM put and signal
  latency, barrier latency; in eager mode the host issues launches one after another and a kernel
  cannot start before it is issued.

The result has every op's start and end on every rank, the critical path (each op remembers what it
waited for last), per-link bytes, and the total time.
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass, field

from .. import ir
from ..semantics.match import match
from ..semantics.arithmetic import atomic_result, compare, fetch_result
from ..errors import ClockworksError
from . import nccl
from .costs import COSTS, RunConditions, fixed_us, host_cost, launch_us
from .flows import Flow, max_min_rates
from .network import Network

GB = 1e3  # bytes per microsecond in one GB/s
# Defence in depth (topology files are validated so that no valid file gets here): past this much
# simulated time, float microseconds lose sub-microsecond resolution and the result means nothing;
# and a run that handles far more events than its ops can cause is not advancing.
MAX_SIMULATED_US = 1e13  # about 116 days
EVENTS_PER_OP_AND_RANK = 100


class PredictError(ClockworksError):
    """The schedule cannot be simulated (it does not match statically, or it deadlocks)."""


@dataclass
class OpRecord:
    """One op (or group member) as executed: when it started and ended, and what it waited for."""

    rank: int
    index: int
    sub: int | None
    kind: str
    text: str
    loc: ir.SourceLoc
    start: float = 0.0
    end: float = 0.0
    cause: "OpRecord | None" = None
    cause_kind: str = "program order"
    detail: dict = field(default_factory=dict)


@dataclass
class Timeline:
    total_us: float
    records: list[OpRecord]
    link_bytes: dict[int, float]
    network: Network
    critical: list[OpRecord]
    plans: list[tuple[OpRecord, nccl.Plan]]


class Simulator:
    def __init__(self, sched: ir.Schedule, network: Network, consts, mode: str = "graph", host_clock: bool = True,
                 conditions: RunConditions = RunConditions()):
        matches, problems = match(sched)
        if problems:
            first = problems[0]
            where = first.ops[0].loc if first.ops and first.ops[0].loc else sched.loc
            raise PredictError(f"{where}: the schedule does not match: {first.message} (run `clockworks check`)")
        self.sched, self.net, self.c, self.mode = sched, network, consts, mode
        self.conditions = conditions
        self.matches = matches
        self.world = sched.world
        self.now = 0.0
        self.queue: list = []
        self.seq = itertools.count()
        self.flows: list[Flow] = []
        self.flow_ids = itertools.count()
        self.flow_done: dict[int, object] = {}
        self.flow_end: dict[int, float] = {}  # when each flow finishes at its current rate
        self.flow_version = 0
        self.last_update = 0.0
        self.link_bytes: dict[int, float] = {}
        self.pc = [0] * self.world
        self.free_at = [0.0] * self.world  # when the rank's stream is free
        self.last = [None] * self.world  # the record the rank's next op follows
        self.records: list[OpRecord] = []
        self.posted: dict[tuple, OpRecord] = {}
        self.group_left: dict[int, int] = {}
        self.arrived: dict[int, dict[int, OpRecord]] = {}
        self.sig_offset, count = {}, 0
        for decl in sched.programs[0].signals:
            self.sig_offset[decl.name] = count
            count += decl.count
        self.signals = [[0] * count for _ in range(self.world)]
        self.sig_writer: dict[tuple[int, int], OpRecord] = {}
        self.waiting: dict[tuple[int, int], int] = {}  # (rank, word) -> waiting rank
        self.outstanding = [0] * self.world
        self.pending: dict[tuple[int, int], list] = {}  # (issuer, pe) -> [(epoch, start fn)] held by fences
        self.in_flight_epochs: dict[tuple[int, int], list[int]] = {}
        self.quiet_waiter: dict[int, OpRecord] = {}
        self.last_delivery: dict[int, OpRecord] = {}
        self.plans: list[tuple[OpRecord, nccl.Plan]] = []
        self.views: dict[tuple[int, ...], nccl.View] = {}
        self.fences = [[sum(1 for o in p.ops[:i] if o.kind == "fence") for i in range(len(p.ops))]
                       for p in sched.programs]
        # Eager mode: the host issues the launches one after another (`costs.host_cost`); a kernel
        # cannot start before the host has issued it (it can start later, when the GPU is busy).
        self.host_ready = [[0.0] * len(p.ops) for p in sched.programs]
        if mode == "eager" and host_clock:
            for rank, prog in enumerate(sched.programs):
                issued = 0.0
                for i, op in enumerate(prog.ops):
                    issued += host_cost(op, consts)
                    self.host_ready[rank][i] = issued

    # -- events and flows ---------------------------------------------------------------------
    def at(self, time: float, fn) -> None:
        heapq.heappush(self.queue, (time, next(self.seq), fn))

    def _advance_flows(self) -> None:
        dt = self.now - self.last_update
        if dt > 0:
            for f in self.flows:
                moved = min(f.remaining, f.rate * dt)
                f.remaining -= moved
                for r, w in f.loads():
                    if w == 1.0:  # data bytes (acknowledgement load is not counted as bytes moved)
                        self.link_bytes[r] = self.link_bytes.get(r, 0.0) + moved
        self.last_update = self.now

    def _reschedule(self) -> None:
        max_min_rates(self.flows, self.net.capacity)
        self.flow_version += 1
        version = self.flow_version
        soonest = None
        for f in self.flows:
            if f.rate > 0:
                t = self.now + f.remaining / f.rate
                self.flow_end[f.fid] = t
                soonest = t if soonest is None else min(soonest, t)
        if soonest is not None:
            self.at(soonest, lambda v=version: self._flows_tick(v))

    def _flows_tick(self, version: int) -> None:
        if version != self.flow_version:
            return
        self._advance_flows()
        # A flow whose end has come is done even if rounding left a few bytes (at a large `now`,
        # now + remaining / rate == now, and waiting for them would never advance time).
        done = [f for f in self.flows
                if f.remaining <= 1e-6 * max(1.0, f.rate) or self.flow_end.get(f.fid, math.inf) <= self.now]
        self.flows = [f for f in self.flows if f not in done]
        self._reschedule()
        for f in done:
            self.flow_end.pop(f.fid, None)
            self.flow_done.pop(f.fid)()

    def start_flow(self, resources: tuple[int, ...], nbytes: float, ceiling_GBs: float | None, then) -> None:
        """Move `nbytes` over `resources`; call `then()` when the last byte has left."""
        if nbytes <= 0 or not resources:
            self.at(self.now, then)
            return
        self._advance_flows()
        fid = next(self.flow_ids)
        weights = None
        share = self.c.nvlink_reverse_share
        if share > 0:  # acknowledgements on the opposite direction of each NVLink crossed
            back = [self.net.reverse[r][0] for r in resources
                    if r in self.net.reverse and self.net.reverse[r][1] == "nvlink"]
            if back:
                resources, weights = resources + tuple(back), (1.0,) * len(resources) + (share,) * len(back)
        self.flows.append(Flow(fid=fid, resources=resources, remaining=nbytes, weights=weights,
                               ceiling=None if ceiling_GBs is None else ceiling_GBs * GB))
        self.flow_done[fid] = then
        self._reschedule()

    def transfer(self, src: int, dst: int, nbytes: float, ceiling_GBs: float | None, latency_us: float, then,
                 record: OpRecord | None = None) -> None:
        """A flow from rank src to rank dst, then the route's latency, paid once, and the time the
        last slice takes to cross the hops after the first (slices forwarded cut-through).
        `record` notes how long the bytes themselves took (`flow_us`), apart from fixed costs."""
        resources, route_latency = self.net.route(src, dst)
        route_latency += self.net.fill_us(src, dst, nbytes)
        began = self.now

        def flowed():
            if record is not None:
                record.detail["flow_us"] = self.now - began
            self.at(self.now + route_latency + latency_us, then)
        self.start_flow(resources, nbytes, ceiling_GBs, flowed)

    def run(self) -> Timeline:
        for rank in range(self.world):
            self.at(0.0, lambda r=rank: self.advance(r))
        budget = 1_000_000 + EVENTS_PER_OP_AND_RANK * sum(len(p.ops) for p in self.sched.programs) * self.world
        events = 0
        while self.queue:
            time, _, fn = heapq.heappop(self.queue)
            if not time <= MAX_SIMULATED_US:  # also catches nan
                raise PredictError(f"simulated time passed {MAX_SIMULATED_US:.0e} us (about 116 days) at "
                                   f"{self._progress()}: a rate or latency of the topology is out of any real "
                                   "range (check its links' GBs_per_dir and latency_us and its constants)")
            self.now = max(self.now, time)
            fn()
            events += 1
            if events > budget:
                raise PredictError(f"the simulation handled {budget:,} events without finishing ({self._progress()}, "
                                   f"{self.now:.6g} us simulated): time has stopped advancing; with a realistic "
                                   "topology this is a bug in clockworks, please report it")
        if self.flows:
            names = sorted({self.net.names[r] for f in self.flows for r in f.resources
                            if not self.net.capacity[r] > 0} or {"their ceilings"})
            raise PredictError(f"{len(self.flows)} transfer(s) never finish: their rate is 0 on {', '.join(names)} "
                               "(a bandwidth or rate of the topology is 0)")
        stuck = [r for r in range(self.world) if self.pc[r] < len(self.sched.programs[r].ops)]
        if stuck:
            rank = stuck[0]
            op = self.sched.programs[rank].ops[self.pc[rank]]
            raise PredictError(f"{op.loc}: the schedule deadlocks: rank(s) {', '.join(map(str, stuck))} never finish "
                               f"(rank {rank} blocks in {ir.describe(op)}; run `clockworks check` for the "
                               "counterexample)")
        total = max([r.end for r in self.records], default=0.0)
        return Timeline(total_us=total, records=self.records, link_bytes=self.link_bytes, network=self.net,
                        critical=self._critical_path(), plans=self.plans)

    def _progress(self) -> str:
        done = sum(self.pc)
        total = sum(len(p.ops) for p in self.sched.programs)
        return f"{done} of {total} ops done"

    # -- ranks --------------------------------------------------------------------------------
    def _record(self, rank: int, index: int, sub, op, start: float, cause=None, cause_kind="program order") -> OpRecord:
        rec = OpRecord(rank=rank, index=index, sub=sub, kind=op.kind, text=ir.describe(op), loc=op.loc,
                       start=start, cause=cause if cause is not None else self.last[rank], cause_kind=cause_kind)
        self.records.append(rec)
        return rec

    def _launch(self) -> float:
        """GPU-side cost of starting a kernel (the host's issue cost is the host clock's)."""
        return launch_us(self.c, self.mode)

    def finish(self, rank: int, rec: OpRecord, end: float | None = None) -> None:
        rec.end = self.now if end is None else end
        self.last[rank] = rec
        self.pc[rank] += 1
        self.free_at[rank] = rec.end
        self.at(rec.end, lambda: self.advance(rank))

    def advance(self, rank: int) -> None:
        prog = self.sched.programs[rank]
        pc = self.pc[rank]
        if pc >= len(prog.ops) or self.now < self.free_at[rank] - 1e-9:
            return
        if (rank, pc) in self.posted:  # already posted, waiting for partners
            return
        if self.now < self.host_ready[rank][pc] - 1e-9:  # the host has not issued it yet
            self.at(self.host_ready[rank][pc], lambda: self.advance(rank))
            return
        op = prog.ops[pc]
        k = op.kind
        start = max(self.now, self.free_at[rank])
        rule = COSTS[k]
        if rule.timing == "local":
            rec = self._record(rank, pc, None, op, start)
            self.posted[(rank, pc)] = rec
            nbytes = rule.nbytes(op, lambda region: self._bytes(rank, region))
            launch = self._launch() + fixed_us(self.c, rule.issue)

            def done(rec=rec):
                self.posted.pop((rank, pc), None)
                self.finish(rank, rec)
            self.at(start + launch, lambda: self.start_flow((self.net.hbm(rank),), nbytes, None, done))
        elif k in ("send", "recv", "group"):
            members = op.ops if k == "group" else (op,)
            self.group_left[rank] = len(members)
            head = self._record(rank, pc, None, op, start)
            self.posted[(rank, pc)] = head
            for sub, member in enumerate(members):
                key = (rank, pc, sub if k == "group" else None)
                self.posted[key] = head
                self._try_p2p(key, member)
        elif rule.timing in ("collective", "barrier"):
            rec = self._record(rank, pc, None, op, start)
            self.posted[(rank, pc)] = rec
            if k == "barrier_all" and self.outstanding[rank]:
                self.quiet_waiter[rank] = rec
                return
            self._arrive(rank, pc, rec)
        elif rule.timing == "delivery":
            rec = self._record(rank, pc, None, op, start)
            issue = start + fixed_us(self.c, rule.issue)
            self.outstanding[rank] += 1
            self.at(issue, lambda: self._issue_delivery(rank, pc, op, rec))
            self.finish(rank, rec, issue)
        elif rule.timing == "get":
            rec = self._record(rank, pc, None, op, start)
            nbytes = rule.nbytes(op, lambda region: self._bytes(rank, region))
            self.at(start + fixed_us(self.c, rule.issue), lambda: self.transfer(
                op.pe, rank, nbytes, self._block_ceiling(), fixed_us(self.c, rule.latency),
                lambda: self.finish(rank, rec)))
        elif k == "fetch_atomic":
            rec = self._record(rank, pc, None, op, start)
            if isinstance(op.target, ir.SignalRef):
                word = self.sig_offset[op.target.signal] + op.target.index
                old = self.signals[op.pe][word]
                self.signals[op.pe][word] = fetch_result(op.op, old, op.value, op.cond)
                self._wake(op.pe, word, rec)
            self.at(start + fixed_us(self.c, rule.latency), lambda: self.finish(rank, rec))
        elif k == "wait_until":
            word = self.sig_offset[op.signal.signal] + op.signal.index
            if compare(op.cmp, self.signals[rank][word], op.value):
                writer = self.sig_writer.get((rank, word))
                rec = self._record(rank, pc, None, op, start)
                if writer is not None and writer.end >= (self.last[rank].end if self.last[rank] else 0.0):
                    rec.cause, rec.cause_kind = writer, "signal"
                self.finish(rank, rec, start)
            else:
                self.waiting[(rank, word)] = rank
        elif k == "quiet":
            rec = self._record(rank, pc, None, op, start)
            if self.outstanding[rank]:
                self.quiet_waiter[rank] = rec
            else:
                self.finish(rank, rec, start)
        else:  # fence: orders deliveries, costs nothing here
            rec = self._record(rank, pc, None, op, start)
            self.finish(rank, rec, start)

    # -- two-sided ----------------------------------------------------------------------------
    def _try_p2p(self, key: tuple, member) -> None:
        skey = key if member.kind == "send" else self.matches.send_of.get(key)
        rkey = self.matches.recv_of.get(skey) if skey else None
        if skey is None or rkey is None or skey not in self.posted or rkey not in self.posted:
            return
        send_head, recv_head = self.posted[skey], self.posted[rkey]
        send = self.matches._op(skey)
        nbytes = self._bytes(skey[0], send.src)
        start = self.now
        # the transfer starts when the later side posts: it waited for what that side waited for
        later = recv_head if recv_head.start >= send_head.start else send_head
        rec = OpRecord(rank=skey[0], index=skey[1], sub=skey[2], kind="send", text=ir.describe(send), loc=send.loc,
                       start=start, cause=later.cause,
                       cause_kind=f"rank {later.rank} posted its {'recv' if later is recv_head else 'send'}")
        self.records.append(rec)
        # a group that exchanges with every other rank is NCCL's all-to-all pattern
        group = self.sched.programs[skey[0]].ops[skey[1]]
        exchange = group.kind == "group" and len({m.peer for m in group.ops} - {skey[0]}) >= self.world - 1 > 0
        own = skey[0] == rkey[0]  # a send to itself: a copy inside the kernel
        proto, ch, ceiling = nccl.p2p_choice(self.c, nbytes, self.net.bottleneck(skey[0], rkey[0]),
                                             "all_to_all" if exchange else "p2p",
                                             self._view(tuple(range(self.world))), self.world, own,
                                             cap=self.conditions.channel_cap)
        fixed = self._launch() + nccl.p2p_fixed_us(self.c, proto, "all_to_all" if exchange else "p2p", own)
        if not own:
            fixed += nccl.p2p_staging_us(self.c, proto, nbytes, ch, self.net.transport(skey[0], rkey[0]))
        rec.detail.update(protocol=proto, channels=ch)

        def done():
            rec.end = self.now
            for k in (skey, rkey):
                self.posted.pop(k, None)
                self._member_done(k, rec)
        wire = 2 * nbytes if own else nbytes / nccl.EFFICIENCY[proto]  # a copy reads and writes HBM
        if own:  # the send's channels copy at their own rate
            ceiling = ch * self.c.nccl_copy_channel_GBs
        self.transfer(skey[0], rkey[0], wire, ceiling, fixed, done, record=rec)

    def _member_done(self, key: tuple, rec: OpRecord) -> None:
        rank, index, _ = key
        self.group_left[rank] -= 1
        if self.group_left[rank] == 0:
            head = self.posted.pop((rank, index))
            if rec.end >= head.start:
                head.cause, head.cause_kind = rec, "transfer"
            self.finish(rank, head)

    # -- collectives --------------------------------------------------------------------------
    def _arrive(self, rank: int, index: int, rec: OpRecord) -> None:
        cid = self.matches.cid_of.get((rank, index))
        arrived = self.arrived.setdefault(cid, {})
        arrived[rank] = rec
        members = self.matches.collectives[cid]
        if len(arrived) < len(members):
            return
        last = max(arrived.values(), key=lambda r: r.start)
        for r in arrived.values():
            if r is not last:
                r.cause, r.cause_kind = last, "collective: last member to arrive"
        op = self.sched.programs[members[0][0]].ops[members[0][1]]
        ranks = [r for r, _ in members]
        rule = COSTS[op.kind]
        if rule.timing == "barrier":  # a dissemination barrier: one round per doubling
            end = self.now + self._launch() + fixed_us(self.c, rule.issue) * max(1, (len(ranks) - 1).bit_length())
            for r, i in members:
                self.posted.pop((r, i), None)
                self.finish(r, arrived[r], end)
            return
        nbytes = rule.nbytes(op, lambda region: self._bytes(members[0][0], region))
        link = min(self.net.bottleneck(a, b) for a in ranks for b in ranks if a != b) if len(ranks) > 1 else 1e9
        transports = {self.net.transport(a, b) for a in ranks for b in ranks if a != b}
        worst = next((t for t in ("net", "pcie", "nvlink") if t in transports), "nvlink")
        p = nccl.plan(op.kind, len(ranks), nbytes, self.c, link, self._view(tuple(ranks)), worst,
                      self.conditions.channel_cap)
        self.plans.append((last, p))
        left = [len(p.transfers) + (len(ranks) if p.reduce_bytes else 0)]
        start = self.now + self._launch()

        def one_done():
            left[0] -= 1
            if left[0] == 0:
                end = self.now + p.fixed_us
                for r, i in members:
                    self.posted.pop((r, i), None)
                    arrived[r].detail = {"algorithm": p.algorithm, "protocol": p.protocol, "channels": p.channels,
                                         "flow_us": self.now - start}
                    self.finish(r, arrived[r], end)

        def launch():
            if left[0] == 0:
                one_done_now = self.now + p.fixed_us
                for r, i in members:
                    self.posted.pop((r, i), None)
                    self.finish(r, arrived[r], one_done_now)
                return
            for t in p.transfers:
                resources, _lat = self.net.route(ranks[t.src], ranks[t.dst])
                self.start_flow(resources, t.nbytes, p.ceiling_GBs, one_done)
            if p.reduce_bytes:
                for r in ranks:
                    self.start_flow((self.net.hbm(r),), p.reduce_bytes, None, one_done)
        self.at(start, launch)

    def _view(self, ranks: tuple[int, ...]) -> nccl.View:
        """NCCL's view of a communicator over `ranks`: GPU generation, intra-node transport, node
        count, and the nominal bandwidth of its ring's narrowest hop."""
        found = self.views.get(ranks)
        if found is None:
            pairs = [(a, ranks[(i + 1) % len(ranks)]) for i, a in enumerate(ranks)] if len(ranks) > 1 else []
            nodes = {self.net.node_of[r] for r in ranks} if self.net.node_of else {0}
            intra = {self.net.transport(a, b) for a in ranks for b in ranks
                     if a != b and (not self.net.node_of or self.net.node_of[a] == self.net.node_of[b])}
            found = nccl.View(gpu=self.net.gpu_generation, intra="pcie" if "pcie" in intra else "nvlink",
                              nodes=len(nodes), route_GBs=min((self.net.nominal_GBs(a, b) for a, b in pairs),
                                                              default=370.8),
                              channels=self.c.nccl_max_channels, p2p_channels=self.c.nccl_p2p_max_channels)
            self.views[ranks] = found
        return found

    # -- one-sided ----------------------------------------------------------------------------
    def _issue_delivery(self, rank: int, index: int, op, rec: OpRecord) -> None:
        epoch = self.fences[rank][index]
        key = (rank, op.pe)
        epochs = self.in_flight_epochs.setdefault(key, [])

        flow_note = OpRecord(rank=rank, index=index, sub=None, kind="delivery", text="", loc=op.loc)
        rule = COSTS[op.kind]

        def start():
            epochs.append(epoch)
            nbytes = rule.nbytes(op, lambda region: self._bytes(rank, region))
            latency = fixed_us(self.c, rule.latency)
            ceiling = min(self._block_ceiling(), self.net.bottleneck(rank, op.pe) * self.c.nvshmem_link_efficiency)
            self.transfer(rank, op.pe, nbytes, ceiling, latency, lambda: land(), record=flow_note)

        def land():
            epochs.remove(epoch)
            self.outstanding[rank] -= 1
            delivery = OpRecord(rank=rank, index=index, sub=None, kind="delivery", text=f"delivery of {rec.text}",
                                loc=op.loc, start=rec.end, end=self.now, cause=rec, cause_kind="issue",
                                detail=dict(flow_note.detail))
            self.records.append(delivery)
            self.last_delivery[rank] = delivery
            self._apply(op, delivery)
            self._release(key)
            if self.outstanding[rank] == 0 and rank in self.quiet_waiter:
                waiter = self.quiet_waiter.pop(rank)
                waiter.cause, waiter.cause_kind = delivery, "delivery completed"
                if waiter.kind == "barrier_all":
                    self._arrive(rank, waiter.index, waiter)
                else:
                    self.finish(rank, waiter)

        if any(e < epoch for e in epochs) or any(e < epoch for e, _ in self.pending.get(key, [])):
            self.pending.setdefault(key, []).append((epoch, start))
        else:
            start()

    def _release(self, key: tuple[int, int]) -> None:
        held = self.pending.get(key, [])
        epochs = self.in_flight_epochs.get(key, [])
        ready = [(e, fn) for e, fn in held if not any(x < e for x in epochs) and not any(y < e for y, _ in held)]
        for item in ready:
            held.remove(item)
            item[1]()

    def _apply(self, op, delivery: OpRecord) -> None:
        target = op.pe
        if op.kind in ("put_signal", "signal_op"):
            word = self.sig_offset[op.signal.signal] + op.signal.index
            old = self.signals[target][word]
            # the checker's arithmetic: uint64 words, adds wrap modulo 2**64 (2**64 - 1 decrements)
            self.signals[target][word] = op.value if op.sig_op == "set" else atomic_result("add", old, op.value)
            self._wake(target, word, delivery)
        elif op.kind == "atomic" and isinstance(op.target, ir.SignalRef):
            word = self.sig_offset[op.target.signal] + op.target.index
            self.signals[target][word] = atomic_result(op.op, self.signals[target][word], op.value)
            self._wake(target, word, delivery)

    def _wake(self, rank: int, word: int, writer: OpRecord) -> None:
        self.sig_writer[(rank, word)] = writer
        if (rank, word) in self.waiting:
            op = self.sched.programs[rank].ops[self.pc[rank]]
            if compare(op.cmp, self.signals[rank][word], op.value):
                del self.waiting[(rank, word)]
                rec = self._record(rank, self.pc[rank], None, op, self.now, cause=writer, cause_kind="signal")
                self.finish(rank, rec, self.now)

    # -- sizes --------------------------------------------------------------------------------
    def _bytes(self, rank: int, region: ir.Region) -> float:
        return region.count * ir.DTYPE_BYTES[self.sched.programs[rank].buffer(region.buffer).dtype]

    def _block_ceiling(self) -> float:
        return self.c.nvshmem_block_GBs * self.conditions.nvshmem_blocks

    def _critical_path(self) -> list[OpRecord]:
        if not self.records:
            return []
        node = max(self.records, key=lambda r: r.end)
        path, seen = [], set()
        while node is not None and id(node) not in seen:
            seen.add(id(node))
            path.append(node)
            node = node.cause
        return path[::-1]

