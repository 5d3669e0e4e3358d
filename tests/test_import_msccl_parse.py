"""The MSCCL XML reader: every published file in corpus/msccl parses into what the file says (counted here
independently, with regular expressions), every connection carries as many sends as receives, and every kind of
bad input is a ScheduleError naming the file, the line of the offending element and the offending attribute."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from clockworks_dist.errors import ScheduleError
from clockworks_dist.importers.msccl_xml import (
    KNOWN_IGNORED,
    RECEIVING,
    SENDING,
    STEP_TYPES,
    XmlAlgorithm,
    parse,
    parse_text,
    summary,
)

ROOT = Path(__file__).resolve().parent.parent
CORPUS_DIR = ROOT / "corpus" / "msccl"
CORPUS = sorted(CORPUS_DIR.glob("*.xml"))
IDS = [p.name for p in CORPUS]

# Connections (sender gpu, receiver gpu, channel) that more than one thread block of a gpu uses in the same
# direction. Only one published file does this (and it was removed upstream by the commit after it was added).
SHARED_CONNECTIONS = {
    "msccl_tools_allreduce_ndv2_8gpu_simple.xml": {(6, 2, 0), (7, 3, 0)},
}


def _tags(text: str, tag: str) -> list[str]:
    """The opening tags `<tag ...>` of `text`, comments removed, found without an XML parser."""
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    return re.findall(rf"<{tag}\b[^>]*>", text)


def _attr(tag_text: str, name: str) -> str:
    return re.search(rf'\b{name}="([^"]*)"', tag_text).group(1)


# --- the corpus -----------------------------------------------------------------------------------------------


def test_corpus_is_there_and_listed():
    assert 8 <= len(CORPUS) <= 14
    sources = (CORPUS_DIR / "SOURCES.md").read_text()
    for path in CORPUS:
        assert f"`{path.name}`" in sources, f"{path.name} is not described in SOURCES.md"
    for name in re.findall(r"^\| `([^`]+\.xml)`", sources, flags=re.M):
        assert (CORPUS_DIR / name).is_file(), f"SOURCES.md describes {name}, which is not in the corpus"
    for licence in re.findall(r"`(LICENSE-[a-z-]+\.txt)`", sources):
        assert (CORPUS_DIR / licence).is_file(), f"SOURCES.md names {licence}, which is not in the corpus"


@pytest.mark.parametrize("path", CORPUS, ids=IDS)
def test_corpus_file_parses_into_what_it_says(path: Path):
    text = path.read_text()
    alg = parse(path)
    assert isinstance(alg, XmlAlgorithm) and alg.file == str(path)
    s = summary(alg)

    (algo_tag,) = _tags(text, "algo")
    assert alg.ngpus == int(_attr(algo_tag, "ngpus")) == len(alg.gpus) == s["gpus"] == len(_tags(text, "gpu"))
    assert alg.nchannels == int(_attr(algo_tag, "nchannels"))
    assert alg.proto == _attr(algo_tag, "proto") and alg.coll == _attr(algo_tag, "coll")
    assert s["thread_blocks"] == len(_tags(text, "tb"))
    step_tags = _tags(text, "step")
    assert s["steps"] == len(step_tags)
    assert s["steps_by_type"] == dict(sorted(Counter(_attr(t, "type") for t in step_tags).items()))
    assert s["dependencies"] == sum(int(_attr(t, "depid")) >= 0 for t in step_tags)
    assert s["channels"] == sorted({int(_attr(t, "chan")) for t in _tags(text, "tb")})
    assert all(0 <= c < alg.nchannels for c in s["channels"])

    # Every element's line is the line its opening tag starts on.
    lines = text.splitlines()
    for gpu in alg.gpus:
        assert lines[gpu.line - 1].lstrip().startswith(f'<gpu id="{gpu.id}"')
        for tb in gpu.tbs:
            assert lines[tb.line - 1].lstrip().startswith(f'<tb id="{tb.id}"')
            for st in tb.steps:
                assert lines[st.line - 1].lstrip().startswith(f'<step s="{st.s}"')
    assert lines[alg.line - 1].lstrip().startswith("<algo ")


@pytest.mark.parametrize("path", CORPUS, ids=IDS)
def test_corpus_connections_balance(path: Path):
    """On every (sender, receiver, channel) connection the sending thread blocks send as many times as the
    receiving thread blocks receive, and (where one thread block owns each end) with the same chunk counts in
    the same order."""
    alg = parse(path)
    s = summary(alg)
    assert s["connections"].keys() == s["receives"].keys()
    unbalanced = {k: (n, s["receives"][k]) for k, n in s["connections"].items() if n != s["receives"][k]}
    assert not unbalanced, f"{path.name}: (sends, receives) differ on {unbalanced}"

    sent: dict[tuple, list[list[int]]] = {}
    received: dict[tuple, list[list[int]]] = {}
    for gpu in alg.gpus:
        for tb in gpu.tbs:
            if tb.send >= 0:
                sent.setdefault((gpu.id, tb.send, tb.chan), []).append(
                    [st.cnt for st in tb.steps if st.type in SENDING])
            if tb.recv >= 0:
                received.setdefault((tb.recv, gpu.id, tb.chan), []).append(
                    [st.cnt for st in tb.steps if st.type in RECEIVING])
    shared = {k for k in sent.keys() | received.keys() if len(sent.get(k, [])) > 1 or len(received.get(k, [])) > 1}
    assert shared == SHARED_CONNECTIONS.get(path.name, set())
    for key in sent.keys() & received.keys() - shared:
        assert sent[key] == received[key], f"{path.name}: chunk counts differ on connection {key}"


# --- a small valid file, and the same file broken one way at a time -------------------------------------------

GOOD = """\
<algo name="t" proto="LL" nchannels="1" nchunksperloop="2" ngpus="2" coll="allgather" inplace="0" minBytes="0">
  <gpu id="0" i_chunks="1" o_chunks="2" s_chunks="1">
    <tb id="0" send="1" recv="1" chan="0">
      <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="1"/>
      <step s="1" type="r" srcbuf="i" srcoff="0" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
    <tb id="1" send="-1" recv="-1" chan="0">
      <step s="0" type="nop" depid="0" deps="0" hasdep="0"/>
      <step s="1" type="cpy" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="0" deps="1" hasdep="0"/>
    </tb>
  </gpu>
  <gpu id="1" i_chunks="1" o_chunks="2" s_chunks="0">
    <tb id="0" send="0" recv="0" chan="0">
      <step s="0" type="r" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="1" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
