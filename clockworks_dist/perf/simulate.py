"""The runtime simulator: the semantics machine, executed in time on a network model.

The simulator holds a state of the checker's machine (`semantics.machine.Model`) and asks it which
actions can fire (`enabled`); it starts the timed process of each newly enabled action once and
applies the action (`apply`) when that process ends. Which op may run, and what it does to memory
and signals, is the machine's alone: sends and recvs meet first-in-first-out, collectives complete
together, puts are deliveries that land later (held back by fence), waits hold until their signal
words compare true, quiet and barrier_all wait for the rank's deliveries. The simulator adds time:

- a rank's stream runs its ops in order: an op is posted when the previous one has ended and, when
  launches are eager, once the host has issued it (the host issues one launch after another);
  an action starts when it is enabled and every rank it involves has posted its op;
- the cost of each op kind (`costs.COSTS`): kernel launch (NCCL's kernels and plain ones have
  constants of their own), NCCL's plan for a collective or a send/recv (the algorithm, protocol and
  channels NCCL itself picks, `nccl_tuning`, timed by `nccl`; a send to itself, and an all-to-all's
  own chunk, is a copy in HBM; a recv that reduces is followed by a kernel that does it), NVSHMEM
  issue and signal latencies, barrier rounds; a compute op's stated cost (us=, or a roofline of
  flops= and bytes= on the GPU's peak rate and HBM);
- every transfer is a flow over the network (`events.FlowEngine`); local ops are flows over the
  GPU's HBM, so they slow down when other traffic uses it;
- `RunConditions.program`: a timed run of the generated program (`program.py`), with its own
  per-run and per-op costs;
- a rank's threads (`ir.Thread`) are actors of the machine, as in the checker (`semantics.threads`):
  each issues its ops in order, all of a rank's run at once on its GPU (`_Homes`), and the rank ends
  when they have. Thread blocks are one kernel per rank, started once: their ops start no kernel, and
  a block's send moves on one channel (with `RunConditions.protocol`, an MSCCL file's `proto`).

A put's issue is a step of its rank (`nvshmem_put_latency_us`); its delivery then flows and lands
as an action of its own, the route's one-way latency (plus `nvshmem_signal_latency_us`) after its
last byte has left. On the load/store path (NVLink, PCIe peer access, the PE itself) NVSHMEM's
threads store the bytes themselves, and whatever must be ordered after those stores waits for them
to be acknowledged, one route latency after they land: a fence or quiet is the thread's system-scope
fence (`nvshmem_fence_us`, or until that acknowledgement if later), and a put_signal fences between
its data and its signal, so the signal lands three one-way latencies after the data left (data,
acknowledgement, signal) where a bare signal_op takes one. Measured on 2 x H200 (the calibration's
topologies/measured/raw): a signal one way 0.79 us, a 1 KiB put_signal 2.34 us, three times 0.77 plus
its bytes. A get is a request and the data coming back; a fetching atomic a round trip. In a
generated NVSHMEM program the fences are the ones its code generator plans (`codegen.nvshmem.plan_rank`):
before an op whose blocks fence first (a publication, a fence's order), and in a quiet that has
something in flight; a fence op itself emits nothing there. A run of calls with a kernel per call
(`RunConditions.kernel_starts`) starts each call's kernel once the one before has ended (fenced
where the plan says so: `end_fence`), at a plain kernel's start (`local_graph_launch_us`, and eagerly
the host's issue of it; in a graph `cooperative_launch_us` more where it is launched cooperatively), where
one kernel for the calls has a handoff between its blocks instead.
A put_signal sent as flag-in-data packets (`RunConditions.packet_sends`, `--packets`; or on the signal
`RunConditions.packet_signal` names, an MSCCL++ plan's LL packets) is one stream of
16-byte stores carrying its data and flag: twice the bytes, no fence, so it lands one route latency
after its last store left. In an NVSHMEM program generated with `--copy-engine SIZE`
(`RunConditions.copy_engine`) a put of at least SIZE bytes is a copy on the stream between two
kernels: it starts once the kernel before has ended (a node's start, `local_graph_launch_us`), moves
at the copy engine's rate (`copy_engine_GBs`, capped by the links) and holds its rank until it has
landed and the next kernel has started. Between GPUs that reach each other's memory the issuing threads store
the bytes themselves, so the rank goes on only once they have left (over a network a proxy moves
them and the rank goes on at once). A fetching atomic takes effect when issued, and its rank waits for the
round trip. A wait ends when the write that satisfies it lands; a collective starts when its last
member arrives; a send/recv transfer when the later side posts.

The result has every op's start and end on every rank, the critical path (each op remembers what it
waited for last), per-link bytes, and the total time.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from .. import ir, lowering
from ..semantics.machine import Action, Model
from ..semantics.match import match
from ..semantics.rules import Sync, describe, signal_effect
from ..semantics.threads import Actors, expand
from . import nccl
from .programs import program_model
from .costs import (
    COSTS, RunConditions, compute_dtype, fixed_us, host_cost, launch_us, launches_kernel, reduce_traffic,
    reducing_recvs, warn_no_cost,
)
from .events import FlowEngine, PredictError
from .network import Network

__all__ = ["OpRecord", "PredictError", "Simulator", "Timeline", "compile_model"]


def _nobody(_recv: tuple) -> bool:
    """`Model.land_all`'s `ready` for the landings every action leaves: messages in a FIFO wait for
    their recv's rank to post it (`Simulator._take_messages`)."""
    return False

# The ops an NVSHMEM program runs on one thread (no step of the kernel's blocks before them).
_ONE_THREAD = frozenset({"wait_until", "wait_until_all", "wait_until_any", "fence", "quiet", "signal_op", "atomic",
                         "fetch_atomic", "barrier_all", "sync_all"})
# A run that handles far more events than its ops can cause is not advancing.
EVENTS_PER_OP_AND_RANK = 100


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
    thread: str | None = None  # the rank's thread that ran it (`ir.Thread`), None for the rank's own program


@dataclass
class Timeline:
    """A simulated run: every op's record, bytes per resource, the critical path, NCCL's plans."""

    total_us: float
    records: list[OpRecord]
    link_bytes: dict[int, float]
    network: Network
    critical: list[OpRecord]
    plans: list[tuple[OpRecord, nccl.Plan]]


