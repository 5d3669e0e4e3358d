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
    assert fuzz.plan(11, 3) == [("protocol", 3_000_000), ("body", 3_000_000), ("topology", 3_000_000),
                                ("options", 3_000_000), ("topology_type", 3_000_000), ("degenerate", 3_000_000),
                                ("source", 3_000_000), ("callable", 3_000_000), ("edges", 3_000_000),
                                ("protocol", 3_000_001), ("body", 3_000_001)]


def test_the_registry_can_be_extended():
    """Another module adds families the way fuzz_production does: FAMILIES, KINDS and GENERATORS."""
    assert set(fuzz.FAMILIES) <= set(fuzz.KINDS) == set(fuzz.GENERATORS)
    assert {"topology_type", "degenerate", "source", "callable", "edges"} <= set(fuzz.FAMILIES)


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
    (0, "", "", "wrong_verdict"),
    (1, "", "", "wrong_verdict"),
    (3, "", "", "wrong_exit"),
    (130, "", "interrupted", "wrong_exit"),
    (-9, "", "", "wrong_exit"),
    (4, "", "Traceback (most recent call last):\n  ...", "internal_error"),
    (2, "", "Traceback (most recent call last):\n  ... s.py", "traceback"),
    (None, "", "", "hang"),
])
def test_classify(code, stdout, stderr, expected):
    assert fuzz.classify(_case(), code, stdout, stderr)[0] == expected


def test_classify_leftovers_and_outside_writes():
    case = _case(expect=fuzz.CONTRACT)
    assert fuzz.classify(case, 0, "", "", extra=[("leftover_process", "1 process")])[0] == "leftover_process"
    assert fuzz.classify(case, 0, "", "", extra=[("outside_write", "created x")])[0] == "outside_write"
    assert fuzz.classify(case, 4, "", "", extra=[("outside_write", "created x")])[0] == "internal_error"


def _hostile(statement: str) -> fuzz.Case:
    source = fuzz.schedule_source(prelude=statement)
    return fuzz.Case("body", "hostile", ["show", fuzz.BODY_FILE, "--timeout", "5"],
                     {fuzz.BODY_FILE: source.encode()}, {}, fuzz.CONTRACT, (fuzz.BODY_FILE,))


def test_the_runner_sees_a_process_left_behind():
    """A schedule that starts a process in its own session, which outlives the command: found by the
    token in its environment, reported, and killed."""
    case = _hostile("import subprocess\n_p = subprocess.Popen(['sleep', '60'], start_new_session=True,\n"
                    "    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)")
    result = fuzz.run_case(case, case_timeout=CASE_TIMEOUT)
    assert result.outcome == "leftover_process", fuzz.describe(result)


def test_the_runner_sees_a_write_outside_the_case_folder():
    case = _hostile("with open(os.path.join(os.path.dirname(os.getcwd()), 'leak.txt'), 'w') as _f:\n"
                    "    _f.write('x')")
    result = fuzz.run_case(case, case_timeout=CASE_TIMEOUT)
    assert result.outcome == "outside_write", fuzz.describe(result)
    assert "leak.txt" in " ".join(text for _, text in result.problems)


def test_the_case_gets_its_own_home_and_tmpdir():
    case = _hostile("import tempfile\nwith open(os.path.expanduser('~/x'), 'w') as _f, "
                    "tempfile.NamedTemporaryFile(delete=False) as _t:\n    _f.write('x')")
    result = fuzz.run_case(case, case_timeout=CASE_TIMEOUT)
    assert result.outcome == "clean", fuzz.describe(result)


def test_classify_json():
    case = _case(args=["check", "s.py", "--json"])
    assert fuzz.classify(case, 2, '{"verdict": "error"} s.py', "")[0] == "bad_json"
    assert fuzz.classify(case, 2, '{"verdict": "error", "file": "s.py"}', "")[0] == "clean"
    assert fuzz.classify(case, 2, "[1]", "s.py")[0] == "bad_json"
    assert fuzz.classify(case, 2, "", "s.py: usage")[0] == "bad_json"
