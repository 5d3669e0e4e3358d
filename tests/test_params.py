"""Schedule parameters (`cw.param`, `cw.choice`): a schedule file describes a family of variants."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

import clockworks_dist as cw
from clockworks_dist import cli, ir, load_file
from clockworks_dist.dsl import params

ROOT = Path(__file__).resolve().parent.parent
FAMILY = str(ROOT / "protocols" / "nvshmem_allreduce_family.py")

# Line 5 declares BLOCKS, line 6 ALGO; the schedule's buffer has BLOCKS * 2 elements, and ALGO
# picks a tree of sends or a plain all-reduce.
BODY = """
import clockworks_dist as cw

CHUNK = cw.size("CHUNK", 4)
BLOCKS = cw.param("BLOCKS", [8, 16, 32])
ALGO = cw.choice("ALGO", ["flat", "ring"])


@cw.schedule(expect=cw.allreduce("x"))
def fam(r):
    x = r.buffer("x", count=BLOCKS * 2, role="input")
    if ALGO == "flat":
        r.all_reduce(x)
    else:
        r.all_reduce(x.chunk(0, 2))
        r.all_reduce(x.chunk(1, 2))
"""


def write(tmp_path: Path, body: str, name: str = "fam.py") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body).lstrip())
    return str(path)


def load_one(tmp_path: Path, body: str = BODY):
    [defn] = load_file(write(tmp_path, body))
    return defn


def test_binding_picks_the_variant_and_is_recorded(tmp_path):
    defn = load_one(tmp_path)
    default = defn.trace(2)
    assert default.params == (("BLOCKS", 8), ("ALGO", "flat"))
    assert default.programs[0].buffers[0].count == 16
    assert len(default.programs[0].ops) == 1
    bound = defn.trace(2, params={"BLOCKS": 32, "ALGO": "ring"})
    assert bound.params == (("BLOCKS", 32), ("ALGO", "ring"))
    assert bound.programs[0].buffers[0].count == 64
    assert len(bound.programs[0].ops) == 2
    assert ir.Schedule.from_json(bound.to_json()) == bound  # the JSON round trip keeps the binding


def test_a_parameter_reads_as_its_default_outside_a_trace():
    blocks = cw.param("BLOCKS", [16, 32])
    algo = cw.choice("ALGO", ["oneshot", "twoshot"], default="twoshot")
    assert blocks == 16 and blocks * 2 == 32 and list(range(blocks))[-1] == 15 and 40 // blocks == 2
    assert algo == "twoshot" and algo != "oneshot" and str(algo) == "twoshot"


def test_variants_are_the_product_in_declaration_order(tmp_path):
    defn = load_one(tmp_path)
    assert [p.name for p in defn.params] == ["BLOCKS", "ALGO"]
    assert defn.variants() == [{"BLOCKS": b, "ALGO": a} for b in (8, 16, 32) for a in ("flat", "ring")]
    [ring] = load_file(str(ROOT / "protocols" / "ring_allreduce.py"))
    assert ring.variants() == [{}]  # no parameters: one variant, the schedule itself


def test_explicit_params_list_is_accepted(tmp_path):
    defn = load_one(tmp_path, BODY.replace("@cw.schedule(expect=cw.allreduce(\"x\"))",
                                           "@cw.schedule(expect=cw.allreduce(\"x\"), params=[ALGO, BLOCKS])"))
    assert [p.name for p in defn.params] == ["ALGO", "BLOCKS"]


def test_unknown_parameter_names_the_declared_ones(tmp_path):
    defn = load_one(tmp_path)
    with pytest.raises(cw.ScheduleError) as info:
        defn.trace(2, params={"BLOCK": 8})
    err = info.value
    assert "unknown parameter 'BLOCK'" in err.message and "BLOCKS in [8, 16, 32]" in err.message
    assert "did you mean BLOCKS?" in err.message
    assert err.hint == "bind a declared parameter, e.g. --param BLOCKS=8"


def test_value_not_declared_names_the_allowed_ones_and_the_declaration(tmp_path):
    defn = load_one(tmp_path)
    with pytest.raises(cw.ScheduleError) as info:
        defn.trace(2, params={"BLOCKS": 12})
    assert (info.value.file, info.value.line) == ("fam.py", 4)
    assert info.value.message == "parameter BLOCKS = 12 is not one of its values [8, 16, 32]"
    assert info.value.hint == "bind one of them, e.g. --param BLOCKS=8"
    with pytest.raises(cw.ScheduleError) as info:
        defn.trace(2, params={"ALGO": "rign"})
    assert (info.value.file, info.value.line) == ("fam.py", 5)
    assert "'rign' is not one of its options ['flat', 'ring'] (did you mean 'ring'?)" in info.value.message
    assert defn.trace(2, params={"BLOCKS": "16"}).params[0] == ("BLOCKS", 16)  # --param's text


@pytest.mark.parametrize("declaration, message", [
    ('cw.param("BLOCKS", [8, 2.5])', "BLOCKS's values must be integers, got float 2.5"),
    ('cw.param("BLOCKS", [])', "BLOCKS lists no values"),
    ('cw.param("BLOCKS", 8)', "BLOCKS's values must be a list of integers, got int 8"),
    ('cw.param("BLOCKS", [8, 8])', "BLOCKS lists a value twice: [8, 8]"),
    ('cw.param("BLOCKS", [8, 16], default=4)', "BLOCKS's default 4 is not one of its values [8, 16]"),
    ('cw.param("BLOCKS", [True, 2])', "BLOCKS's values must be integers, got bool True"),
    ('cw.choice("ALGO", "oneshot")', "ALGO's options must be a list of strings, got str 'oneshot'"),
    ('cw.choice("ALGO", ["one-shot"])', "ALGO's option 'one-shot' is not a valid identifier"),
    ('cw.choice("ALGO", ["a", "b"], default="c")', "ALGO's default 'c' is not one of its options ['a', 'b']"),
    ('cw.param("2x", [1])', "parameter name '2x' is not a valid identifier"),
])
def test_declaration_mistakes_name_the_users_line(tmp_path, declaration, message):
    path = write(tmp_path, f"import clockworks_dist as cw\n\nX = {declaration}\n", "bad.py")
    with pytest.raises(cw.ScheduleError) as info:
        load_file(path)
    assert (info.value.file, info.value.line) == ("bad.py", 3)
    assert message in info.value.message


def test_comparing_a_choice_with_an_undeclared_option_is_an_error_at_that_line(tmp_path):
    defn = load_one(tmp_path, BODY.replace('if ALGO == "flat":', 'if ALGO == "falt":'))
    with pytest.raises(cw.ScheduleError) as info:
        defn.trace(2)
    assert (info.value.file, info.value.line) == ("fam.py", 11)
    assert "ALGO is compared with 'falt', which is not one of its options ['flat', 'ring']" in info.value.message
    assert "did you mean 'flat'?" in info.value.message


def test_a_parameter_the_decorator_cannot_see_is_an_error(tmp_path):
    body = """
    import clockworks_dist as cw


    @cw.schedule(expect=cw.allreduce("x"))
    def hidden(r):
        blocks = cw.param("BLOCKS", [8, 16])
        r.all_reduce(r.buffer("x", count=blocks, role="input"))
    """
    defn = load_one(tmp_path, body)
    assert defn.params == ()
    with pytest.raises(cw.ScheduleError) as info:
        defn.trace(2)
    assert "parameter BLOCKS is used, but the schedule does not declare it" in info.value.message
    assert info.value.file == "fam.py" and info.value.line == 7


def test_bind_sets_the_binding_of_traces_without_params(tmp_path):
    defn = load_one(tmp_path)
    with params.bind({"ALGO": "ring"}):
        assert defn.trace(2).params == (("BLOCKS", 8), ("ALGO", "ring"))
        assert defn.trace(2, params={"BLOCKS": 16}).params == (("BLOCKS", 16), ("ALGO", "ring"))
    assert defn.trace(2).params == (("BLOCKS", 8), ("ALGO", "flat"))


# ------------------------------------------------------------------------------------- the CLI
def test_cli_param_binds_check_and_show(tmp_path, capsys):
    path = write(tmp_path, BODY)
    assert cli.main(["show", path, "--ranks", "2", "--json", "--param", "ALGO=ring", "--param", "BLOCKS=32"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["params"] == [["BLOCKS", 32], ["ALGO", "ring"]]
    assert cli.main(["show", path, "--ranks", "2", "--param", "ALGO=ring"]) == 0
    listing = capsys.readouterr().out.splitlines()
    start = listing.index("variant:")
    assert listing[start + 1:start + 3] == ["  BLOCKS = 8  (set with --param BLOCKS=VALUE)",
                                            "  ALGO = ring  (set with --param ALGO=VALUE)"]
    assert cli.main(["check", FAMILY, "--ranks", "2", "4", "--param", "ALGO=twoshot", "--json"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert results["verdict"] == "verified" and len(results["results"]) == 2


def test_cli_param_errors_are_bad_input(tmp_path, capsys):
    assert cli.main(["check", FAMILY, "--ranks", "2", "--param", "ALGO=threeshot"]) == 2
    err = capsys.readouterr().err
    assert "nvshmem_allreduce_family.py:17" in err and "'threeshot' is not one of its options" in err
    assert cli.main(["check", FAMILY, "--ranks", "2", "--param", "ALGO"]) == 2
    assert "expected NAME=VALUE" in capsys.readouterr().err


def test_cli_param_reaches_predict_and_codegen(tmp_path, capsys):
    args = ["predict", FAMILY, "-t", "h200x2-nv18", "--ranks", "2", "--sizes", "8KiB", "--json"]
    assert cli.main(args + ["--param", "ALGO=oneshot"]) == 0
    oneshot = json.loads(capsys.readouterr().out)
    assert cli.main(args + ["--param", "ALGO=twoshot"]) == 0
    twoshot = json.loads(capsys.readouterr().out)
    assert json.dumps(oneshot) != json.dumps(twoshot)
    out = tmp_path / "cu"
    assert cli.main(["codegen", FAMILY, "--backend", "nvshmem", "--np", "2", "-o", str(out),
                     "--param", "ALGO=twoshot"]) == 0
    text = (out / "nvshmem_allreduce_family_nvshmem_2.cu").read_text()
    assert "ag" in text and "ready" not in text


@pytest.mark.parametrize("algo", ["oneshot", "twoshot"])
@pytest.mark.parametrize("world", [2, 4, 8])
def test_every_variant_of_the_family_protocol_is_verified(algo, world):
    [defn] = load_file(FAMILY)
    result = cw.check(defn.trace(world, params={"ALGO": algo}), timeout=60)
    assert result.verdict == "verified" and result.complete
