"""What a check returns: the verdict, the violations with their counterexamples, and the APIs later
layers build on (expected final values, the happens-before graph of an execution)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from .. import ir
from ..semantics.match import Mismatch, OpRef

Verdict = Literal["verified", "violated", "incomplete"]
# Errors make the verdict "violated"; warnings are reported but do not.
ERROR_KINDS = (
    "collective_mismatch", "send_recv_mismatch", "deadlock", "data_race", "wrong_result",
    "nondeterministic_result", "unsatisfiable_wait", "symbolic_size", "unfinished_output",
)
WARNING_KINDS = ("not_bitwise_reproducible", "unfinished_deliveries", "symbolic_unproven")


@dataclass(frozen=True)
class Step:
    """One transition of a counterexample: a replayable action and the ops it executes."""

    action: tuple
    label: str
    ops: tuple[OpRef, ...]
    at: int | None = None  # a delivery: the rank whose memory it lands in (its ops are the issuer's)

    def relabel(self, actors) -> "Step":
        """This step of an execution of a schedule's actors, naming ranks and threads
        (`semantics.threads.Actors`)."""
        return Step(action=self.action, label=actors.text(self.label), ops=tuple(actors.ref(o) for o in self.ops),
                    at=actors.home[self.at] if self.at is not None else None)

    def to_json(self) -> dict:
        out = {"action": list(self.action), "label": self.label, "ops": [o.to_json() for o in self.ops]}
        if self.at is not None:
            out["at"] = self.at
        return out


@dataclass(frozen=True)
class Violation:
    kind: str
    message: str
    ranks: tuple[int, ...]
    ops: tuple[OpRef, ...]
    trace: tuple[Step, ...] = ()
    details: dict = field(default_factory=dict)

    @property
    def severity(self) -> str:
        return "warning" if self.kind in WARNING_KINDS else "error"

    @classmethod
    def of(cls, mismatch: Mismatch) -> "Violation":
        """A static mismatch found by `semantics.match`, as the checker reports it."""
        return cls(kind=mismatch.kind, message=mismatch.message, ranks=mismatch.ranks, ops=mismatch.ops)

    def relabel(self, actors) -> "Violation":
        """This violation, found on a schedule's actors, naming ranks and threads
        (`semantics.threads.Actors`): ranks by number, each op with its thread."""
        details = dict(self.details)
        if "blocked" in details:  # actor -> its blocked ops: per rank, each op with its thread
            blocked: dict[int, list[str]] = {}
            for actor, texts in details["blocked"].items():
                name = actors.thread[int(actor)]
                prefix = f"{name}: " if name is not None else ""
                blocked.setdefault(actors.home[int(actor)], []).extend(
                    prefix + t for t in ([texts] if isinstance(texts, str) else texts))
            details["blocked"] = blocked
        if "cycle" in details:
            details["cycle"] = [actors.who(a) for a in details["cycle"]]
        if "rank" in details and isinstance(details["rank"], int):
            details["rank"] = actors.home[details["rank"]]
        return Violation(kind=self.kind, message=actors.text(self.message),
                         ranks=tuple(sorted({actors.home[r] if r < len(actors.home) else r for r in self.ranks})),
                         ops=tuple(actors.ref(o) for o in self.ops), trace=tuple(s.relabel(actors) for s in self.trace),
                         details=details)

    def to_json(self) -> dict:
        return {"kind": self.kind, "severity": self.severity, "message": self.message,
                "ranks": list(self.ranks), "ops": [o.to_json() for o in self.ops],
                "trace": [s.to_json() for s in self.trace], "details": self.details}


@dataclass
class CheckResult:
    schedule: ir.Schedule
    verdict: Verdict
    violations: list[Violation]
    states: int
    transitions: int
    seconds: float
    complete: bool
    stopped_by: str | None = None  # "max_states" or "timeout" when incomplete
    stopped_in: str | None = None  # the phase the bound stopped: "the state search", "the z3 size proofs"
    strategy: str = "dfs"
    reduction: bool = True
    terminal_states: int = 0
    final_values: dict | None = None  # (rank, buffer, start, stop) -> rendered value, one execution
    expected_values: dict | None = None  # (rank, buffer, start, stop) -> rendered expected value

    @property
    def errors(self) -> list[Violation]:
        return [v for v in self.violations if v.severity == "error"]

    @property
    def warnings(self) -> list[Violation]:
        return [v for v in self.violations if v.severity == "warning"]

    def kinds(self) -> set[str]:
        return {v.kind for v in self.violations}

    def to_json(self) -> dict:
        return {
            "schedule": self.schedule.name, "world": self.schedule.world, "verdict": self.verdict,
            "complete": self.complete, "stopped_by": self.stopped_by, "stopped_in": self.stopped_in,
            "states": self.states,
            "transitions": self.transitions, "terminal_states": self.terminal_states,
            "seconds": round(self.seconds, 4),
            "states_per_second": round(self.states / self.seconds, 1) if self.seconds > 0 else None,
            "strategy": self.strategy, "reduction": self.reduction,
            "violations": [v.to_json() for v in self.violations],
        }
