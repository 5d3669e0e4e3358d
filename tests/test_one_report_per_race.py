"""One report per race, whatever bound stopped the search (issue 28): a race the search reports as a
`data_race` never comes back as `symbolic_size` errors, at the traced size or with --max-states at
any value; a size error is left only for a failure the search cannot see (another size)."""

from __future__ import annotations

import collections
import json
import textwrap

import pytest

import clockworks_dist as cw
from clockworks_dist import cli, load_file
from clockworks_dist.check import check

# Every rank puts its x into its neighbour's s and copies s back, twice: three data races on s at
# every CHUNK (the traced 4 included), and tens of thousands of states.
RACES = textwrap.dedent('''
    import clockworks_dist as cw

    CHUNK = cw.size("CHUNK", 4)


    @cw.schedule(ranks=(4,))
    def puts_and_copies(r):
        s = r.symmetric("s", count=CHUNK, role="output")
        x = r.buffer("x", count=CHUNK, role="input")
        for _ in range(2):
            r.put((r.rank + 1) % r.world, s, x)
            r.copy(x, s)
''')

CHUNK = cw.size("CHUNK", 4)


@pytest.fixture
def races(tmp_path):
    path = tmp_path / "races.py"
    path.write_text(RACES)
    return path


@pytest.mark.parametrize("max_states", [20, 50, 200, 1000, 5000])
def test_a_race_the_search_reports_is_not_reported_again_as_a_size_error(races, max_states):
    result = check(load_file(str(races))[0].trace(4), max_states=max_states, timeout=120)
    kinds = collections.Counter(v.kind for v in result.violations)
    assert result.verdict == "violated" and result.stopped_by == "max_states"
    assert kinds["data_race"] == 3 and kinds["symbolic_size"] == 0, kinds
    races_by_ops = [tuple(sorted((o.rank, o.index) for o in v.ops)) for v in result.violations
                    if v.kind == "data_race"]
    assert len(set(races_by_ops)) == len(races_by_ops)


@pytest.mark.parametrize("size", [[], ["--size", "CHUNK=4"], ["--size", "CHUNK=8"]])
@pytest.mark.parametrize("max_states", ["30", "300", "3000"])
def test_the_cli_reports_each_race_once_at_the_traced_size(capsys, races, size, max_states):
    code = cli.main(["check", str(races), "--json", "--max-states", max_states, *size])
    report = json.loads(capsys.readouterr().out)
    kinds = collections.Counter(v["kind"] for v in report["violations"])
    assert code == 1 and kinds["data_race"] == 3 and kinds["symbolic_size"] == 0, kinds
    assert not any("every admissible" in v["message"] for v in report["violations"])


def overlap_at_seven_only(r):
    # x[0:CHUNK] and x[6:CHUNK + 6] are disjoint while CHUNK <= 6: fine as traced, not at CHUNK = 7,
    # which the search of the traced instance cannot see: the size check reports it, with any bound.
    x = r.buffer("x", count=CHUNK + 8)
    if r.rank == 0:
        with r.group():
            r.recv(1, x.region(0, CHUNK))
            r.recv(2, x.region(6, CHUNK + 6))
    else:
        r.send(0, x.region(0, CHUNK))


@pytest.mark.parametrize("max_states", [None, 1, 2])
def test_a_failure_at_another_size_is_still_a_size_error(max_states):
    result = check(cw.schedule(overlap_at_seven_only).trace(3), max_states=max_states)
    [v] = [v for v in result.violations if v.kind == "symbolic_size"]
    assert result.verdict == "violated" and v.details["valuation"] == {"CHUNK": 7}
    assert not any(v.kind == "data_race" for v in result.violations)
