#!/usr/bin/env python3
"""Lines of code of the package, per unit and per file (after tinygrad's sz.py).

    python scripts/size_report.py [--markdown OUT] [--max-core N]

A code line is a line of a .py file under clockworks_dist/ that holds a token of code: not blank,
not only a comment, and not a line of a docstring (the string that opens a module, class or
function, found with `ast`; the lines are classified with `tokenize`). A line that a code string
spans (not a docstring) is code. Units are those of scripts/layers.py (the first component under
clockworks_dist: `perf`, `tune`, the facade `clockworks_dist`, ...).

The groups: the core (ir + semantics + check), the checking half (ir, semantics, dsl, check), the
production half (lowering, perf, codegen, runtime, report, tune, prediction, calibrate), the CLI
(cli, __main__), and the rest (shared by both halves: topology, errors, hygiene, the facade).

`--markdown OUT` writes the tables as Markdown; `--max-core N` exits 1 when the core has more than
N code lines (a gate; none by default). The CUDA sources (.cu, .cuh) are listed apart, their
lines not blank and not only a comment, and are in no total.
"""

from __future__ import annotations

import argparse
import ast
import io
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from layers import PACKAGE_DIR, layer_table, module_names, read_layers, unit_of  # noqa: E402

CORE = ("ir", "semantics", "check")
GROUPS = {
    "core (ir + semantics + check)": CORE,
    "checking half (ir, semantics, dsl, check)": ("ir", "semantics", "dsl", "check"),
    "production half (lowering, perf, codegen, runtime, report, tune, prediction, calibrate)":
        ("lowering", "perf", "codegen", "runtime", "report", "tune", "prediction", "calibrate"),
    "CLI (cli, __main__)": ("cli", "__main__"),
    "shared (topology, errors, hygiene, the facade)": ("topology", "errors", "hygiene", "clockworks_dist"),
}
SKIP = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING,
        tokenize.ENDMARKER}


@dataclass
class Count:
    code: int = 0
    docstring: int = 0
    comment: int = 0
    blank: int = 0
    files: int = 0

    def add(self, other: Count) -> None:
        self.code += other.code
        self.docstring += other.docstring
        self.comment += other.comment
        self.blank += other.blank
        self.files += other.files


def _docstrings(tree: ast.AST) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """The (start, end) positions of every docstring: the first statement of a module, class or function
    when it is a string."""
    spans = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                v = first.value
                spans.append(((v.lineno, v.col_offset), (v.end_lineno, v.end_col_offset)))
    return spans


def count_source(source: str) -> Count:
    """Code, docstring, comment and blank lines of one Python source."""
    docs = _docstrings(ast.parse(source))
    code: set[int] = set()
    doc: set[int] = set()
    comment: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        lines = range(tok.start[0], tok.end[0] + 1)
        if tok.type == tokenize.COMMENT:
            comment.add(tok.start[0])
        elif tok.type == tokenize.STRING and any(a <= tok.start and tok.end <= b for a, b in docs):
            doc.update(lines)
        elif tok.type not in SKIP:
            code.update(lines)
    doc -= code
    comment -= code | doc
    blank = {n for n, line in enumerate(source.splitlines(), 1) if not line.strip()} - code - doc
    return Count(code=len(code), docstring=len(doc), comment=len(comment), blank=len(blank), files=1)


def count_cuda(source: str) -> int:
    """Lines of a CUDA source that are not blank and not only a comment (// or /* ... */)."""
    n, in_block = 0, False
    for line in source.splitlines():
        text, rest = "", line
        while rest:
            if in_block:
                end = rest.find("*/")
                if end < 0:
                    rest = ""
                else:
                    rest, in_block = rest[end + 2:], False
            else:
                start, slashes = rest.find("/*"), rest.find("//")
                if slashes >= 0 and (start < 0 or slashes < start):
                    text, rest = text + rest[:slashes], ""
                elif start >= 0:
                    text, rest, in_block = text + rest[:start], rest[start + 2:], True
                else:
                    text, rest = text + rest, ""
        n += bool(text.strip())
    return n


@dataclass
class Report:
    files: dict[str, tuple[str, Count]]     # path -> (unit, counts)
    units: dict[str, Count]
    groups: dict[str, Count]
    total: Count
    cuda: dict[str, int]
    layers: dict[str, int]

    @property
    def core(self) -> int:
        return self.groups[next(iter(GROUPS))].code