def actors_of(sched: ir.Schedule) -> Actors:
    """The actors the machine runs for `sched` (`semantics.threads.expand`: each rank, and each thread
    of a rank as an actor of its own); PredictError if they cannot be built (two threads on one
    connection, a collective inside a thread)."""
    actors, problems = expand(sched)
    if problems:
        _refuse(sched, problems[0])
    return actors


def _refuse(sched: ir.Schedule, first, name=lambda text: text) -> None:
    """PredictError for the first static mismatch, at its op's file:line (`name`: its actors named
    as ranks and threads)."""
    where = first.ops[0].loc if first.ops and first.ops[0].loc else sched.loc
    message = name(first.message).removeprefix(f"{where}: ")
    raise PredictError(f"{where}: the schedule does not match: {message} (run `clockworks check`)")


def compile_model(sched: ir.Schedule) -> Model:
    """The semantics machine of `sched`, over its actors (a rank's threads are actors of their own,
    as the checker runs them); PredictError if the schedule does not match statically."""
    actors = actors_of(sched)
    matches, problems = match(actors.sched)
    if problems:
        _refuse(sched, problems[0], actors.text)
    return Model(actors.sched, matches, home=actors.home)


class _Homes:
    """The network as the actors see it: an actor (a rank, or one of its threads) sends from, and
    computes on, its rank's GPU. Ranks are actors 0 .. world-1, so a PE or peer rank maps to itself."""

    def __init__(self, network: Network, home: tuple[int, ...]):
        self._net, self._home = network, home

    def __getattr__(self, name):
        return getattr(self._net, name)

    def route(self, src: int, dst: int):
        return self._net.route(self._home[src], self._home[dst])

    def fill_us(self, src: int, dst: int, nbytes: float) -> float:
        return self._net.fill_us(self._home[src], self._home[dst], nbytes)

    def transport(self, src: int, dst: int) -> str:
        return self._net.transport(self._home[src], self._home[dst])

    def bottleneck(self, src: int, dst: int) -> float:
        return self._net.bottleneck(self._home[src], self._home[dst])

    def nominal_GBs(self, src: int, dst: int) -> float:
        return self._net.nominal_GBs(self._home[src], self._home[dst])

    def hbm(self, rank: int) -> int:
        return self._net.hbm(self._home[rank])

    def local_bytes(self, rank: int, nbytes: float, l2_GBs: float) -> float:
        return self._net.local_bytes(self._home[rank], nbytes, l2_GBs)

    def peak_flops(self, rank: int, dtype, op) -> float:
        return self._net.peak_flops(self._home[rank], dtype, op)


