"""Compare a rank's memory at the end of a run with the checker's values (`expected`), bit for bit.

An element matches when it equals the value of the checker's reference execution, or, where the
checker's executions end with different values (`Reference.possible`), one of those. A mismatch
there means the two engines disagree: a bug in the executor or in the semantics. Separately, the
elements a postcondition (`expect=`) names must equal it: a failure there is the schedule's bug
(`wrong_result` in the checker). The first mismatches are reported as rank, buffer, element,
expected (symbolic and numeric) and got.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import expected as expected_mod
from .expected import RankExpect, Reference
from ..semantics.numeric import plain, same_bits

FIRST = 8  # mismatches reported in full per rank


@dataclass
class Comparison:
    """The outcome of one rank's comparison."""

    checked: int = 0  # elements and signal words compared with the checker's values
    mismatches: int = 0  # ... that hold a value no execution of the checker leaves
    other_execution: int = 0  # ... that match an execution other than the reference one
    post_checked: int = 0  # elements the postcondition names
    post_failures: int = 0
    first: list[dict] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No mismatch and no postcondition failure."""
        return not self.mismatches and not self.post_failures

    def to_json(self) -> dict:
        """The comparison as a JSON-ready dict."""
        return {"checked": self.checked, "mismatches": self.mismatches, "other_execution": self.other_execution,
                "post_checked": self.post_checked, "post_failures": self.post_failures, "first": self.first}


def compare_rank(expect: RankExpect, memory: dict[str, np.ndarray], signals: np.ndarray,
                 iteration: int = 0) -> Comparison:
    """Compare one rank's buffers and signal words with what the checker expects."""
    out = Comparison()
    for name, want in expect.buffers.items():
        got = memory[name]
        _against_checker(out, expect.rank, name, got, want, iteration)
        if want.post is not None:
            _against_post(out, expect.rank, name, got, want, iteration)
    _signals(out, expect, signals, iteration)
    return out


def _against_checker(out: Comparison, rank: int, name: str, got: np.ndarray, want, iteration: int) -> None:
    same = same_bits(got, want.expected)
    differs = want.checked & ~same
    for start, stop, options in want.others:
        window = differs[start:stop]
        if not window.any():
            continue
        some = np.zeros(stop - start, dtype=bool)
        for option in options:
            some |= same_bits(got[start:stop], option)
        out.other_execution += int((window & some).sum())
        window &= ~some
    out.checked += int(want.checked.sum())
    bad = np.flatnonzero(differs)
    out.mismatches += len(bad)
    for element in bad[:max(0, FIRST - len(out.first))]:
        out.first.append(_record(rank, name, int(element), want.expected[element], got[element], "checker",
                                 iteration, _options(want.others, int(element))))


def _options(others, element: int) -> list | None:
    for start, stop, options in others:
        if start <= element < stop:
            return sorted({plain(option[element - start]) for option in options}, key=repr)
    return None


def _against_post(out: Comparison, rank: int, name: str, got: np.ndarray, want, iteration: int) -> None:
    failed = want.post_mask & ~same_bits(got, want.post)
    out.post_checked += int(want.post_mask.sum())
    bad = np.flatnonzero(failed)
    out.post_failures += len(bad)
    for element in bad[:max(0, FIRST - len(out.first))]:
        out.first.append(_record(rank, name, int(element), want.post[element], got[element], "postcondition",
                                 iteration, None))


def _signals(out: Comparison, expect: RankExpect, signals: np.ndarray, iteration: int) -> None:
    for word in np.flatnonzero(expect.signals_checked):
        out.checked += 1
        value = int(signals[word])
        if value == int(expect.signals[word]):
            continue
        if value in expect.signal_others.get(int(word), ()):
            out.other_execution += 1
            continue
        out.mismatches += 1
        if len(out.first) < FIRST:
            options = sorted(expect.signal_others[int(word)]) if int(word) in expect.signal_others else None
            out.first.append(_record(expect.rank, None, int(word), expect.signals[word], value, "checker", iteration,
                                     options))


def _record(rank: int, buffer: str | None, element: int, expected, got, against: str, iteration: int,
            options: list | None) -> dict:
    found = {"rank": rank, "buffer": buffer, "element": element, "expected": plain(expected), "got": plain(got),
             "against": against, "iteration": iteration}
    if buffer is None:
        found["signal_word"] = element
    if options:
        found["possible"] = options
    return found


def annotate(ref: Reference, records: list[dict]) -> list[dict]:
    """Add the symbolic expected value (`expected_term`) to mismatch records."""
    for record in records:
        if record["buffer"] is None:
            signal, index = ref.signal_names[record["element"]]
            record["signal"] = f"{signal}[{index}]"
            continue
        record["expected_term"] = expected_mod.symbolic(ref, record["rank"], record["buffer"], record["element"],
                                                        record["against"])
    return records


def describe(record: dict) -> str:
    """One mismatch as a line: where, expected (symbolic = number), got."""
    where = record.get("signal") or f"{record['buffer']}[{record['element']}]"
    term = record.get("expected_term")
    expected = f"{term} = {record['expected']}" if term else str(record["expected"])
    what = "postcondition" if record["against"] == "postcondition" else "expected"
    extra = f" (any of {record['possible']})" if record.get("possible") else ""
    again = f", iteration {record['iteration']}" if record.get("iteration") else ""
    return f"rank {record['rank']}: {where}: {what} {expected}{extra}, got {record['got']}{again}"
