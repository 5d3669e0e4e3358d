"""Read an MSCCL XML algorithm file into frozen dataclasses that remember each element's source line.

MSCCL algorithms (written by msccl-tools, executed by RCCL and by NCCL's MSCCL executor) are XML documents of
four nested elements::

    <algo name proto nchannels nchunksperloop ngpus coll inplace [outofplace minBytes maxBytes]>
      <gpu id i_chunks o_chunks s_chunks>
        <tb id send recv chan>
          <step s type srcbuf srcoff dstbuf dstoff cnt depid deps hasdep/>

A thread block (`tb`) owns at most one send connection (to gpu `send`) and one receive connection (from gpu
`recv`) on channel `chan`, and runs its steps in order. Offsets and counts are in chunks of the buffer named by
`srcbuf`/`dstbuf`: `i` (input), `o` (output) or `s` (scratch), of `i_chunks`/`o_chunks`/`s_chunks` chunks.
A step waits for step `deps` of thread block `depid` on the same gpu (`-1`: no wait); a step that another thread
block waits for says `hasdep="1"` so that it signals when done. A step can name one dependency only, so a step
with several is preceded by `nop` steps that each carry one of the extra dependencies.

The executors check little and fail late (a hang or garbage on the GPU), so this reader checks what the file
can state wrongly and reports it as a `ScheduleError` with the file, the line of the offending element and a
hint. It uses the standard library's expat parser only, and refuses document type declarations and entity
declarations, which no algorithm file needs and which are the way to make an XML parser expand text without
bound.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass
from xml.parsers import expat

from clockworks_dist.errors import ScheduleError

# Step types the executors accept (RCCL and NCCL-MSCCL compare these exact strings), with what each does.
STEP_TYPES: dict[str, str] = {
    "s": "send",
    "r": "receive",
    "rcs": "receive, copy and send on",
    "rrc": "receive, reduce with a local chunk and store",
    "rrs": "receive, reduce with a local chunk and send on",
    "rrcs": "receive, reduce with a local chunk, store and send on",
    "cpy": "local copy",
    "re": "local reduce",
    "nop": "no operation (carries an extra dependency)",
}
# Step types that put data on the thread block's send connection / take data off its receive connection.
SENDING = frozenset({"s", "rcs", "rrs", "rrcs"})
RECEIVING = frozenset({"r", "rcs", "rrc", "rrs", "rrcs"})
# Step types whose source / destination chunks are local memory the kernel reads / writes. The other side is
# not touched by the kernel: a send's destination and a receive's source describe the peer's buffer.
READS_SRC = frozenset({"s", "rrs", "rrcs", "rrc", "cpy", "re"})
WRITES_DST = frozenset({"r", "rcs", "rrcs", "rrc", "cpy", "re"})

BUFFERS: dict[str, str] = {"i": "i_chunks", "o": "o_chunks", "s": "s_chunks"}
PROTOCOLS = ("Simple", "LL", "LL128")

# The attributes each element is read for.
ATTRIBUTES: dict[str, frozenset[str]] = {
    "algo": frozenset({"name", "proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace"}),
    "gpu": frozenset({"id", "i_chunks", "o_chunks", "s_chunks"}),
    "tb": frozenset({"id", "send", "recv", "chan"}),
    "step": frozenset({"s", "type", "srcbuf", "srcoff", "dstbuf", "dstoff", "cnt", "depid", "deps", "hasdep"}),
}
# Attributes that real files carry and that do not change what the algorithm communicates: which call shapes
# (in place or not) and message sizes the runtime selects the algorithm for. Accepted and not recorded.
KNOWN_IGNORED: dict[str, frozenset[str]] = {
    "algo": frozenset({"outofplace", "minBytes", "maxBytes"}),
}
# Where each element may appear.
PARENT: dict[str, str | None] = {"algo": None, "gpu": "algo", "tb": "gpu", "step": "tb"}

_INT = re.compile(r"-?[0-9]+")


@dataclass(frozen=True)
class XmlStep:
    """One `<step>`: an instruction of a thread block."""

    s: int  # step index within its thread block
    type: str  # a key of STEP_TYPES
    srcbuf: str  # "i", "o", "s"; "" if absent
    srcoff: int  # -1 if absent
    dstbuf: str
    dstoff: int
    cnt: int  # chunks moved; 0 for a nop that states none
    depid: int  # thread block waited for, -1 when no dependency
    deps: int  # step of that thread block waited for, -1 when no dependency
    hasdep: bool  # another thread block waits for this step
    line: int


@dataclass(frozen=True)
class XmlThreadBlock:
    """One `<tb>`: a thread block with its (at most one) send peer and receive peer on one channel."""

    id: int
    send: int  # peer gpu or -1
    recv: int  # peer gpu or -1
    chan: int
    steps: tuple[XmlStep, ...]
    line: int


@dataclass(frozen=True)
class XmlGpu:
    """One `<gpu>`: a rank, its buffer sizes in chunks and its thread blocks."""

    id: int
    i_chunks: int
    o_chunks: int
    s_chunks: int
    tbs: tuple[XmlThreadBlock, ...]
    line: int


@dataclass(frozen=True)
class XmlAlgorithm:
    """A whole `<algo>` file."""

    file: str  # the path as given
    name: str
    proto: str  # one of PROTOCOLS
    nchannels: int
    nchunksperloop: int
    ngpus: int
    coll: str  # as written in the file: "allreduce", "allgather", "alltoall", ...
    inplace: bool
    gpus: tuple[XmlGpu, ...]
    line: int


def parse(path: str | os.PathLike) -> XmlAlgorithm:
    """Read and check the MSCCL XML file at `path`."""
    file = os.fspath(path)
    try:
        with open(file, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ScheduleError(f"cannot read the file: {e.strerror or e}", file=file,
                            hint="check the path and its permissions") from None
    return _parse(data, file)


def parse_text(text: str, file: str) -> XmlAlgorithm:
    """Check the MSCCL XML document `text`; `file` names it in errors."""
    return _parse(text.encode("utf-8"), file, declared_utf8=True)


def summary(alg: XmlAlgorithm) -> dict:
    """Counts that describe an algorithm's shape, for reports and for comparing against other tools' counts.

    `connections` maps each (sender gpu, receiver gpu, channel) to the number of steps that send on it (as seen
    by the sending thread blocks); `receives` maps the same keys to the number of steps that receive on it (as
    seen by the receiving thread blocks). In a correct algorithm the two agree for every key.
    """
    by_type: Counter[str] = Counter()
    connections: Counter[tuple[int, int, int]] = Counter()
    receives: Counter[tuple[int, int, int]] = Counter()
    channels: set[int] = set()
    n_tbs = n_deps = 0
    for gpu in alg.gpus:
        for tb in gpu.tbs:
            n_tbs += 1
            channels.add(tb.chan)
            for st in tb.steps:
                by_type[st.type] += 1
                n_deps += st.depid >= 0
                if st.type in SENDING:
                    connections[(gpu.id, tb.send, tb.chan)] += 1
                if st.type in RECEIVING:
                    receives[(tb.recv, gpu.id, tb.chan)] += 1
    for key in set(connections) | set(receives):
        connections.setdefault(key, 0)
        receives.setdefault(key, 0)
    return {
        "name": alg.name,
        "coll": alg.coll,
        "proto": alg.proto,
        "gpus": len(alg.gpus),
        "thread_blocks": n_tbs,
        "steps": sum(by_type.values()),
        "steps_by_type": dict(sorted(by_type.items())),
        "dependencies": n_deps,
        "channels": sorted(channels),
        "connections": dict(sorted(connections.items())),
        "receives": dict(sorted(receives.items())),
    }


# --- reading ---------------------------------------------------------------------------------------------------


def _parse(data: bytes, file: str, *, declared_utf8: bool = False) -> XmlAlgorithm:
    if not data.strip():
        raise ScheduleError("the file is empty", file=file, hint="an MSCCL algorithm file holds one <algo> element")
    reader = _Reader(file)
    parser = expat.ParserCreate("utf-8" if declared_utf8 else None)
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    reader.parser = parser
    parser.StartElementHandler = reader.start
    parser.EndElementHandler = reader.end
    parser.CharacterDataHandler = reader.text
    parser.StartDoctypeDeclHandler = reader.doctype
    parser.EntityDeclHandler = reader.entity
    try:
        parser.Parse(data, True)
    except expat.ExpatError as e:
        raise ScheduleError(f"malformed XML: {expat.ErrorString(e.code)} (column {e.offset + 1})",
                            file=file, line=e.lineno, hint="fix the XML syntax at that line") from None
    if reader.algo is None:
        raise ScheduleError("no <algo> element", file=file, hint="an MSCCL algorithm file holds one <algo> element")
    return _check(reader.algo, file)


class _Reader:
    """expat callbacks: build plain dicts of every element with its line, checking each element as it opens."""

    def __init__(self, file: str):
        self.file = file
        self.parser: expat.XMLParserType | None = None
        self.stack: list[dict] = []
        self.algo: dict | None = None

    def _line(self) -> int:
        return self.parser.CurrentLineNumber

    def _error(self, message: str, hint: str, line: int | None = None) -> ScheduleError:
        return ScheduleError(message, file=self.file, line=self._line() if line is None else line, hint=hint)

    def doctype(self, name, sysid, pubid, has_internal_subset):
        raise self._error("document type declaration (<!DOCTYPE>) is not allowed",
                          "remove it: an MSCCL algorithm file needs no DTD or entities")

    def entity(self, name, is_parameter_entity, value, base, system_id, public_id, notation_name):
        raise self._error(f"entity declaration (<!ENTITY {name}>) is not allowed",
                          "remove it: an MSCCL algorithm file needs no DTD or entities")

    def text(self, data: str):
        if data.strip():
            where = f"inside <{self.stack[-1]['tag']}>" if self.stack else "outside any element"
            raise self._error(f"unexpected text {data.strip()[:40]!r} {where}",
                              "elements of an MSCCL file hold only other elements")

    def start(self, tag: str, attrs: dict[str, str]):
        line = self._line()
        if tag not in PARENT:
            raise self._error(f"unknown element <{tag}>", f"the elements are {', '.join(f'<{t}>' for t in PARENT)}")
        parent = self.stack[-1]["tag"] if self.stack else None
        if parent != PARENT[tag]:
            where = f"inside <{parent}>" if parent else "at the top level"
            want = f"inside <{PARENT[tag]}>" if PARENT[tag] else "only at the top level"
            raise self._error(f"<{tag}> {where}", f"<{tag}> belongs {want}")
        for key in attrs:
            if key not in ATTRIBUTES[tag] and key not in KNOWN_IGNORED.get(tag, ()):
                known = sorted(ATTRIBUTES[tag] | KNOWN_IGNORED.get(tag, frozenset()))
                raise self._error(f"unknown attribute {key!r} of <{tag}>", f"the attributes of <{tag}> are "
                                  f"{', '.join(known)}")
        node = {"tag": tag, "line": line, "children": []}
        node.update(getattr(self, "_" + tag)(attrs))
        if self.stack:
            self.stack[-1]["children"].append(node)
        else:
            self.algo = node
        self.stack.append(node)

    def end(self, tag: str):
        self.stack.pop()

    # Attribute readers, one per element. Each returns the element's fields.

    def _need(self, tag: str, attrs: dict[str, str], key: str) -> str:
        if key not in attrs:
            raise self._error(f"<{tag}> lacks the attribute {key!r}", f"add {key}=\"...\" to the <{tag}> element")
        return attrs[key]

    def _int(self, tag: str, attrs: dict[str, str], key: str, default: int | None = None, low: int | None = None):
        if key not in attrs and default is not None:
            return default
        raw = self._need(tag, attrs, key)
        if not _INT.fullmatch(raw.strip()):
            raise self._error(f"attribute {key!r} of <{tag}> must be an integer, not {raw!r}",
                              f"write {key} as a decimal integer")
        value = int(raw)
        if low is not None and value < low:
            raise self._error(f"attribute {key!r} of <{tag}> is {value}, below {low}",
                              f"{key} must be at least {low}")
        return value

    def _flag(self, tag: str, attrs: dict[str, str], key: str, default: int | None = None) -> bool:
        value = self._int(tag, attrs, key, default)
        if value not in (0, 1):
            raise self._error(f"attribute {key!r} of <{tag}> must be 0 or 1, not {value}", f"write {key}=\"0\" or "
                              f"{key}=\"1\"")
        return bool(value)

    def _algo(self, a: dict[str, str]) -> dict:
        proto = self._need("algo", a, "proto")
        if proto not in PROTOCOLS:
            raise self._error(f"unknown protocol {proto!r} in attribute 'proto' of <algo>",
                              f"the protocols are {', '.join(PROTOCOLS)}")
        return {
            "name": self._need("algo", a, "name"),
            "proto": proto,
            "nchannels": self._int("algo", a, "nchannels", low=1),
            "nchunksperloop": self._int("algo", a, "nchunksperloop", low=1),
            "ngpus": self._int("algo", a, "ngpus", low=1),
            "coll": self._need("algo", a, "coll"),
            "inplace": self._flag("algo", a, "inplace"),
        }

    def _gpu(self, a: dict[str, str]) -> dict:
        return {"id": self._int("gpu", a, "id", low=0), "i_chunks": self._int("gpu", a, "i_chunks", low=0),
                "o_chunks": self._int("gpu", a, "o_chunks", low=0), "s_chunks": self._int("gpu", a, "s_chunks", low=0)}

    def _tb(self, a: dict[str, str]) -> dict:
        return {"id": self._int("tb", a, "id", low=0), "send": self._int("tb", a, "send", low=-1),
                "recv": self._int("tb", a, "recv", low=-1), "chan": self._int("tb", a, "chan", low=0)}

    def _step(self, a: dict[str, str]) -> dict:
        kind = self._need("step", a, "type")
        if kind not in STEP_TYPES:
            raise self._error(f"unknown step type {kind!r} in attribute 'type' of <step>",
                              f"the step types are {', '.join(STEP_TYPES)}")
        fields = {"s": self._int("step", a, "s", low=0), "type": kind}
        # A side the kernel does not touch may be left out (nop steps, a send's destination, a receive's source).
        for side, used in (("src", kind in READS_SRC), ("dst", kind in WRITES_DST)):
            buf = self._need("step", a, side + "buf") if used else a.get(side + "buf", "")
            if buf and buf not in BUFFERS:
                raise self._error(f"unknown buffer {buf!r} in attribute '{side}buf' of <step>",
                                  "the buffers are i (input), o (output), s (scratch)")
            fields[side + "buf"] = buf
            fields[side + "off"] = self._int("step", a, side + "off", low=0 if used else -1,
                                             default=None if used else -1)
        fields["cnt"] = self._int("step", a, "cnt", low=0, default=0 if kind == "nop" else None)
        fields["depid"] = self._int("step", a, "depid", low=-1)
        fields["deps"] = self._int("step", a, "deps", low=-1)
        fields["hasdep"] = self._flag("step", a, "hasdep")
        return fields


# --- checking the whole ----------------------------------------------------------------------------------------


def _check(algo: dict, file: str) -> XmlAlgorithm:
    """Check what spans elements (ids, peers, dependencies, bounds) and build the frozen result."""

    def error(message: str, node: dict, hint: str) -> ScheduleError:
        return ScheduleError(message, file=file, line=node["line"], hint=hint)

    ngpus, nchannels = algo["ngpus"], algo["nchannels"]
    gpus = algo["children"]
    if len(gpus) != ngpus:
        raise error(f"<algo> declares ngpus={ngpus} but holds {len(gpus)} <gpu> element(s)", algo,
                    "make ngpus equal the number of <gpu> elements")
    seen_gpus: dict[int, dict] = {}
    for gpu in gpus:
        if gpu["id"] >= ngpus:
            raise error(f"<gpu id={gpu['id']}> is out of range for ngpus={ngpus}", gpu,
                        f"gpu ids are 0..{ngpus - 1}")
        if gpu["id"] in seen_gpus:
            raise error(f"duplicate <gpu id={gpu['id']}> (first at line {seen_gpus[gpu['id']]['line']})", gpu,
                        "give every gpu its own id")
        seen_gpus[gpu["id"]] = gpu

    out_gpus = []
    for gpu in gpus:
        g = gpu["id"]
        tbs = gpu["children"]
        by_id: dict[int, dict] = {}
        for tb in tbs:
            if tb["id"] in by_id:
                raise error(f"duplicate <tb id={tb['id']}> on gpu {g} (first at line {by_id[tb['id']]['line']})", tb,
                            "give every thread block of a gpu its own id")
            by_id[tb["id"]] = tb
        for tb in tbs:
            if tb["id"] >= len(tbs):
                raise error(f"<tb id={tb['id']}> on gpu {g} leaves a gap: the gpu has {len(tbs)} thread blocks", tb,
                            f"number the thread blocks of a gpu 0..{len(tbs) - 1} (the executors require it)")
            for role in ("send", "recv"):
                peer = tb[role]
                if peer >= ngpus:
                    raise error(f"<tb id={tb['id']}> on gpu {g}: {role} peer {peer} is out of range for "
                                f"ngpus={ngpus}", tb, f"a peer is a gpu id 0..{ngpus - 1}, or -1 for none")
                if peer == g:
                    raise error(f"<tb id={tb['id']}> on gpu {g}: {role} peer is the gpu itself", tb,
                                "a thread block talks to another gpu; use cpy/re steps for local work")
            if tb["chan"] >= nchannels:
                raise error(f"<tb id={tb['id']}> on gpu {g}: channel {tb['chan']} is out of range for "
                            f"nchannels={nchannels}", tb, f"channels are 0..{nchannels - 1}")
            for i, st in enumerate(tb["children"]):
                if st["s"] != i:
                    raise error(f"<step s={st['s']}> of <tb id={tb['id']}> on gpu {g} is out of order: expected s={i}",
                                st, "number the steps of a thread block 0, 1, 2, ... in document order")
        for tb in tbs:
            for st in tb["children"]:
                _check_step(st, tb, gpu, by_id, error)
        out_tbs = tuple(
            XmlThreadBlock(id=tb["id"], send=tb["send"], recv=tb["recv"], chan=tb["chan"], line=tb["line"],
                           steps=tuple(XmlStep(s=st["s"], type=st["type"], srcbuf=st["srcbuf"], srcoff=st["srcoff"],
                                               dstbuf=st["dstbuf"], dstoff=st["dstoff"], cnt=st["cnt"],
                                               depid=st["depid"], deps=st["deps"], hasdep=st["hasdep"],
                                               line=st["line"]) for st in tb["children"]))
            for tb in tbs)
        out_gpus.append(XmlGpu(id=g, i_chunks=gpu["i_chunks"], o_chunks=gpu["o_chunks"], s_chunks=gpu["s_chunks"],
                               tbs=out_tbs, line=gpu["line"]))
    return XmlAlgorithm(file=file, name=algo["name"], proto=algo["proto"], nchannels=nchannels,
                        nchunksperloop=algo["nchunksperloop"], ngpus=ngpus, coll=algo["coll"],
                        inplace=algo["inplace"], gpus=tuple(out_gpus), line=algo["line"])


def _check_step(st: dict, tb: dict, gpu: dict, tbs_by_id: dict[int, dict], error) -> None:
    """Check one step against its thread block (peers), its gpu (buffers) and its dependency."""
    g, where = gpu["id"], f"<step s={st['s']}> of <tb id={tb['id']}> on gpu {gpu['id']}"
    kind = st["type"]
    if kind in SENDING and tb["send"] < 0:
        raise error(f"{where}: a {kind!r} step sends, but the thread block has no send peer", st,
                    "set send=\"<peer gpu>\" on the <tb>, or move the step to a thread block that sends")
    if kind in RECEIVING and tb["recv"] < 0:
        raise error(f"{where}: a {kind!r} step receives, but the thread block has no receive peer", st,
                    "set recv=\"<peer gpu>\" on the <tb>, or move the step to a thread block that receives")
    for side, used in (("src", kind in READS_SRC), ("dst", kind in WRITES_DST)):
        if not used:
            continue
        buf, off, cnt = st[side + "buf"], st[side + "off"], st["cnt"]
        size = gpu[BUFFERS[buf]]
        if off + cnt > size:
            raise error(f"{where}: {side}buf={buf} {side}off={off} cnt={cnt} reaches chunk {off + cnt - 1}, beyond "
                        f"the {size} chunk(s) of that buffer ({BUFFERS[buf]}={size} on the <gpu>)", st,
                        f"keep {side}off+cnt within {BUFFERS[buf]}, or enlarge {BUFFERS[buf]}")
    depid, deps = st["depid"], st["deps"]
    if (depid < 0) != (deps < 0):
        raise error(f"{where}: depid={depid} and deps={deps} disagree on whether there is a dependency", st,
                    "set both to -1 (no dependency) or both to a thread block id and its step index")
    if depid >= 0:
        target = tbs_by_id.get(depid)
        if target is None:
            raise error(f"{where}: depid={depid} names no thread block of gpu {g}", st,
                        f"depid is a <tb id> of the same gpu (0..{len(tbs_by_id) - 1}) or -1")
        if deps >= len(target["children"]):
            raise error(f"{where}: deps={deps} is beyond the {len(target['children'])} step(s) of <tb id={depid}>",
                        st, f"deps is a step index of thread block {depid} (0..{len(target['children']) - 1})")
