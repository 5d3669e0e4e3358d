"""Simulated time: an event queue, and the transfers in flight sharing the network.

Every transfer is a flow along its route; concurrent flows share each link max-min fairly
(`flows.max_min_rates`), recomputed at every flow start and finish. Data over NVLink also loads the
opposite direction with its acknowledgements (`nvlink_reverse_share` of its rate), and a flow may
carry a ceiling (NCCL channels times the per-channel rate, NVSHMEM thread blocks times the
per-block rate). The simulator (`simulate`) decides what moves when; this module only moves it.
"""

from __future__ import annotations

import heapq
import itertools
import math
from typing import Callable

from ..errors import PredictError
from .flows import Flow, max_min_rates
from .network import Network

GB = 1e3  # bytes per microsecond in one GB/s
# Defence in depth (topology files are validated so that no valid file gets here): past this much
# simulated time, float microseconds lose sub-microsecond resolution and the result means nothing.
MAX_SIMULATED_US = 1e13  # about 116 days




class FlowEngine:
    """The event queue and the flows in flight on `network`."""

    def __init__(self, network: Network, reverse_share: float = 0.0):
        self.net = network
        self.reverse_share = reverse_share
        self.now = 0.0
        self.queue: list = []
        self.seq = itertools.count()
        self.flows: list[Flow] = []
        self.flow_ids = itertools.count()
        self.flow_done: dict[int, Callable[[], None]] = {}
        self.flow_end: dict[int, float] = {}  # when each flow finishes at its current rate
        self.flow_version = 0
        self.last_update = 0.0
        self.link_bytes: dict[int, float] = {}

    def at(self, time: float, fn: Callable[[], None]) -> None:
        """Call `fn()` at simulated time `time` (events at the same time run in the order given)."""
        heapq.heappush(self.queue, (time, next(self.seq), fn))

    def run(self, budget: int, progress: Callable[[], str]) -> None:
        """Handle events until none is left; PredictError past `budget` events or MAX_SIMULATED_US
        (`progress()` says how far the run got)."""
        events = 0
        while self.queue:
            time, _, fn = heapq.heappop(self.queue)
            if not time <= MAX_SIMULATED_US:  # also catches nan
                raise PredictError(f"simulated time passed {MAX_SIMULATED_US:.0e} us (about 116 days) at "
                                   f"{progress()}: a rate or latency of the topology is out of any real "
                                   "range (check its links' GBs_per_dir and latency_us and its constants)")
            self.now = max(self.now, time)
            fn()
            events += 1
            if events > budget:
                raise PredictError(f"the simulation handled {budget:,} events without finishing ({progress()}, "
                                   f"{self.now:.6g} us simulated): time has stopped advancing; with a realistic "
                                   "topology this is a bug in clockworks, please report it")
        if self.flows:
            names = sorted({self.net.names[r] for f in self.flows for r in f.resources
                            if not self.net.capacity[r] > 0} or {"their ceilings"})
            raise PredictError(f"{len(self.flows)} transfer(s) never finish: their rate is 0 on {', '.join(names)} "
                               "(a bandwidth or rate of the topology is 0)")

    # -- flows --------------------------------------------------------------------------------
    def start_flow(self, resources: tuple[int, ...], nbytes: float, ceiling_GBs: float | None, then,
                   reverse_share: float | None = None) -> None:
        """Move `nbytes` over `resources`; call `then()` when the last byte has left. `reverse_share`:
        the load its acknowledgements put on the opposite direction of each NVLink (default: the
        engine's)."""
        if nbytes <= 0 or not resources:
            self.at(self.now, then)
            return
        self._advance_flows()
        fid = next(self.flow_ids)
        weights = None
        share = self.reverse_share if reverse_share is None else reverse_share
        if share > 0:  # acknowledgements on the opposite direction of each NVLink crossed
            back = [self.net.reverse[r][0] for r in resources
                    if r in self.net.reverse and self.net.reverse[r][1] == "nvlink"]
            if back:
                weights = (1.0,) * len(resources) + (share,) * len(back)
                resources = resources + tuple(back)
        self.flows.append(Flow(fid=fid, resources=resources, remaining=nbytes, weights=weights,
                               ceiling=None if ceiling_GBs is None else ceiling_GBs * GB))
        self.flow_done[fid] = then
        self._reschedule()

    def transfer(self, src: int, dst: int, nbytes: float, ceiling_GBs: float | None, latency_us: float, then,
                 detail: dict | None = None, reverse_share: float | None = None, left=None) -> None:
        """A flow from rank src to rank dst, then the route's latency, paid once, and the time the
        last slice takes to cross the hops after the first (slices forwarded cut-through), then
        `latency_us`. `detail["flow_us"]` notes how long the bytes themselves took; `left()`, if
        given, is called when the last byte has left; `reverse_share` as in `start_flow`."""
        resources, route_latency = self.net.route(src, dst)
        route_latency += self.net.fill_us(src, dst, nbytes)
        began = self.now

        def flowed():
            if detail is not None:
                detail["flow_us"] = self.now - began
            if left is not None:
                left()
            self.at(self.now + route_latency + latency_us, then)
        self.start_flow(resources, nbytes, ceiling_GBs, flowed, reverse_share)

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
