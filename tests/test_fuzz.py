"""The command line's contract under hostile input, as property tests.

Hypothesis drives the generators of scripts/fuzz_cli.py (the same mutation families the fuzz
script runs: mutated protocols, hostile schedule bodies, mutated topology files, hostile options),
one test per (family, kind). Each example runs `clockworks` in a subprocess, in a fresh folder,
bounded in time and memory, and asserts the contract: an exit code in 0-3 that the input allows,
no traceback, no hang, JSON on stdout under --json, and an exit-2 message that names the bad input.

Derandomized, so every run checks the same examples; no shrinking (each example is a subprocess,
and the failure message already holds the exact command, the mutation and the output). Set
CLOCKWORKS_FUZZ_EXAMPLES to run more examples per kind.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent


def _load_fuzz_script():
    spec = importlib.util.spec_from_file_location("fuzz_cli", ROOT / "scripts" / "fuzz_cli.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["fuzz_cli"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


fuzz = _load_fuzz_script()

EXAMPLES = int(os.environ.get("CLOCKWORKS_FUZZ_EXAMPLES", "5"))
CHECK_TIMEOUT = 3.0   # --timeout given to `clockworks check`
CASE_TIMEOUT = 20.0   # a run still going after this is a hang


class DrawChooser(fuzz.Chooser):
    """The generators' choices, drawn by Hypothesis."""

    def __init__(self, draw):
        super().__init__()
        self.draw = draw

    def randint(self, lo: int, hi: int) -> int:
        return self.draw(st.integers(lo, hi))

    def choice(self, options):
        return self.draw(st.sampled_from(list(options)))

    def bytes(self, n: int) -> bytes:
        return self.draw(st.binary(min_size=n, max_size=n))


@st.composite
def cases(draw, family: str, kind: str):
    return fuzz.generate(family, DrawChooser(draw), kind=kind, check_timeout=CHECK_TIMEOUT)


PARAMS = [pytest.param(family, kind, id=f"{family}-{kind}") for family in fuzz.FAMILIES for kind in fuzz.KINDS[family]]


@pytest.mark.parametrize("family,kind", PARAMS)
@settings(derandomize=True, database=None, max_examples=EXAMPLES, deadline=None,
          phases=(Phase.explicit, Phase.generate),
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
@given(data=st.data())
def test_cli_contract(family, kind, data):
    case = data.draw(cases(family, kind), label="case")
    result = fuzz.run_case(case, case_timeout=CASE_TIMEOUT)
    assert result.outcome == "clean", fuzz.describe(result)


# ------------------------------------------------------------------------------ the harness itself
def test_cases_are_deterministic():
    for family in fuzz.FAMILIES:
        for seed in (0, 1, 1_000_017):
            first, again = fuzz.make_case(family, seed), fuzz.make_case(family, seed)
            assert (first.args, first.files, first.mutation, first.expect) == \
                (again.args, again.files, again.mutation, again.expect)
    assert fuzz.plan(8, 3) == [("protocol", 3_000_000), ("body", 3_000_000), ("topology", 3_000_000),
                               ("options", 3_000_000), ("protocol", 3_000_001), ("body", 3_000_001),
                               ("topology", 3_000_001), ("options", 3_000_001)]


def test_every_kind_generates():
    for family in fuzz.FAMILIES:
        for kind in fuzz.KINDS[family]:
            for seed in range(20):
                chooser = fuzz.Chooser(__import__("random").Random(f"{kind}:{seed}"))
                case = fuzz.generate(family, chooser, kind=kind)
                assert case.family == family and case.kind == kind and case.args is not None
                assert set(case.expect) <= set(fuzz.CONTRACT)


def _case(**kw):
    base = dict(family="body", kind="exit", args=["check", "s.py"], files={}, mutation={}, expect=(2,),
                blame=("s.py",))
    base.update(kw)
    return fuzz.Case(**base)


@pytest.mark.parametrize("code,stdout,stderr,expected", [
    (2, "", "clockworks: error: s.py:3: bad", "clean"),
    (2, "", "clockworks: error: bad", "unnamed_file"),
    (0, "", "", "wrong_exit"),
    (130, "", "interrupted", "wrong_exit"),
    (-9, "", "", "wrong_exit"),
    (4, "", "Traceback (most recent call last):\n  ...", "internal_error"),
    (2, "", "Traceback (most recent call last):\n  ... s.py", "traceback"),
    (None, "", "", "hang"),
])
def test_classify(code, stdout, stderr, expected):
    assert fuzz.classify(_case(), code, stdout, stderr)[0] == expected


def test_classify_json():
    case = _case(args=["check", "s.py", "--json"])
    assert fuzz.classify(case, 2, '{"verdict": "error"} s.py', "")[0] == "bad_json"
    assert fuzz.classify(case, 2, '{"verdict": "error", "file": "s.py"}', "")[0] == "clean"
    assert fuzz.classify(case, 2, "[1]", "s.py")[0] == "bad_json"
    assert fuzz.classify(case, 2, "", "s.py: usage")[0] == "bad_json"
