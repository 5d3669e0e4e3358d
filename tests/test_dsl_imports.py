"""The DSL's modules import each other as a DAG: every import between modules of
`clockworks_dist/dsl/`, at module level or inside a function, counted (a function-level import
that hides a cycle is still a cycle). `dsl/source.py` holds what they all read (`user_loc`,
`check_name`, `_PACKAGE_DIR`)."""

from __future__ import annotations

import ast
from pathlib import Path

import clockworks_dist.dsl

DSL = Path(clockworks_dist.dsl.__file__).parent


def _imports(path: Path) -> set[str]:
    """The modules of dsl/ that `path` imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(alias.name for alias in node.names)
    return {name for name in found if (DSL / f"{name}.py").exists()}


def test_the_dsl_modules_import_each_other_as_a_dag():
    graph = {p.stem: _imports(p) for p in DSL.glob("*.py") if p.stem != "__init__"}
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            cycle = path[path.index(name):] + [name]
            raise AssertionError(f"clockworks_dist/dsl/: an import cycle {' -> '.join(cycle)}; move what they share "
                                 "into a module both import (dsl/source.py)")
        if name in done:
            return
        for other in sorted(graph.get(name, ())):
            visit(other, path + [name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])


def test_the_moved_names_stay_importable_from_where_they_were():
    from clockworks_dist.dsl import source, trace

    assert trace.user_loc is source.user_loc and trace.check_name is source.check_name
    assert trace._PACKAGE_DIR == source._PACKAGE_DIR