def measure(package_dir: Path = PACKAGE_DIR) -> Report:
    root = package_dir.name
    files, units, total = {}, {}, Count()
    for module, rel in module_names(package_dir).items():
        unit = unit_of(module, root)
        c = count_source((package_dir.parent / rel).read_text(encoding="utf-8"))
        files[rel] = (unit, c)
        units.setdefault(unit, Count()).add(c)
        total.add(c)
    groups = {}
    for name, members in GROUPS.items():
        groups[name] = Count()
        for unit in members:
            groups[name].add(units.get(unit, Count()))
    grouped = {u for members in GROUPS.values() for u in members}
    if set(units) - grouped:
        groups["not in a group: " + ", ".join(sorted(set(units) - grouped))] = Count()
        for unit in sorted(set(units) - grouped):
            groups[list(groups)[-1]].add(units[unit])
    cuda = {p.relative_to(package_dir.parent).as_posix(): count_cuda(p.read_text(encoding="utf-8"))
            for p in sorted(package_dir.rglob("*")) if p.suffix in (".cu", ".cuh")}
    try:
        layers = layer_table(read_layers())
    except (OSError, LookupError):
        layers = {}
    return Report(files, units, groups, total, cuda, layers)


def _unit_order(r: Report) -> list[str]:
    return sorted(r.units, key=lambda u: (-r.layers.get(u, -1), u))


def text(r: Report) -> list[str]:
    lines = [f"clockworks_dist: {r.total.code:,} code lines in {r.total.files} files "
             f"({r.total.docstring:,} docstring, {r.total.comment:,} comment, {r.total.blank:,} blank lines)", ""]
    lines.append(f"{'group':<90} {'code':>7} {'files':>5}")
    for name, c in r.groups.items():
        lines.append(f"{name:<90} {c.code:>7,} {c.files:>5}")
    lines += ["", f"{'layer':>5}  {'unit':<16} {'code':>7} {'files':>5} {'docstring':>9} {'comment':>7}"]
    for unit in _unit_order(r):
        c = r.units[unit]
        lines.append(f"{r.layers.get(unit, '?'):>5}  {unit:<16} {c.code:>7,} {c.files:>5} {c.docstring:>9,} "
                     f"{c.comment:>7,}")
    lines += ["", f"{'file':<52} {'code':>6}"]
    for unit in _unit_order(r):
        for path, (u, c) in sorted(r.files.items()):
            if u == unit:
                lines.append(f"{path:<52} {c.code:>6,}")
    if r.cuda:
        lines += ["", "CUDA sources (in no total):"] + [f"{p:<52} {n:>6,}" for p, n in r.cuda.items()]
    return lines


def markdown(r: Report) -> list[str]:
    out = ["# Size of the package", "",
           "Written by `python scripts/size_report.py --markdown OUT`. Code lines: not blank, not only a comment, "
           "not a docstring line (Python files of clockworks_dist/; the CUDA sources apart, in no total).", "",
           f"**{r.total.code:,} code lines** in {r.total.files} files ({r.total.docstring:,} docstring, "
           f"{r.total.comment:,} comment and {r.total.blank:,} blank lines besides).", "",
           "| group | code lines | files |", "| --- | ---: | ---: |"]
    out += [f"| {name} | {c.code:,} | {c.files} |" for name, c in r.groups.items()]
    out += ["", "| layer | unit | code lines | files | docstring lines | comment lines |",
            "| ---: | --- | ---: | ---: | ---: | ---: |"]
    for unit in _unit_order(r):
        c = r.units[unit]
        out.append(f"| {r.layers.get(unit, '?')} | `{unit}` | {c.code:,} | {c.files} | {c.docstring:,} "
                   f"| {c.comment:,} |")
    out += ["", "| file | unit | code lines |", "| --- | --- | ---: |"]
    for unit in _unit_order(r):
        for path, (u, c) in sorted(r.files.items()):
            if u == unit:
                out.append(f"| `{path}` | `{u}` | {c.code:,} |")
    if r.cuda:
        out += ["", "| CUDA source | lines (not blank, not only a comment) |", "| --- | ---: |"]
        out += [f"| `{p}` | {n:,} |" for p, n in r.cuda.items()]
    return out + [""]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", metavar="OUT", help="also write the report as Markdown to OUT")
    parser.add_argument("--max-core", type=int, metavar="N",
                        help="exit 1 when the core (ir + semantics + check) has more than N code lines")
    args = parser.parse_args(argv)
    r = measure()
    print("\n".join(text(r)))
    if args.markdown:
        Path(args.markdown).write_text("\n".join(markdown(r)), encoding="utf-8")
    if args.max_core is not None and r.core > args.max_core:
        print(f"size_report: the core (ir + semantics + check) has {r.core:,} code lines, more than "
              f"--max-core {args.max_core:,}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
