"""Calls without end (`check.unbounded`): a library's calls proven safe however many run, from a few.

The proof explores K calls of the periodic model (`lowering.repeat.periodic_caller`) and shows that
every state of a later call is, shifted back, a state of the first period's; these tests check that it
proves the library's winners, that it stays silent (never "verified") where it cannot show that, and
that its canonical states do not depend on how many calls were explored."""

from __future__ import annotations

import pytest

from clockworks_dist import ir
from clockworks_dist.check.unbounded import _Proof, check_unbounded
from clockworks_dist.dsl import load_file
from clockworks_dist.lowering import Build, lower
from clockworks_dist.lowering.repeat import RepeatError, periodic_caller
from clockworks_dist.semantics.budget import Deadline

from test_packets import family


def _maker(sched: ir.Schedule, between: str, packets: int = 0):
    def make(k: int):
        lowered = lower(sched, Build("nvshmem", k, between, packets=packets))
        return periodic_caller(lowered.sched, lowered.kernel_starts or {}, k, sched, between)
    return make


@pytest.mark.parametrize("algo,ranks,between,packets", [
    ("oneshot", 2, "alternate", 32768), ("oneshot", 2, "alternate", 0), ("twoshot", 2, "none", 0)])
def test_the_all_reduce_familys_winners_are_safe_for_any_number_of_calls(algo, ranks, between, packets):
    result = check_unbounded(_maker(family(algo, ranks), between, packets), 2 if between == "alternate" else 1,
                             timeout=120)
    assert result.verified, result.reason
    assert result.calls >= (4 if between == "alternate" else 3) and result.states > 0


def test_a_proof_stopped_by_its_time_says_incomplete_and_never_verified():
    # every state of 4 calls at 4 ranks, with no reduction, is more than a few seconds' work
    result = check_unbounded(_maker(family("oneshot", 4), "alternate"), 2, timeout=3)
    assert not result.verified and result.reason.startswith("incomplete")


def test_a_separator_that_lets_calls_collide_is_not_proven():
    # nothing between one-shot calls: a fast rank's next flag overwrites the one its peer still waits for
    result = check_unbounded(_maker(family("oneshot", 2), "none", 32768), 1, timeout=60)
    assert not result.verified and "deadlock" in result.reason


PRODUCER = """
import clockworks_dist as cw

@cw.schedule(ranks=(2,))
def producer(r):
    ready = r.signal("ready", count=1)
    if r.rank == 0:
        r.signal_op(1, ready[0], 1, "add")
    else:
        r.wait_until(ready[0], "ge", 1)
"""


def test_a_rank_that_never_waits_runs_ahead_without_bound_and_is_not_proven(tmp_path):
    """Rank 0 only signals: it can finish every call while rank 1 is still in its first, so no number
    of calls explored is a period the later calls repeat. Nothing goes wrong in K calls, but the
    proof says it could not show any number is safe, and never says verified."""
    path = tmp_path / "producer.py"
    path.write_text(PRODUCER)
    sched = load_file(str(path))[0].trace(2)
    result = check_unbounded(_maker(sched, "none"), 1, timeout=60, max_calls=5)
    assert not result.verified and result.reason.startswith("more calls needed")


def test_calls_that_are_not_periodic_are_refused():
    sched = family("twoshot", 2)
    lowered = lower(sched, Build("nvshmem", 3, "none"))
    program = lowered.sched.programs[0]
    last = lowered.kernel_starts[0][-1]
    wait = next(m for m in range(last, len(program.ops)) if program.ops[m].kind == "wait_until")
    ops = list(program.ops)
    ops[wait] = ops[wait].model_copy(update={"value": ops[wait].value + 1})  # call 2's wait one off its epoch
    broken = lowered.sched.model_copy(update={"programs": (program.model_copy(update={"ops": tuple(ops)}),
                                                           *lowered.sched.programs[1:])})
    with pytest.raises(RepeatError, match="not periodic"):
        periodic_caller(broken, lowered.kernel_starts, 3, sched, "none")


def test_the_canonical_states_do_not_depend_on_how_many_calls_were_explored():
    """The states that need no shift, in canonical form, are the same whether 3 or 5 calls were
    explored: what the proof compares later calls with is the first call's own."""
    forms = []
    for k in (3, 5):
        proof = _Proof(_maker(family("twoshot", 2), "none")(k), Deadline(60), 100_000)
        found = set()
        original = proof.canonical

        def keep(state, b, original=original, found=found):
            form = original(state, b)
            if b == 0:
                found.add(form)
            return form

        proof.canonical = keep
        reason, _states = proof.run()
        assert reason is None
        forms.append(found)
    assert forms[0] == forms[1] and len(forms[0]) > 10
