"""Read an MSCCL++ execution plan (JSON) keeping the line of every object, and check its shape.

An execution plan is what the MSCCL++ DSL (`mscclpp.language`) writes and the MSCCL++ executor reads
(`src/core/executor/execution_plan.cc`)::

    {"name", "collective", "protocol", "inplace", "reuse_resources", ..., "gpus": [
      {"id", "input_chunks", "output_chunks", "scratch_chunks",
       "channels": [{"channel_type": "memory" | "port", "connected_to": [peer, ...]}
                    | {"channel_type": "switch", "buffer_type", "rank_groups": [...]}],
       "remote_buffers": [{"rank", "type": "i" | "o" | "s", "access_channel_types": [...]}],
       "semaphores": [{"init_value"}],
       "threadblocks": [{"id", "ops": [{"name", "src_buff", "dst_buff", "channel_ids", ...}],
                         "channels": [{"channel_type", "channel_ids": [index into the gpu's channels of
                                       that type]}],
                         "remote_buffer_refs": [{"access_channel_type", "remote_buffer_ids": [...]}]}]}]}

The standard library's JSON decoder does the parsing; its object parser is wrapped so that each object
comes back as a `Obj` (a dict) that knows the line of its opening brace. Errors are `ScheduleError`s with
the file and that line: a malformed document at the decoder's line, a missing or mistyped field at the
object that lacks it.
"""

from __future__ import annotations

import bisect
import json
import json.decoder
import json.scanner
import os

from clockworks_dist.errors import ScheduleError

# The keys that make a JSON document an execution plan rather than a clockworks schedule.
PLAN_KEYS = frozenset({"gpus", "collective"})


class Obj(dict):
    """A JSON object with the line of its opening brace."""

    line: int = 0


class Plan:
    """A parsed plan: the top object and the file's name (for error locations)."""

    def __init__(self, top: Obj, path: str):
        self.top, self.path = top, path
        self.file = os.path.basename(path)

    def error(self, where: Obj | None, message: str, hint: str | None = None, rank: int | None = None,
              op: str | None = None) -> ScheduleError:
        line = where.line if isinstance(where, Obj) else None
        return ScheduleError(message, file=self.file, line=line, rank=rank, op=op, hint=hint)

    def field(self, obj: Obj, key: str, kind: type | tuple, what: str, default=...):
        """`obj[key]`, of Python type `kind`; a clear error at the object's line when it is not."""
        if key not in obj:
            if default is not ...:
                return default
            raise self.error(obj, f"{what} has no \"{key}\"", hint="write the plan with the MSCCL++ DSL")
        value = obj[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if isinstance(value, bool) and bool not in kinds:
            raise self.error(obj, f"{what}: \"{key}\" is {json.dumps(value)}, not {_names(kinds)}")
        if not isinstance(value, kinds):
            raise self.error(obj, f"{what}: \"{key}\" is {json.dumps(value)[:40]}, not {_names(kinds)}")
        if kinds == (int,) and value < 0:
            raise self.error(obj, f"{what}: \"{key}\" is {value}, not a non-negative integer")
        return value

    def objects(self, obj: Obj, key: str, what: str, default=...) -> list[Obj]:
        """`obj[key]`, a list of objects."""
        items = self.field(obj, key, list, what, default=default)
        for item in items:
            if not isinstance(item, Obj):
                raise self.error(obj, f"{what}: \"{key}\" holds {json.dumps(item)[:40]}, not an object")
        return items

    def ints(self, obj: Obj, key: str, what: str, default=...) -> list[int]:
        """`obj[key]`, a list of non-negative integers."""
        items = self.field(obj, key, list, what, default=default)
        for item in items:
            if isinstance(item, bool) or not isinstance(item, int) or item < 0:
                raise self.error(obj, f"{what}: \"{key}\" holds {json.dumps(item)[:40]}, not a non-negative integer")
        return items


def _names(kinds: tuple) -> str:
    return " or ".join({int: "an integer", str: "a string", list: "a list", bool: "true or false",
                        dict: "an object", Obj: "an object"}.get(k, k.__name__) for k in kinds)


def _decoder(text: str) -> json.JSONDecoder:
    """A decoder whose objects are `Obj`s carrying their line in `text`."""
    newlines = [i for i, c in enumerate(text) if c == "\n"]
    decoder = json.JSONDecoder()

    def parse_object(s_and_end, strict, scan_once, object_hook, object_pairs_hook, memo=None):
        start = s_and_end[1] - 1  # the index of "{"
        value, end = json.decoder.JSONObject(s_and_end, strict, scan_once, None, None, memo)
        obj = Obj(value)
        obj.line = bisect.bisect_right(newlines, start) + 1
        return obj, end

    decoder.parse_object = parse_object
    decoder.scan_once = json.scanner.py_make_scanner(decoder)
    return decoder


def read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError as exc:
        raise ScheduleError(f"cannot be read: {exc.strerror or exc}", file=os.path.basename(path),
                            hint="check the path") from None
    except UnicodeDecodeError:
        raise ScheduleError("is not UTF-8 text", file=os.path.basename(path),
                            hint="an execution plan is JSON text") from None


def parse(path: str, text: str | None = None) -> Plan:
    """The plan in `path` (its text already read, if given), its objects line-tagged."""
    text = read_text(path) if text is None else text
    file = os.path.basename(path)
    try:
        top, end = _decoder(text).raw_decode(text, _skip(text, 0))
        rest = _skip(text, end)
        if rest != len(text):
            raise json.JSONDecodeError("extra data after the plan", text, rest)
    except json.JSONDecodeError as exc:
        raise ScheduleError(f"malformed JSON: {exc.msg} (column {exc.colno})", file=file, line=exc.lineno,
                            hint="an execution plan is one JSON object, as the MSCCL++ DSL writes it") from None
    except RecursionError:
        raise ScheduleError("malformed JSON: nested too deeply", file=file,
                            hint="an execution plan is one JSON object") from None
    if not isinstance(top, Obj):
        raise ScheduleError("is not an execution plan: the document is not a JSON object", file=file, line=1,
                            hint="an execution plan is one JSON object, as the MSCCL++ DSL writes it")
    return Plan(top, path)


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


def looks_like_plan(text: str) -> bool:
    """Whether a `.json` file's text is an MSCCL++ plan (it has the plan's top-level keys and none of a
    clockworks schedule's); a document that is not JSON at all counts as a plan only if it names the
    plan's keys, so that its error comes from this reader with a line."""
    try:
        top = json.loads(text)
    except (ValueError, RecursionError):
        return '"gpus"' in text and '"programs"' not in text
    return isinstance(top, dict) and PLAN_KEYS <= top.keys() and "programs" not in top
