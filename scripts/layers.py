#!/usr/bin/env python3
"""The package's imports, read with `ast`: which unit imports which, and whether any arrow points up.

    python scripts/layers.py [--markdown OUT]

prints the units (the first component under clockworks_dist: `perf`, `tune`, `errors`, the facade
`clockworks_dist` itself, `__main__`) with their layers, the arrows between units with their counts,
the arrows that break the layer rule, the import cycles among modules, and how many imports of our
own modules sit inside functions. `--markdown OUT` also writes the report as Markdown tables.

The layer table lives in tests/test_layers.py (`LAYERS`, read from there with `ast.literal_eval`, so
there is one table); that test runs the same analysis (`analyse`) and fails on what this script
reports as upward arrows, module cycles and unplaced units.

What counts as an import: every `import` and `from ... import` of our own package, at module level
or inside a function (absolute, or relative with the package/module distinction: in a package's
`__init__.py` `from . import x` is a sibling of the package's modules, in a plain module it is a
sibling of the module). `from P import name` is an import of the module `P.name` where that is a
module, else of `P`. Imports under `if TYPE_CHECKING:` are skipped (they never run), and so are
dynamic ones (`importlib.import_module`). Cycles are looked for among module-level imports only: a
function-level import runs after every module has loaded.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIR = ROOT / "clockworks_dist"
LAYERS_FILE = ROOT / "tests" / "test_layers.py"

FIX_ARROW = ("an import may only point to the same unit or to a unit of a strictly lower layer: move the code "
             "it needs down (into the lower unit, or a new module of a low layer), or pass it in as a parameter "
             "(a function or a value the caller above provides)")
FIX_CYCLE = ("move what the modules share into a module that both import, or pass it in as a parameter; "
             "a function-level import that hides the cycle does not count as a fix of the design")
FIX_UNPLACED = ("place it in the layer table: `LAYERS` in tests/test_layers.py, and the package's layout in "
                "docs/layout.md")


@dataclass(frozen=True)
class Import:
    """One import of our own package: `src` (a module) imports `dst` (a module) at `path:line`."""

    src: str
    dst: str
    path: str       # the importing file, relative to the folder that holds the package
    line: int
    in_function: bool


@dataclass
class Analysis:
    root: str                           # the package's name
    modules: dict[str, str]             # module name -> file, relative to the folder that holds the package
    imports: list[Import]
    layers: dict[str, int]              # unit -> layer
    cycles: list[list[str]] = field(default_factory=list)   # strongly connected components, module-level
    # the same, counting function-level imports too: cycles that a function-level import hides (reported by
    # the script, not a failure of tests/test_layers.py)
    hidden_cycles: list[list[str]] = field(default_factory=list)

    def unit(self, module: str) -> str:
        return unit_of(module, self.root)

    def units(self) -> dict[str, list[str]]:
        """Each unit found, with its modules."""
        out: dict[str, list[str]] = {}
        for module in sorted(self.modules):
            out.setdefault(self.unit(module), []).append(module)
        return out

    def unplaced(self) -> dict[str, list[str]]:
        """The units found (as a module, or as an import's target) that the layer table lacks."""
        found = self.units()
        for imp in self.imports:
            found.setdefault(self.unit(imp.dst), []).append(imp.dst)
        return {unit: sorted(set(mods)) for unit, mods in sorted(found.items()) if unit not in self.layers}

    def upward(self) -> list[Import]:
        """The imports between two different units that do not point to a strictly lower layer (both units
        in the table; an unplaced unit is reported by `unplaced`)."""
        out = []
        for imp in self.imports:
            a, b = self.unit(imp.src), self.unit(imp.dst)
            if a != b and a in self.layers and b in self.layers and not self.layers[b] < self.layers[a]:
                out.append(imp)
        return out

    def arrows(self) -> Counter:
        """(unit, unit, in_function) -> how many imports, between different units."""
        return Counter((self.unit(i.src), self.unit(i.dst), i.in_function) for i in self.imports
                       if self.unit(i.src) != self.unit(i.dst))

    def describe(self, imp: Import) -> str:
        a, b = self.unit(imp.src), self.unit(imp.dst)
        return (f"{imp.path}:{imp.line} imports {imp.dst} "
                f"(unit {a}, layer {self.layers.get(a, '?')} -> unit {b}, layer {self.layers.get(b, '?')})"
                + (" [inside a function]" if imp.in_function else ""))

    def cycle_edges(self, cycle: list[str], functions: bool = False) -> list[Import]:
        members = set(cycle)
        return sorted((i for i in self.imports
                       if (functions or not i.in_function) and i.src in members and i.dst in members),
                      key=lambda i: (i.path, i.line, i.dst))

    def describe_cycle(self, cycle: list[str], functions: bool = False) -> str:
        lines = [f"import cycle among {len(cycle)} modules: {', '.join(cycle)}"]
        lines += [f"    {i.path}:{i.line} imports {i.dst}" + (" [inside a function]" if i.in_function else "")
                  for i in self.cycle_edges(cycle, functions)]
        return "\n".join(lines)

    def function_level(self) -> list[Import]:
        return [i for i in self.imports if i.in_function]


def unit_of(module: str, root: str) -> str:
    """The first component under the package: `root.perf.simulate` -> `perf`, `root.tune` -> `tune`; the
    package's own `__init__` is the unit `root`, and `root.__main__` is `__main__`."""
    parts = module.split(".")
    return root if len(parts) == 1 else parts[1]


def layer_table(rows) -> dict[str, int]:
    """`LAYERS` rows, (layer, units, what), as unit -> layer; a unit placed twice is an error."""
    out: dict[str, int] = {}
    for layer, units, _what in rows:
        for unit in units:
            if unit in out:
                raise ValueError(f"unit {unit} is placed twice in the layer table (layers {out[unit]} and {layer})")
            out[unit] = layer
    return out


def read_layers(path: Path = LAYERS_FILE):
    """The `LAYERS` constant of tests/test_layers.py, read without importing the test."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign):
            targets = node.targets
        else:
            targets = [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == "LAYERS" for t in targets):
            return ast.literal_eval(node.value)
    raise LookupError(f"no LAYERS constant in {path}")


def module_names(package_dir: Path) -> dict[str, str]:
    """Every module of the package: dotted name -> file, relative to the folder that holds the package."""
    root = package_dir.name
    out = {}
    for path in sorted(package_dir.rglob("*.py")):
        rel = path.relative_to(package_dir).with_suffix("")
        parts = [root, *rel.parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path.relative_to(package_dir.parent).as_posix()
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _statements(tree: ast.AST, in_function: bool = False):
    """(import node, in_function) for every import statement, skipping `if TYPE_CHECKING:` bodies."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, in_function
        elif isinstance(child, ast.If) and _is_type_checking(child.test):
            for stmt in child.orelse:
                yield from _statements(ast.Module(body=[stmt], type_ignores=[]), in_function)
        else:
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            yield from _statements(child, inner)


def _known(name: str, modules) -> str:
    """The longest prefix of `name` that is a module of ours (an import of `a.b.c` where only `a.b` exists
    names a module that fails to import; the arrow still goes to `a.b`'s unit)."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in modules:
            return ".".join(parts[:n])
    return name


def imports_of(module: str, source: str, path: str, is_package: bool, modules, root: str) -> list[Import]:
    """The imports of our own package in one module's source."""
    out = []
    ours = (lambda name: name == root or name.startswith(root + "."))
    for node, in_function in _statements(ast.parse(source, filename=path)):
        targets = []
        if isinstance(node, ast.Import):
            targets = [_known(alias.name, modules) for alias in node.names if ours(alias.name)]
        else:
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                if node.level - 1 > len(base) - 1:
                    continue    # beyond the top of the package: not ours
                base = base[:len(base) - (node.level - 1)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            if not ours(name):
                continue
            for alias in node.names:
                sub = f"{name}.{alias.name}"
                targets.append(sub if alias.name != "*" and sub in modules else _known(name, modules))
        for dst in dict.fromkeys(targets):
            if dst == module:
                continue    # `from . import name` in an __init__, a name it defines itself
            out.append(Import(module, dst, path, node.lineno, in_function))
    return out


def strongly_connected(nodes, edges) -> list[list[str]]:
    """Tarjan's algorithm, iterative: the components with more than one node, or with a self-loop."""
    succ: dict[str, list[str]] = {n: [] for n in nodes}
    for a, b in edges:
        succ.setdefault(a, []).append(b)
        succ.setdefault(b, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(succ):
        if start in index:
            continue
        work = [(start, iter(sorted(succ[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(succ[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in succ[node]:
                        found.append(sorted(component))
    return sorted(found)


def analyse(package_dir: Path = PACKAGE_DIR, layers: dict[str, int] | None = None) -> Analysis:
    """Read every module of the package at `package_dir` and collect its imports of the package."""
    package_dir = Path(package_dir)
    root = package_dir.name
    modules = module_names(package_dir)
    imports = []
    for module, rel in modules.items():
        path = package_dir.parent / rel
        imports += imports_of(module, path.read_text(encoding="utf-8"), rel, path.name == "__init__.py",
                              modules, root)
    result = Analysis(root, modules, imports, layer_table(read_layers()) if layers is None else layers)
    result.cycles = strongly_connected(modules, [(i.src, i.dst) for i in imports if not i.in_function])
    result.hidden_cycles = [c for c in strongly_connected(modules, [(i.src, i.dst) for i in imports])
                            if c not in result.cycles]
    return result


def report(a: Analysis) -> list[str]:
    units = a.units()
    arrows = a.arrows()
    lines = [f"{len(a.modules)} modules in {len(units)} units; {len(a.imports)} imports of our own modules, "
             f"{len(a.function_level())} of them inside functions", "", "units (top = highest layer):"]
    for unit in sorted(units, key=lambda u: (-a.layers.get(u, 99), u)):
        lines.append(f"  {a.layers.get(unit, '?'):>2}  {unit:<16} {len(units[unit]):>3} modules")
    lines += ["", "arrows between units (module-level + function-level imports):"]
    pairs = sorted({(s, d) for s, d, _ in arrows}, key=lambda p: (-a.layers.get(p[0], 99), p))
    for s, d in pairs:
        up = [i for i in a.upward() if a.unit(i.src) == s and a.unit(i.dst) == d]
        lines.append(f"  {s:>16} -> {d:<16} {arrows[s, d, False]:>3} + {arrows[s, d, True]:>3}"
                     + ("   UPWARD" if up else ""))
    upward = a.upward()
    lines += ["", f"arrows that break the layer rule (up or sideways): {len(upward)}"]
    lines += [f"  {a.describe(i)}" for i in upward]
    unplaced = a.unplaced()
    lines += ["", f"units not in the layer table: {len(unplaced)}"]
    lines += [f"  {u}: {', '.join(m)}" for u, m in unplaced.items()]
    lines += ["", f"module cycles (module-level imports): {len(a.cycles)}"]
    lines += ["  " + a.describe_cycle(c).replace("\n", "\n  ") for c in a.cycles]
    lines += ["", f"cycles that function-level imports hide: {len(a.hidden_cycles)}"]
    lines += ["  " + a.describe_cycle(c, functions=True).replace("\n", "\n  ") for c in a.hidden_cycles]
    return lines


def markdown(a: Analysis) -> list[str]:
    units = a.units()
    arrows = a.arrows()
    upward = a.upward()
    out = ["# The package's layers", "",
           "Written by `python scripts/layers.py --markdown OUT` (the table: `LAYERS` in tests/test_layers.py).",
           "",
           f"{len(a.modules)} modules in {len(units)} units; {len(a.imports)} imports of our own modules, "
           f"{len(a.function_level())} of them inside functions.", "",
           "| layer | unit | modules |", "| ---: | --- | ---: |"]
    for unit in sorted(units, key=lambda u: (-a.layers.get(u, 99), u)):
        out.append(f"| {a.layers.get(unit, '?')} | `{unit}` | {len(units[unit])} |")
    out += ["", "| from | to | module-level | in functions | |", "| --- | --- | ---: | ---: | --- |"]
    for s, d in sorted({(s, d) for s, d, _ in arrows}, key=lambda p: (-a.layers.get(p[0], 99), p)):
        bad = any(a.unit(i.src) == s and a.unit(i.dst) == d for i in upward)
        out.append(f"| `{s}` | `{d}` | {arrows[s, d, False]} | {arrows[s, d, True]} | {'**upward**' if bad else ''} |")
    out += ["", f"## Arrows that break the layer rule (up or sideways): {len(upward)}", ""]
    out += [f"- `{a.describe(i)}`" for i in upward]
    out += ["", f"## Module cycles: {len(a.cycles)}", ""]
    for cycle in a.cycles:
        out.append(f"- {', '.join(f'`{m}`' for m in cycle)}: "
                   + "; ".join(f"`{i.path}:{i.line}` imports `{i.dst}`" for i in a.cycle_edges(cycle)))
    out += ["", f"## Cycles that function-level imports hide: {len(a.hidden_cycles)}", "",
            "Not a failure of tests/test_layers.py (it looks at module-level imports), but a design to untangle.", ""]
    for cycle in a.hidden_cycles:
        out.append(f"- {', '.join(f'`{m}`' for m in cycle)}: "
                   + "; ".join(f"`{i.path}:{i.line}` imports `{i.dst}`" + (" (in a function)" if i.in_function else "")
                               for i in a.cycle_edges(cycle, functions=True)))
    unplaced = a.unplaced()
    if unplaced:
        out += ["", f"## Units not in the layer table: {len(unplaced)}", ""]
        out += [f"- `{u}`: {', '.join(m)}" for u, m in unplaced.items()]
    return out + [""]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", metavar="OUT", help="also write the report as Markdown to OUT")
    args = parser.parse_args(argv)
    a = analyse()
    print("\n".join(report(a)))
    if args.markdown:
        Path(args.markdown).write_text("\n".join(markdown(a)), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