</algo>
"""
NAME = "tiny.xml"


def _broken(old: str, new: str, count: int = 1) -> str:
    """GOOD with its `count`-th occurrence of `old` replaced by `new`."""
    assert GOOD.count(old) >= count, f"{old!r} occurs {GOOD.count(old)} times in GOOD"
    at = -1
    for _ in range(count):
        at = GOOD.index(old, at + 1)
    return GOOD[:at] + new + GOOD[at + len(old):]


def _error(text: str) -> ScheduleError:
    with pytest.raises(ScheduleError) as info:
        parse_text(text, NAME)
    assert info.value.file == NAME
    return info.value


def test_good_file_reads_with_lines():
    alg = parse_text(GOOD, NAME)
    assert (alg.file, alg.name, alg.proto, alg.nchannels, alg.nchunksperloop, alg.ngpus, alg.coll, alg.inplace) == (
        NAME, "t", "LL", 1, 2, 2, "allgather", False)
    assert alg.line == 1 and [g.line for g in alg.gpus] == [2, 12]
    g0 = alg.gpus[0]
    assert (g0.id, g0.i_chunks, g0.o_chunks, g0.s_chunks) == (0, 1, 2, 1)
    assert [tb.line for tb in g0.tbs] == [3, 7]
    assert [st.line for st in g0.tbs[0].steps] == [4, 5]
    nop, cpy = g0.tbs[1].steps
    # A nop's missing buffers, offsets and count read as absent.
    assert (nop.type, nop.srcbuf, nop.srcoff, nop.dstbuf, nop.dstoff, nop.cnt, nop.depid, nop.deps, nop.hasdep) == (
        "nop", "", -1, "", -1, 0, 0, 0, False)
    assert (cpy.line, cpy.depid, cpy.deps) == (9, 0, 1)
    assert g0.tbs[0].steps[0].hasdep is True
    s = summary(alg)
    assert s["gpus"] == 2 and s["thread_blocks"] == 3 and s["steps"] == 6 and s["dependencies"] == 2
    assert s["steps_by_type"] == {"cpy": 1, "nop": 1, "r": 2, "s": 2}
    assert s["connections"] == {(0, 1, 0): 1, (1, 0, 0): 1} == s["receives"]
    assert s["channels"] == [0]


def test_parse_reads_a_path(tmp_path: Path):
    path = tmp_path / "a.xml"
    path.write_text(GOOD)
    assert parse(path).file == str(path)
    assert parse(str(path)).gpus == parse_text(GOOD, NAME).gpus


def test_error_in_a_file_names_its_path(tmp_path: Path):
    path = tmp_path / "bad.xml"
    path.write_text(_broken('cnt="1"', 'cnt="x"'))
    with pytest.raises(ScheduleError) as info:
        parse(path)
    assert (info.value.file, info.value.line) == (str(path), 4)
    assert str(path) in str(info.value)


def test_missing_file():
    with pytest.raises(ScheduleError) as info:
        parse(ROOT / "no-such-algorithm.xml")
    assert info.value.file.endswith("no-such-algorithm.xml")


@pytest.mark.parametrize("text", ["", "  \n\n\t\n"], ids=["empty", "blank"])
def test_empty_file(text: str):
    e = _error(text)
    assert e.line is None and "empty" in e.message


def test_malformed_xml_uses_the_parsers_line():
    assert _error(_broken("</tb>", "</tbx>", count=2)).line == 10
    assert _error(GOOD.replace("</algo>\n", "")).line == 18  # unclosed: the line after the last
    assert _error(_broken('s="1" type="r"', 's="1 type="r"')).line == 5


@pytest.mark.parametrize("old,new,line,attribute", [
    ('<algo name="t" ', "<algo ", 1, "name"),
    ('proto="LL" ', "", 1, "proto"),
    ('nchunksperloop="2" ', "", 1, "nchunksperloop"),
    ('inplace="0" ', "", 1, "inplace"),
    ('<gpu id="1" ', "<gpu ", 12, "id"),
    ('i_chunks="1" ', "", 2, "i_chunks"),
    (' s_chunks="1"', "", 2, "s_chunks"),
    ('<tb id="1" ', "<tb ", 7, "id"),
    ('recv="1" ', "", 3, "recv"),
    (' chan="0"', "", 3, "chan"),
    ('type="s" ', "", 4, "type"),
    ('srcbuf="i" ', "", 4, "srcbuf"),  # a send reads its source
    ('dstoff="1" ', "", 5, "dstoff"),  # a receive writes its destination
    ('cnt="1" ', "", 4, "cnt"),
    ('depid="0" ', "", 8, "depid"),
    ('deps="-1" ', "", 4, "deps"),
    (' hasdep="0"', "", 5, "hasdep"),
])
def test_missing_attribute(old: str, new: str, line: int, attribute: str):
    e = _error(_broken(old, new))
    assert e.line == line
    assert repr(attribute) in e.message and "lacks" in e.message


def test_nop_and_unused_sides_may_leave_buffers_out():
    """The kernel reads a send's source and writes a receive's destination only: the other side may be absent."""
    text = _broken('type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0"', 'type="s" srcbuf="i" srcoff="0"')
    text = text.replace('type="r" srcbuf="i" srcoff="0" dstbuf="o" dstoff="1"', 'type="r" dstbuf="o" dstoff="1"', 1)
    step_s, step_r = parse_text(text, NAME).gpus[0].tbs[0].steps
    assert (step_s.dstbuf, step_s.dstoff, step_r.srcbuf, step_r.srcoff) == ("", -1, "", -1)


@pytest.mark.parametrize("old,new,line,attribute", [
    ('cnt="1"', 'cnt="one"', 4, "cnt"),
    ('ngpus="2"', 'ngpus="2.0"', 1, "ngpus"),
    ('<gpu id="1"', '<gpu id=""', 12, "id"),
    ('chan="0"', 'chan="0x1"', 3, "chan"),
    ('deps="0"', 'deps="zero"', 8, "deps"),
    ('srcoff="0"', 'srcoff="1e0"', 4, "srcoff"),
    ('s_chunks="0"', 's_chunks="-3"', 12, "s_chunks"),
    ('hasdep="1"', 'hasdep="2"', 4, "hasdep"),
    ('inplace="0"', 'inplace="yes"', 1, "inplace"),
])
def test_bad_number(old: str, new: str, line: int, attribute: str):
    e = _error(_broken(old, new))
    assert e.line == line and repr(attribute) in e.message


def test_unknown_step_type_lists_the_known_ones():
    e = _error(_broken('type="cpy"', 'type="copy"'))
    assert e.line == 9 and "'copy'" in e.message and "'type'" in e.message
    assert all(t in e.hint for t in STEP_TYPES)


def test_unknown_buffer_and_protocol():
    e = _error(_broken('dstbuf="o" dstoff="1"', 'dstbuf="x" dstoff="1"'))
    assert e.line == 5 and "'dstbuf'" in e.message
    e = _error(_broken('proto="LL"', 'proto="LL64"'))
    assert e.line == 1 and "'proto'" in e.message and "LL128" in e.hint


def test_unknown_element_and_misplaced_element():
    e = _error(_broken("    </tb>\n", '      <barrier id="0"/>\n    </tb>\n'))
    assert e.line == 6 and "<barrier>" in e.message
    stray_step = '    <step s="0" type="nop" depid="-1" deps="-1" hasdep="0"/>\n'
    e = _error(_broken('    <tb id="1"', stray_step + '    <tb id="1"'))
    assert e.line == 7 and "<step>" in e.message and "<gpu>" in e.message


def test_stray_text():
    e = _error(_broken("    </tb>\n", "      hello\n    </tb>\n"))
    assert e.line == 6 and "hello" in e.message


def test_unknown_attribute_is_named_and_known_metadata_is_not():
    e = _error(_broken('<tb id="1"', '<tb colour="red" id="1"'))
    assert e.line == 7 and "'colour'" in e.message and "<tb>" in e.message
    e = _error(_broken('hasdep="0"', 'hasdep="0" redop="sum"', count=2))
    assert e.line == 8 and "'redop'" in e.message
    # outofplace, minBytes, maxBytes describe when the runtime picks the algorithm, not what it sends.
    assert {"outofplace", "minBytes", "maxBytes"} <= KNOWN_IGNORED["algo"]
    parse_text(_broken('inplace="0"', 'inplace="0" outofplace="1" maxBytes="65536"'), NAME)
    e = _error(_broken('<gpu id="1"', '<gpu minBytes="0" id="1"'))  # metadata of <algo> only
    assert e.line == 12 and "'minBytes'" in e.message


@pytest.mark.parametrize("old,new,line,word", [
    ('send="1" recv="1"', 'send="2" recv="1"', 3, "send peer 2"),
    ('send="0" recv="0"', 'send="0" recv="7"', 13, "recv peer 7"),
    ('send="-1" recv="-1"', 'send="-1" recv="-2"', 7, "'recv'"),
    ('send="1" recv="1"', 'send="0" recv="1"', 3, "itself"),
])
def test_peer_out_of_range(old: str, new: str, line: int, word: str):
    e = _error(_broken(old, new))
    assert e.line == line and word in e.message


def test_channel_out_of_range():
    e = _error(_broken('chan="0"', 'chan="1"', count=3))
    assert e.line == 13 and "channel 1" in e.message


def test_duplicate_ids():
    e = _error(_broken('<gpu id="1"', '<gpu id="0"'))
    assert e.line == 12 and "duplicate <gpu id=0>" in e.message and "line 2" in e.message
    e = _error(_broken('<tb id="1"', '<tb id="0"'))
    assert e.line == 7 and "duplicate <tb id=0>" in e.message


def test_thread_block_ids_leave_no_gap():
    e = _error(_broken('<tb id="1"', '<tb id="2"'))
    assert e.line == 7 and "gap" in e.message


def test_gpu_count_differs_from_ngpus():
    e = _error(_broken('ngpus="2"', 'ngpus="3"'))
    assert e.line == 1 and "ngpus=3" in e.message and "2 <gpu>" in e.message
    e = _error(_broken('ngpus="2"', 'ngpus="1"'))
    assert e.line == 1 and "ngpus=1" in e.message


def test_gpu_id_out_of_range():
    e = _error(_broken('<gpu id="1"', '<gpu id="5"'))
    assert e.line == 12 and "out of range" in e.message


@pytest.mark.parametrize("old,new,line", [
    ('<step s="1" type="r"', '<step s="2" type="r"', 5),
    ('<step s="0" type="nop"', '<step s="1" type="nop"', 8),
    ('<step s="0" type="r"', '<step s="1" type="r"', 14),
])
def test_steps_out_of_order(old: str, new: str, line: int):
    e = _error(_broken(old, new))
    assert e.line == line and "out of order" in e.message


def test_dependency_on_a_missing_thread_block():
    e = _error(_broken('depid="0" deps="1"', 'depid="3" deps="1"'))
    assert e.line == 9 and "depid=3" in e.message and "no thread block" in e.message


def test_dependency_beyond_the_steps():
    e = _error(_broken('depid="0" deps="1"', 'depid="0" deps="2"'))
    assert e.line == 9 and "deps=2" in e.message and "2 step(s)" in e.message
    e = _error(_broken('depid="0" deps="0"', 'depid="0" deps="-1"'))
    assert e.line == 8 and "disagree" in e.message


@pytest.mark.parametrize("old,new,line,words", [
    ('type="s" srcbuf="i" srcoff="0"', 'type="s" srcbuf="i" srcoff="1"', 4, ("srcoff=1", "i_chunks")),
    ('dstbuf="o" dstoff="1" cnt="1"', 'dstbuf="o" dstoff="1" cnt="2"', 5, ("dstoff=1", "o_chunks")),
    ('type="cpy" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0"', 'type="cpy" srcbuf="i" srcoff="0" dstbuf="s" dstoff="1"',
     9, ("dstoff=1", "s_chunks=1")),
    ('type="r" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0"', 'type="r" srcbuf="i" srcoff="0" dstbuf="s" dstoff="0"',
     14, ("s_chunks=0",)),
])
def test_offset_beyond_the_buffer(old: str, new: str, line: int, words: tuple[str, ...]):
    e = _error(_broken(old, new))
    assert e.line == line and all(w in e.message for w in words)


def test_unused_side_is_not_bounds_checked():
    """A send's destination names the peer's buffer, which the sending kernel never touches."""
    text = _broken('dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="1"',
                   'dstbuf="s" dstoff="9" cnt="1" depid="-1" deps="-1" hasdep="1"')
    assert parse_text(text, NAME).gpus[0].tbs[0].steps[0].dstoff == 9


def test_send_without_a_send_peer():
    e = _error(_broken('type="cpy"', 'type="s"'))
    assert e.line == 9 and "no send peer" in e.message
    e = _error(_broken('type="cpy"', 'type="rrc"'))
    assert e.line == 9 and "no receive peer" in e.message


def test_doctype_and_entities_are_refused():
    laughs = ('<?xml version="1.0"?>\n<!DOCTYPE algo [\n  <!ENTITY a "aaaaaaaaaa">\n  <!ENTITY b "&a;&a;&a;&a;">\n]>\n'
              + GOOD.replace('name="t"', 'name="&b;"'))
    e = _error(laughs)
    assert e.line == 2 and "DOCTYPE" in e.message
    e = _error('<?xml version="1.0"?>\n<!DOCTYPE algo SYSTEM "http://example.invalid/algo.dtd">\n' + GOOD)
    assert e.line == 2
    e = _error('<!ENTITY a "x">\n' + GOOD)  # outside a DOCTYPE: not XML at all
    assert e.line == 1


def test_comments_and_declaration_are_fine():
    text = '<?xml version="1.0" encoding="utf-8"?>\n<!-- Copyright notice -->\n' + GOOD
    assert parse_text(text, NAME).gpus[1].line == 14