class Simulator:
    """A timed scheduler over the semantics machine of `sched` (see the module docstring); `model`,
    if given, is that machine already compiled (`compile_model`)."""

    def __init__(self, sched: ir.Schedule, network: Network, consts, mode: str = "graph", host_clock: bool = True,
                 conditions: RunConditions = RunConditions(), model: Model | None = None):
        # The machine runs actors (`semantics.threads`): each rank, and each thread of a rank, issuing
        # its own ops in order; the actors of a rank share its GPU (`_Homes`) and its memory. Without
        # threads the actors are the ranks.
        self.actors = actors_of(sched)
        self.user_sched, sched = sched, self.actors.sched
        self.home, self.ranks = self.actors.home, self.actors.ranks
        self.network = network
        self.sched, self.net, self.c, self.mode = sched, _Homes(network, self.home), consts, mode
        self.conditions = conditions
        if self.actors.threaded and conditions.program is not None:
            thread = next(t for p in self.user_sched.programs for t in p.threads)
            raise PredictError(f"{thread.loc}: a generated program's run is not modelled for threads ({thread.kind} "
                               f"{thread.name} ...): `clockworks codegen` does not emit threads yet")
        grouped = next((op for p in sched.programs for op in p.ops if isinstance(op, ir.Group)
                        and any(m.kind in ir.GROUP_COLLECTIVE_KINDS for m in op.ops)), None)
        if grouped is not None:  # the collective's cost model prices one collective per op, not members
            raise PredictError(f"{grouped.loc}: a collective inside a group is not priced yet ({describe(grouped)}): "
                               "the simulator times a group's sends and recvs only; move the collective out of the "
                               "group to predict it (`clockworks check` explores it as written)")
        # Per actor: whether it is a thread block of its rank's kernel (its ops start no kernel of their
        # own; the kernel starts once, before its blocks' first ops), and the thread ends (free: the
        # expansion's bookkeeping, not an op of the schedule).
        self.block = [self.actors.kinds.get((self.home[a], self.actors.thread[a])) == "block"
                      for a in range(sched.world)]
        self.free = {(a, len(p.ops) - 1) for a, p in enumerate(sched.programs) if self.actors.thread[a] is not None}
        self.model = model or compile_model(self.user_sched)
        self.state = self.model.initial()
        self.world = sched.world
        self.engine = FlowEngine(self.net, consts.nvlink_reverse_share)
        self.records: list[OpRecord] = []
        self.plans: list[tuple[OpRecord, nccl.Plan]] = []
        self.views: dict[tuple[int, ...], nccl.View] = {}
        self.started: set[tuple] = set()  # actions whose timed process has begun
        self.dispatching, self.again = False, False
        # What may still start: per rank, the actions of its posted op not started yet (a rank with
        # some is idle); and the deliveries in flight, of which `flying` have started.
        self.unstarted = [0] * self.world
        self.idle: set[int] = set()
        self.flying = 0
        self.enabled_in, self.enabled_now = None, []
        # Per rank: whether its current op is posted, that op's record, the record its next op
        # follows, and when it became ready to meet its partners (a collective's tie-break).
        self.posted = [False] * self.world
        self.current: list[OpRecord | None] = [None] * self.world
        self.last: list[OpRecord | None] = [None] * self.world
        self.arrival = [0] * self.world
        self.arrivals = itertools.count()
        self.issues: dict[tuple[int, int], OpRecord] = {}  # the issue of each delivery in flight
        self.holding: dict[tuple[int, int], OpRecord] = {}  # puts whose rank waits for their bytes to leave
        # Held puts whose rank went on beside them (`programs.runs_beside`: another block of the
        # generated kernel runs its next op), and per rank whether its next op waits for them.
        self.beside: set[tuple[int, int]] = set()
        self.waits_held = [False] * self.world
        self.sig_writer: dict[tuple[int, int], OpRecord] = {}  # (rank, word) -> the last write's record
        # The load/store path's acknowledgements: per rank, its deliveries in flight that its threads
        # store (a fence waits for them to land), when the last of its landed stores is acknowledged,
        # and what goes on once its stores in flight have all landed (a waiting fence).
        self.storing = [0] * self.world
        self.acked = [0.0] * self.world
        self.fencing: dict[int, object] = {}
        # Eager mode: the host issues the launches one after another (`costs.host_cost`); a kernel
        # cannot start before the host has issued it (it can start later, when the GPU is busy).
        # A generated program's run (`conditions.program`) also has its own costs: before its first
        # op (`start_us`), before each op (a host-driven program's progress word, `mark_us`, which
        # the host issues too) and after its last (`end_us`).
        # The program's model (`programs`: the schedule alone, the NCCL backend's host-driven program,
        # the NVSHMEM backend's kernels) reads its lowering (`conditions.program`, a `lowering.Lowered`):
        # which ops begin a call's kernel, which put_signals send packets, which puts the copy engine
        # moves, the block plan. The simulator reads those decisions and never makes them.
        lowered = conditions.program
        if lowered is not None and lowered.sched is not sched:
            raise ValueError("Simulator(sched, conditions=RunConditions(program=lowered)) runs lowered.sched")
        self.prog = program_model(sched, consts, mode, lowered)
        self.program = self.prog.backend
        self.engine_ops, self.call_kernels = self.prog.engine_ops, self.prog.call_kernels
        self.packet_sends = self.prog.packet_sends
        self.start_us, self.mark_us, self.end_us, mark_host = self.prog.costs()
        self.host_ready = [[0.0] * len(p.ops) for p in sched.programs]
        if mode == "eager" and host_clock:
            for rank, prog in enumerate(sched.programs):
                if self.block[rank]:  # the host launches the rank's kernel once; its blocks' ops are inside
                    self.host_ready[rank] = [consts.kernel_launch_us] * len(prog.ops)
                    continue
                # a program's host may be ahead when its timed span starts (the GPU still aligns)
                issued = -consts.program_host_lead_us if self.program is not None else 0.0
                issued += consts.local_host_us if self.prog.in_kernel else 0.0  # its one kernel
                for i, op in enumerate(prog.ops):
                    issued += self._host_cost(rank, op) + (mark_host if launches_kernel(op) else 0.0)
                    if (rank, i) in self.engine_ops:  # the host issues the copy, then the next kernel
                        issued += 2 * consts.local_host_us
                    if (rank, i) in self.call_kernels:  # the host issues this call's kernel
                        issued += consts.local_host_us
                    self.host_ready[rank][i] = max(0.0, issued)

    @property
    def now(self) -> float:
        """The simulated time, us."""
        return self.engine.now

    def _host_cost(self, rank: int, op) -> float:
        """The host's time to issue `op` eagerly: `costs.host_cost`, except for what launches no
        kernel here: an op inside an NVSHMEM program's kernel, and an in-place collective on a
        communicator of one rank (NCCL returns at once)."""
        if self._in_kernel() and COSTS[op.kind].timing not in ("p2p", "collective"):
            return 0.0
        if op.kind in ("all_reduce", "broadcast", "reduce_to") and op.src == getattr(op, "dst", None) \
                and len(self.sched.members(op.comm, rank)) == 1:
            return 0.0
        return host_cost(op, self.c)

    def _gap(self, rank: int, index: int) -> float:
        """What a generated program runs before op `index` of `rank` (`programs`: a host-driven
        program's progress word before each launch; in an NVSHMEM kernel, a step and the block plan's
        handoff)."""
        return self.prog.gap(self, rank, index, self.sched.programs[rank].ops[index])

    def _planned_fence(self, rank: int, index: int) -> bool:
        """Whether the generated NVSHMEM program's blocks fence before op `index` of `rank`."""
        return self.prog.planned_fence(rank, index)

    def _in_kernel(self) -> bool:
        """Whether local ops and PE-wide barriers run inside an already running kernel (an NVSHMEM
        program's one kernel per rank), starting no kernel of their own."""
        return self.prog.in_kernel

    def run(self) -> Timeline:
        """Simulate to the end; PredictError if the schedule deadlocks."""
        for rank in range(self.world):
            # a rank's thread blocks begin once its kernel has started (one launch for all of them)
            start = self.start_us + (self._launch() if self.block[rank] else 0.0)
            self.engine.at(start, lambda r=rank: self._post(r))
        budget = 1_000_000 + EVENTS_PER_OP_AND_RANK * sum(self.model.nops) * self.world
        self.engine.run(budget, self._progress)
        pcs = self.state.pcs
        stuck = [r for r in range(self.world) if pcs[r] < self.model.nops[r]]
        if stuck:
            self._deadlock(stuck)
        self._name_threads()
        last = max([r.end for r in self.records], default=0.0)
        if self.prog.closes_with_acks() and self.end_us:  # the program's closing quiet: its stores acknowledged
            last = max([last, *self.acked])
        total = last + self.end_us
        return Timeline(total_us=total, records=self.records, link_bytes=self.engine.link_bytes, network=self.network,
                        critical=self._critical_path(), plans=self.plans)

    def _deadlock(self, stuck: list[int]) -> None:
        """PredictError: the ranks that never finish, each blocked actor's op (a rank's thread named
        by its rank and name; the end of a rank's threads left out while a thread of it is blocked:
        it only waits for them)."""
        ranks = sorted({self.home[a] for a in stuck})
        threads = {self.home[a] for a in stuck if self.actors.thread[a] is not None}
        shown = [a for a in stuck if self.actors.thread[a] is not None or a not in threads]
        blocked = [f"{self.actors.who(a)} blocks in "
                   f"{self.actors.text(describe(self.sched.programs[a].ops[self.state.pcs[a]]))}"
                   for a in shown]
        first = self.sched.programs[shown[0]].ops[self.state.pcs[shown[0]]]
        more = f"; and {len(blocked) - 4} more" if len(blocked) > 4 else ""
        raise PredictError(f"{first.loc}: the schedule deadlocks: rank(s) {', '.join(map(str, ranks))} never finish "
                           f"({'; '.join(blocked[:4])}{more}; run `clockworks check` for the counterexample)")

    def _name_threads(self) -> None:
        """Records name ranks and threads, not actors: each record's rank is its actor's rank, its
        thread the actor's thread (what it waited for, too)."""
        if not self.actors.threaded:
            return
        for rec in self.records:
            actor = rec.rank
            rec.rank, rec.thread = self.home[actor], self.actors.thread[actor]
            rec.text, rec.cause_kind = self.actors.text(rec.text), self.actors.text(rec.cause_kind)
            if rec.thread is None and self.user_sched.programs[rec.rank].threads and rec.kind == "wait_until_all":
                rec.text = "end: every thread has ended"

    def _progress(self) -> str:
        return f"{sum(self.state.pcs)} of {sum(self.model.nops)} ops done"

    # -- the machine --------------------------------------------------------------------------
    def _dispatch(self, first: dict[tuple, int] | None = None) -> None:
        """Start the timed process of every enabled action whose ranks have all posted their ops
        (those in `first` before the others, in its order). An action that takes effect at once (a
        wait, a fence, a fetching atomic) changes the state: what is enabled is asked again, in a
        loop rather than a nested call."""
        if self.dispatching:
            self.again = True
            return
        if not self.idle and len(self.state.in_flight) == self.flying:
            return  # every posted op and every delivery has started: nothing is left to start
        self.dispatching, self.again = True, True
        try:
            while self.again:
                self.again = False
                state = self.state
                startable = [a for a in self._enabled() if a not in self.started and self._ready(a)]
                if first:
                    startable.sort(key=lambda a: first.get(a, len(first)))
                for action in startable:
                    if self.state is not state:  # the rest may no longer be enabled
                        self.again = True
                        break
                    self._start(action)
        finally:
            self.dispatching = False

    def _enabled(self) -> list[tuple]:
        """The machine's enabled actions in the current state (asked once per state: a rank that
        posts its op changes when an action may start, not what is enabled)."""
        if self.enabled_in is not self.state:
            self.enabled_in, self.enabled_now = self.state, self.model.enabled(self.state)
        return self.enabled_now

    def _ranks_of(self, action: Action) -> list[int]:
        """The ranks whose current op takes part in `action` (none for a delivery)."""
        kind = action.kind
        if kind == "step":
            return [action.rank]
        if kind == "p2p":
            if action.key in self.model.gate:  # a connection with slots: the send goes on its own
                return [action.rank]
            return [action.rank, self.model.matches.recv_of[action.key][0]]
        if kind == "coll":
            return [key[0] for key in self.model.coll_members[action.cid]]  # (rank, index, sub)
        return []

    def _ready(self, action: Action) -> bool:
        """Whether every rank taking part has posted its op (a delivery in flight needs none; a landing
        is never started here: it is taken as its recv's rank posts it, `_take_messages`)."""
        if action.kind == "deliver" and action.index < 0:
            return False
        return all(self.posted[rank] for rank in self._ranks_of(action))

    def _start(self, action: Action) -> None:
        self.started.add(action)
        for rank in self._ranks_of(action):
            self.unstarted[rank] -= 1
            if not self.unstarted[rank]:
                self.idle.discard(rank)
        kind = action.kind
        if kind == "step":
            self._start_step(action)
        elif kind == "p2p":
            self._start_p2p(action)
        elif kind == "coll":
            self._start_collective(action)
        else:
            self.flying += 1
            self._start_delivery(action)

    def _apply(self, action: Action) -> None:
        """The action's timed process has ended: the machine takes the step. The landings it leaves
        (a recv, a collective member writing its output) are taken at once: the transfer's time
        already covers the write."""
        self.state = self.model.land_all(self.model.apply(self.state, action), ready=_nobody)

    # -- ranks --------------------------------------------------------------------------------
    def _post(self, rank: int) -> None:
        """The rank's stream reaches its next op (once the host has issued it)."""
        pc = self.state.pcs[rank]
        if pc >= self.model.nops[rank] or self.posted[rank]:
            return
        if self.now < self.host_ready[rank][pc] - 1e-9:  # the host has not issued it yet
            self.engine.at(self.host_ready[rank][pc], lambda: self._post(rank))
            return
        if self._planned_fence(rank, pc):  # its blocks' fence returns once their stores are acknowledged
            if self.storing[rank]:
                self.fencing[rank] = lambda: self._post(rank)
                return
            if self.now < self.acked[rank] - 1e-9:
                self.engine.at(self.acked[rank], lambda: self._post(rank))
                return
        held = [m for r, m in self.beside if r == rank]
        if held and not self.prog.runs_beside(rank, pc, held):  # its block(s) still store a put's bytes
            self.waits_held[rank] = True
            return
        self.posted[rank] = True
        self.arrival[rank] = next(self.arrivals)
        code = self.model.code[rank][pc]
        self.unstarted[rank] = len(code.members) or 1  # a group's members start one by one
        self.idle.add(rank)
        if code.awaits is None:  # a wait's record begins when it is satisfied
            self.current[rank] = self._record(rank, pc, None, code.op, self.now)
        if self.model.gated and self._take_messages(rank, pc):
            return
        self._dispatch(self._member_order(rank, pc))

    def _take_messages(self, rank: int, pc: int) -> bool:
        """A recv on a connection with slots whose message is already in its FIFO takes it as it is
        posted, at no cost of its own: the data crossed the link when it was sent (`_start_p2p`), and
        the copy out of the FIFO is not timed. True if that completed the rank's op."""
        self.state = self.model.land_all(self.state, ready=lambda recv: recv[:2] == (rank, pc))
        if self.state.pcs[rank] == pc:
            return False
        self._finish(rank, self.current[rank])
        self._dispatch()  # a sender waiting for room in this FIFO may go on
        return True

    def _member_order(self, rank: int, index: int) -> dict[tuple, int]:
        """The transfers of a send, recv or group, in the order of its members (a rank that posts
        a group starts the transfers it unblocks in that order)."""
        order = {}
        for sub, member in self.model.code[rank][index].members:
            key = (rank, index, sub)
            send = key if member.kind == "send" else self.model.matches.send_of.get(key)
            if send is not None:
                order[("p2p", *send)] = len(order)
        return order

    def _record(self, rank: int, index: int, sub, op, start: float, cause=None, cause_kind="program order") -> OpRecord:
        rec = OpRecord(rank=rank, index=index, sub=sub, kind=op.kind, text=describe(op), loc=op.loc,
                       start=start, cause=cause if cause is not None else self.last[rank], cause_kind=cause_kind)
        self.records.append(rec)
        return rec

    def _launch(self, kernel: str = "nccl") -> float:
        """GPU-side cost of starting a kernel, "nccl" or "local" (the host's issue cost is the host
        clock's)."""
        return launch_us(self.c, self.mode, kernel)

    def _finish(self, rank: int, rec: OpRecord, end: float | None = None) -> None:
        """The rank's op is done at `end` (default: now): its stream goes on from there (after the
        progress word a generated program writes before its next op)."""
        rec.end = self.now if end is None else end
        self.last[rank] = rec
        self.posted[rank] = False
        self.current[rank] = None
        pc = self.state.pcs[rank]
        gap = self._gap(rank, pc) if pc < self.model.nops[rank] else 0.0
        self.engine.at(rec.end + gap, lambda: self._post(rank))

    def _size(self, rank: int, region: ir.Region) -> float:
        """A region's bytes on `rank`."""
        return region.count * ir.DTYPE_BYTES[self.sched.programs[rank].buffer(region.buffer).dtype]

    # -- steps of one rank --------------------------------------------------------------------
    def _start_step(self, action: Action) -> None:
        _, rank, index = action
        op = self.sched.programs[rank].ops[index]
        rule = COSTS[op.kind]
        if self.model.code[rank][index].awaits is not None:
            self._wait_ends(action, op)
            return
        rec = self.current[rank]
        if rule.timing == "local":
            self._start_kernel(action, op, rec)
        elif rule.timing == "delivery":  # issued: the delivery is in flight, the rank goes on
            issue = self._launch("local") if (rank, index) in self.engine_ops else fixed_us(self.c, rule.issue)
            if (rank, index) in self.free:  # a thread's end: bookkeeping of the expansion, no op of the schedule
                issue = 0.0
            self.engine.at(self.now + issue, lambda: self._issued(action, rec))
        elif rule.timing == "get":  # the request reaches the peer, then its bytes come back
            nbytes = rule.nbytes(op, rank, self._size)
            request = fixed_us(self.c, rule.issue) + self.net.route(rank, op.pe)[1]
            self.engine.at(self.now + request, lambda: self.engine.transfer(
                op.pe, rank, nbytes, self._block_ceiling(nbytes), fixed_us(self.c, rule.latency),
                lambda: self._step_done(action, rec)))
        elif rule.timing == "fixed":  # a fetching atomic: it takes effect now, the old value returns later
            self._apply(action)
            self._wrote_signal(op, rec)
            trip = self.net.route(rank, op.pe)[1] + self.net.route(op.pe, rank)[1]
            self._finish(rank, rec, self.now + trip + fixed_us(self.c, rule.latency))
            self._dispatch()
        elif op.kind in ("fence", "quiet"):
            self._fence(action, rec, op)
        else:
            self._step_done(action, rec)

    def _fence(self, action: Action, rec: OpRecord, op) -> None:
        """A fence or quiet: the thread's system-scope fence, `nvshmem_fence_us`, returning once every
        store of the rank's deliveries has landed and been acknowledged (the machine also holds later
        deliveries back behind a fence, and enables a quiet only once nothing is in flight). In a
        generated NVSHMEM program a fence op emits no code (its order is kept by the fence planned
        before the next delivery to that PE, `_planned_fence`) and neither does a quiet with nothing
        in flight (an idle step)."""
        rank, index = action.rank, action.index
        if self.prog.emits_nothing(rank, index, op):
            self._step_done(action, rec)
            return
        def settled():  # its own cost runs from when the rank reached it (a quiet may be enabled later)
            self.engine.at(max(rec.start + self.c.nvshmem_fence_us, self.acked[rank], self.now),
                           lambda: self._step_done(action, rec))

        if self.storing[rank]:
            self.fencing[rank] = settled
        else:
            settled()

    def _start_kernel(self, action: Action, op, rec: OpRecord) -> None:
        """A local kernel: its start, then its bytes over the rank's HBM (shared with whatever else
        uses it); a compute op takes the cost it states (`_compute_cost`)."""
        rank = action.rank
        nbytes = COSTS[op.kind].nbytes(op, rank, self._size)
        launches, fixed_after, floor, ceiling = 1, 0.0, 0.0, None
        if op.kind == "compute":
            launches, nbytes, fixed_after, floor = self._compute_cost(op, rank, nbytes)
            ceiling = self.prog.compute_ceiling_GBs  # a program's stand-in hashes at its own rate
        else:  # reduce, copy, fill: from L2 when what they touch fits there
            floor = self._block_floor(op, rank)
            nbytes = self.net.local_bytes(rank, nbytes, self.c.l2_GBs)
        start = self.now + (0.0 if self._in_kernel() or self.block[rank] else launches * self._launch("local"))
        done = lambda: self._step_done(action, rec)  # noqa: E731
        if fixed_after and not nbytes:
            self.engine.at(start + fixed_after, done)
            return
        began = [start]

        def flowed():  # a roofline: the longer of its bytes over HBM and its arithmetic
            self.engine.at(max(self.now, began[0] + floor) + fixed_after, done)

        self.engine.at(start, lambda: self.engine.start_flow((self.net.hbm(rank),), nbytes, ceiling, flowed))

    def _block_floor(self, op, rank: int) -> float:
        """The least time of a reduce, copy or fill inside an NVSHMEM program's kernel: the code
        generator spreads it over one block per `lowering.NVSHMEM_BLOCK_BYTES` of the bytes it moves
        (`codegen.nvshmem._op_bytes`: a copy's or fill's destination, a reduce's destination and
        sources), and each block writes its share of the destination at `nvshmem_local_block_GBs`, far
        below HBM or L2 until many blocks share the work; a reduce's sources are loaded side by side
        with that store and add nothing. Evidence: per call, the generated all-gather (a put and a copy
        of half its bytes, 2 x H200, results/h200x2/tune_all) takes 3.1 us more at 256 KiB (its copy on
        2 blocks of 64 KiB) than at 64 KiB (one block of 32 KiB) and only 0.1 us more again at 1 MiB
        (8 blocks of 64 KiB), where the same bytes over HBM or L2 take under 0.1 us
        (scripts/results/predict_generated_misses.md); and on one H200 a reduce runs faster than a copy
        of the same destination once it has more blocks (4.2 against 5.0 us at 32 KiB, 5.1 against 6.6
        at 64 KiB), as its destination's bytes per block say and its moved bytes per block do not
        (results/h200/one_gpu/one_pe_local, scripts/results/fit_local_block_rate.md: 38 GB/s, residuals
        within 0.34 us). 0 (off) until measured. A host-driven program's local kernels: none."""
        return self.prog.block_floor_us(op, rank, self._size)

    def _compute_cost(self, op, rank: int, traffic: float) -> tuple[int, float, float, float]:
        """(kernel starts, HBM bytes, fixed us after them, least us for the arithmetic) of a compute
        op: the time it states (us=), else a roofline of its flops and bytes (bytes default to its
        reads and writes) on this rank's GPU; stating nothing, it is bound by its reads and writes
        (plus `compute_us`) and a CostWarning says so, once per op site. In a generated program's
        run it is the program's stand-in: one kernel to start, one that hashes each read and one
        that writes each write, over its reads and writes, whatever cost it states."""
        programs = self.prog.compute(op, traffic)
        if programs is not None:
            return programs
        if op.us is not None:
            return 1, 0.0, op.us, 0.0
        if not op.states_cost:
            warn_no_cost(op)
            return 1, traffic, self.c.compute_us, 0.0
        floor = 0.0
        if op.flops:
            dtype = compute_dtype(op, lambda region: self.sched.programs[rank].buffer(region.buffer).dtype)
            floor = op.flops / (self.net.peak_flops(rank, dtype, op) * 1e6)
        return 1, float(op.bytes if op.bytes is not None else traffic), 0.0, floor

    def _step_done(self, action: Action, rec: OpRecord) -> None:
        self._apply(action)
        self._finish(action.rank, rec)
        self._dispatch()

    def _issued(self, action: Action, rec: OpRecord) -> None:
        self.issues[action.key] = rec
        if self._stores(action.rank, action.index):
            self.storing[action.rank] += 1
        if not self._holds(action):
            self._step_done(action, rec)
            return
        # the issuing blocks store the bytes themselves: the rank goes on once the last has left
        # (or at once, where its next op runs on another block: `programs.runs_beside`)
        self.holding[action.key] = rec
        self._apply(action)
        rank = action.rank
        pc = self.state.pcs[rank]
        held = [m for r, m in self.beside if r == rank] + [action.index]
        if pc < self.model.nops[rank] and self.prog.runs_beside(rank, pc, held):
            self.beside.add(action.key)
            self._finish(rank, rec)
        else:
            self.posted[rank] = False
        self._dispatch()

    def _holds(self, action: Action) -> bool:
        """Whether a put or non-blocking get keeps its rank until its bytes have moved: between
        GPUs that reach each other's memory (NVLink, PCIe peer to peer), and to the PE itself,
        NVSHMEM moves them with the issuing threads' own loads and stores; over a network a proxy
        does, and the rank goes on."""
        op = self.sched.programs[action.rank].ops[action.index]
        if not COSTS[op.kind].holds:
            return False
        if action.key in self.engine_ops:  # stream order: the next kernel starts after the copy
            return True
        return self._stores(action.rank, action.index)

    def _stores(self, issuer: int, index: int) -> bool:
        """Whether the issuing threads perform this delivery themselves, by loads and stores (NVLink,
        PCIe peer access, the PE itself): fences wait for it. Not a copy engine's (stream order)."""
        if (issuer, index) in self.engine_ops:
            return False
        op = self.sched.programs[issuer].ops[index]
        return self.net.transport(issuer, op.pe) in ("nvlink", "pcie", "local")

    def _release(self, key: tuple) -> None:
        """A held put's bytes have left its rank: the rank goes on (a put its rank went on beside:
        its record ends, and a next op that waits for its block posts now)."""
        rec = self.holding.pop(key, None)
        if rec is None:
            return
        rank = key[0]
        if key in self.beside:
            self.beside.discard(key)
            rec.end = self.now
            if self.waits_held[rank]:
                self.waits_held[rank] = False
                self._post(rank)
        else:
            self._finish(rank, rec)
        self._dispatch()

    def _wait_ends(self, action: Action, op) -> None:
        """A wait whose words compare true: it ends now, after the write that made them so (if that
        came after the rank's previous op)."""
        rank = action.rank
        words = self.model.code[rank][action.index].awaits[0]
        writers = [w for w in (self.sig_writer.get((self.home[rank], word)) for word in words) if w is not None]
        writer = max(writers, key=lambda w: w.end, default=None)
        rec = self._record(rank, action.index, None, op, self.now)
        if writer is not None and writer.end >= (self.last[rank].end if self.last[rank] else 0.0):
            rec.cause, rec.cause_kind = writer, "signal"
        self._step_done(action, rec)

    def _wrote_signal(self, op, rec: OpRecord) -> None:
        """Remember `rec` as the last write of the signal word `op` updates (a wait's cause)."""
        effect = signal_effect(op)
        if effect is not None:
            self.sig_writer[(op.pe, self.model.sig_word(effect[0]))] = rec

    # -- one-sided deliveries -----------------------------------------------------------------
    def _start_delivery(self, action: Action) -> None:
        issuer, index = action.issuer, action.index
        op = self.sched.programs[issuer].ops[index]
        rule = COSTS[op.kind]
        pe = self.model.deliveries[(issuer, index)].pe
        issue = self.issues.pop((issuer, index))
        note: dict = {}
        nbytes = rule.nbytes(op, issuer, self._size)
        packets = (issuer, index) in self.packet_sends or (
            op.kind == "put_signal" and op.signal.signal == self.conditions.packet_signal)
        if (issuer, index) in self.free:  # a thread's end lands as it is issued
            self.engine.at(self.now, lambda: self._landed(action, op, issue, note))
            return
        payload = nbytes if packets else None
        if packets:  # 16-byte stores of 8 bytes of payload and the flag: twice the bytes, the flag in each
            nbytes, note["packets"] = 2 * nbytes, True
        if rule.pulls:  # the bytes come from the peer, at the rate of the blocks that asked for them
            src, dst, ceiling = pe, issuer, self._block_ceiling(nbytes)
        else:
            src, dst = issuer, pe
            ceiling = min(self._block_ceiling(nbytes, payload),
                          self.net.bottleneck(issuer, pe) * self.c.nvshmem_link_efficiency)
        engine = (issuer, index) in self.engine_ops
        if engine:  # the copy engine's rate to a peer (in its own memory: HBM's); the rank goes on once it
            # has landed and the next kernel has started
            ceiling = self.net.bottleneck(issuer, pe) if pe == issuer else min(
                self.c.copy_engine_GBs, self.net.bottleneck(issuer, pe))
            note["copy_engine"] = True
        latency = fixed_us(self.c, rule.latency)
        landed = lambda: self._landed(action, op, issue, note)  # noqa: E731
        left = None if engine else (lambda: self._release((issuer, index)))
        if op.kind == "put_signal" and self._stores(issuer, index) and not packets:
            # the block's fence, from when its stores have left, returns once they are acknowledged
            # (they land, the acknowledgement comes back) and not before its own cost: then the block
            # goes on and the signal crosses
            back, forward = self.net.route(pe, issuer)[1], self.net.route(issuer, pe)[1]
            then, signal, gone = landed, forward + latency, [self.now]

            def left():
                gone[0] = self.now

            def landed():
                fenced = max(self.now + back, gone[0] + self.c.nvshmem_fence_us)
                self.engine.at(fenced, lambda: self._release((issuer, index)))
                self.engine.at(fenced + signal, then)

            latency = 0.0
        if rule.pulls:  # the request reaches the peer first
            request = self.net.route(issuer, pe)[1]
            self.engine.at(self.now + request, lambda: self.engine.transfer(
                src, dst, nbytes, ceiling, latency, landed, detail=note, reverse_share=self.c.nvshmem_reverse_share,
                left=left))
            return
        self.engine.transfer(src, dst, nbytes, ceiling, latency, landed, detail=note,
                             reverse_share=self.c.nvshmem_reverse_share, left=left)

    def _landed(self, action: Action, op, issue: OpRecord, note: dict) -> None:
        issuer = action.issuer
        delivery = OpRecord(rank=issuer, index=action.index, sub=None, kind="delivery",
                            text=f"delivery of {issue.text}", loc=op.loc, start=issue.end, end=self.now, cause=issue,
                            cause_kind="issue", detail=note)
        self.records.append(delivery)
        self.flying -= 1
        if self._stores(issuer, action.index):  # its stores are acknowledged one route latency from now
            self.storing[issuer] -= 1
            back = 0.0 if COSTS[op.kind].pulls else self.net.route(op.pe, issuer)[1]
            self.acked[issuer] = max(self.acked[issuer], self.now + back)
        self._apply(action)
        self._wrote_signal(op, delivery)
        if action.key in self.engine_ops:  # the next kernel starts after the copy (and its signal)
            self.engine.at(self.now + self._launch("local"), lambda: self._release(action.key))
        waiter = self.current[issuer]
        code = self.model.code[issuer][self.state.pcs[issuer]] if self.posted[issuer] else None
        if code is not None and code.sync in (Sync.QUIET, Sync.BARRIER_ALL) \
                and not self.model.in_flight_from(self.state, issuer):
            waiter.cause, waiter.cause_kind = delivery, "delivery completed"
            self.arrival[issuer] = next(self.arrivals)  # it meets the barrier's other members only now
        if not self.storing[issuer] and issuer in self.fencing:  # a fence that waited for these stores
            self.fencing.pop(issuer)()
        self._dispatch()

    def _block_ceiling(self, nbytes: float, payload: float | None = None) -> float:
        """The blocks' rate: the run's block count (a calibration cell's), else the generated code's
        spread of these bytes (of a packet send's `payload`: `lowering.packet_blocks`)."""
        spread = lowering.nvshmem_blocks(nbytes) if payload is None else lowering.packet_blocks(payload)
        blocks = self.conditions.nvshmem_blocks or spread
        return self.c.nvshmem_block_GBs * blocks

    # -- two-sided ----------------------------------------------------------------------------
    def _start_p2p(self, action: Action) -> None:
        skey = action.key
        rkey = self.model.matches.recv_of[skey]
        send_head, recv_head = self.current[skey[0]], self.current[rkey[0]]
        send = self.model.matches._op(skey)
        nbytes = self._size(skey[0], send.src)
        if skey in self.model.gate:  # a connection with slots: the data goes to the receiver's FIFO now
            later, why = send_head, f"rank {send_head.rank} posted its send and its FIFO had room"
        else:  # the transfer starts when the later side posts: it waited for what that side waited for
            later = recv_head if recv_head.start >= send_head.start else send_head
            why = f"rank {later.rank} posted its {'recv' if later is recv_head else 'send'}"
        rec = OpRecord(rank=skey[0], index=skey[1], sub=skey[2], kind="send", text=describe(send), loc=send.loc,
                       start=self.now, cause=later.cause, cause_kind=why)
        self.records.append(rec)
        kind = "all_to_all" if self._exchange(skey[0], skey[1]) else "p2p"
        own = self.home[skey[0]] == self.home[rkey[0]]  # a send to itself: a copy inside the kernel
        view = self._view(tuple(range(self.ranks)))
        proto, ch, ceiling = nccl.p2p_choice(self.c, nbytes, self.net.bottleneck(skey[0], rkey[0]), kind,
                                             view, self.ranks, own, cap=self.conditions.channel_cap)
        blocks = self.block[skey[0]] or self.block[rkey[0]]
        if blocks or self.conditions.protocol:
            # a thread block moves its sends itself: one block, NCCL's one channel; the protocol is the
            # run's (an MSCCL algorithm's `proto`) where it names one
            proto = self.conditions.protocol or proto
            ch = 1 if blocks else ch
            ceiling = nccl.ceiling_for(self.c, kind, proto, ch, self.net.bottleneck(skey[0], rkey[0]),
                                       nccl.exchange_ramp(self.c, kind, proto, ch, nbytes, view))
        # inside a kernel already running (both sides thread blocks) no kernel starts
        launch = 0.0 if self.block[skey[0]] and self.block[rkey[0]] else self._launch()
        fixed = launch + nccl.p2p_fixed_us(self.c, proto, kind, own)
        if not own:
            fixed += nccl.p2p_staging_us(self.c, proto, nbytes, ch, self.net.transport(skey[0], rkey[0]))
        rec.detail.update(protocol=proto, channels=ch)
        wire = 2 * nbytes if own else nbytes / nccl.EFFICIENCY[proto]  # a copy reads and writes HBM
        if own:  # the send's channels copy at their own rate
            ceiling = ch * self.c.nccl_copy_channel_GBs
        self.engine.transfer(skey[0], rkey[0], wire, ceiling, fixed, lambda: self._p2p_done(action, rec),
                             detail=rec.detail)

    def _exchange(self, rank: int, index: int) -> bool:
        """Whether the op is a group that both sends to and receives from other ranks in one NCCL
        launch (an all-to-all, a ring step, an exchange with one peer): NCCL pairs each round's send
        and recv in one work item (`addP2pToPlan`), so the two directions share the channels' warps."""
        group = self.sched.programs[rank].ops[index]
        if group.kind != "group":
            return False
        others = [m for m in group.ops if m.peer != rank]
        return any(m.kind == "send" for m in others) and any(m.kind == "recv" for m in others)

    def _p2p_done(self, action: Action, rec: OpRecord) -> None:
        rec.end = self.now
        recv = self.model.matches.recv_of[action.key]
        fifo = action.key in self.model.gate  # the send alone: its recv takes the message when posted
        sides = [action.rank] if fifo else [action.rank, recv[0]]
        before = self.state.pcs
        self._apply(action)
        for rank in dict.fromkeys(sides):  # each side's op (a group: its last member) is done
            if self.state.pcs[rank] != before[rank]:
                head = self.current[rank]
                if rec.end >= head.start:
                    head.cause, head.cause_kind = rec, "transfer"
                reduces = reducing_recvs(self.sched.programs[rank].ops[before[rank]])
                if reduces:  # NCCL only receives: each recv that reduces is a kernel after the group
                    head.end = self.now
                    self.posted[rank] = False
                    self._reduce_kernels(rank, head, before[rank], reduces)
                else:
                    self._finish(rank, head)
        if fifo and self.posted[recv[0]] and self.state.pcs[recv[0]] == recv[1]:
            self._take_messages(recv[0], recv[1])  # the recv was waiting for this message
            return
        self._dispatch()

    def _reduce_kernels(self, rank: int, after: OpRecord, index: int, recvs: list) -> None:
        """The kernels after a send/recv op whose recvs reduce (dst = dst op received), one after
        another on the rank's stream, each a record of its own; then the op is done."""
        if not recvs:
            self._finish(rank, after, after.end)
            return
        recv = recvs[0]
        rec = OpRecord(rank=rank, index=index, sub=None, kind="reduce", text=f"{recv.dst} {recv.reduce}= received",
                       loc=recv.loc, start=self.now, cause=after, cause_kind="program order")
        self.records.append(rec)

        def done():
            rec.end = self.now
            self._reduce_kernels(rank, rec, index, recvs[1:])

        nbytes = self.net.local_bytes(rank, reduce_traffic(recv, self._size, rank), self.c.l2_GBs)
        launch = 0.0 if self.block[rank] else self._launch("local")  # a thread block reduces by itself
        self.engine.at(self.now + launch, lambda: self.engine.start_flow((self.net.hbm(rank),), nbytes, None, done))

    # -- collectives --------------------------------------------------------------------------
    def _start_collective(self, action: Action) -> None:
        members = self.model.coll_members[action.cid]  # (rank, index, sub): grouped members are refused above
        arrived = {key[0]: self.current[key[0]] for key in members}
        # the last member to arrive (the first of them to get there, on a tie) is what the others waited for
        last_rank = max(arrived, key=lambda r: (arrived[r].start, -self.arrival[r]))
        last = arrived[last_rank]
        for rec in arrived.values():
            if rec is not last:
                rec.cause, rec.cause_kind = last, "collective: last member to arrive"
        op = self.sched.programs[members[0][0]].ops[members[0][1]]
        ranks = [key[0] for key in members]
        rule = COSTS[op.kind]
        if rule.timing == "barrier":  # a dissemination barrier: one round per doubling
            launch = 0.0 if self._in_kernel() else self._launch()
            begin = self.now
            if op.kind in ("barrier_all", "team_barrier"):  # its quiet: every member's stores acknowledged (`_fence`)
                begin = max([self.now + self.c.nvshmem_fence_us] + [self.acked[r] for r in ranks])
            end = begin + launch + fixed_us(self.c, rule.issue) * max(1, (len(ranks) - 1).bit_length())
            self.engine.at(end, lambda: self._collective_done(action, arrived))
            return
        nbytes = rule.nbytes(op, ranks[0], self._size)
        p = self._plan(op.kind, ranks, nbytes, inplace=getattr(op, "src", None) == getattr(op, "dst", None))
        self.plans.append((last, p))
        left = [len(p.transfers) + (len(ranks) if p.reduce_bytes else 0)]
        start = self.now + (0.0 if p.algorithm == "one_rank" and not p.reduce_bytes else self._launch())

        def one_done():
            left[0] -= 1
            if left[0] == 0:
                for rec in arrived.values():
                    rec.detail = {"algorithm": p.algorithm, "protocol": p.protocol, "channels": p.channels,
                                  "flow_us": self.now - start}
                self.engine.at(self.now + p.fixed_us, lambda: self._collective_done(action, arrived))

        def launch():
            if left[0] == 0:
                self.engine.at(self.now + p.fixed_us, lambda: self._collective_done(action, arrived))
                return
            for t in p.transfers:
                resources, _latency = self.net.route(ranks[t.src], ranks[t.dst])
                self.engine.start_flow(resources, t.nbytes, t.ceiling_GBs or p.ceiling_GBs, one_done)
            if p.reduce_bytes:
                for r in ranks:
                    self.engine.start_flow((self.net.hbm(r),), p.reduce_bytes, None, one_done)
        self.engine.at(start, launch)

    def _plan(self, kind: str, ranks: list[int], nbytes: float, inplace: bool = False) -> nccl.Plan:
        """NCCL's plan for a collective over `ranks`, its step latency that of the slowest hardware
        its ring crosses (`inplace`: the call's source is its destination)."""
        pairs = [(a, b) for a in ranks for b in ranks if a != b]
        link = min(self.net.bottleneck(a, b) for a, b in pairs) if pairs else 1e9
        transports = {self.net.transport(a, b) for a, b in pairs}
        worst = next((t for t in ("net", "pcie", "nvlink") if t in transports), "nvlink")
        return nccl.plan(kind, len(ranks), nbytes, self.c, link, self._view(tuple(ranks)), worst,
                         self.conditions.channel_cap, inplace)

    def _collective_done(self, action: Action, arrived: dict[int, OpRecord]) -> None:
        self._apply(action)
        for rank, rec in arrived.items():
            self._finish(rank, rec)
        self._dispatch()

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
