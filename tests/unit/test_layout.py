"""The package's import graph (DESIGN.md §10): dependencies point one way, with no cycle —
counting imports inside functions and ``TYPE_CHECKING`` blocks too, so that no cycle hides
behind a deferred import."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "syncd"


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def import_graph() -> dict[str, set[str]]:
    """``{module: syncd modules it imports anywhere in its body}``."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("syncd"):
                subs = [f"{node.module}.{a.name}" for a in node.names]
                found = [s for s in subs if s in modules]
                # `from pkg import submodule` needs the submodule; anything else, the module.
                deps.update(found)
                if len(found) < len(subs):
                    deps.add(node.module)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name in modules)
        graph[name] = {d for d in deps if d != name and d in modules}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle a depth-first walk meets (each as the path that closes it)."""
    found: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                found.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                walk(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            walk(node)
    return found


def test_the_import_graph_has_no_cycle() -> None:
    # The package root re-exports lazily (``syncd.__getattr__``): it sits above everything.
    graph = {m: deps - {"syncd"} for m, deps in import_graph().items()}
    assert cycles(graph) == []


def test_the_state_rules_import_no_io() -> None:
    graph = import_graph()
    io = {"syncd.store", "syncd.queue", "syncd.http", "syncd.api", "syncd.daemon"}
    rules = [m for m in graph if m == "syncd.rules" or m.startswith("syncd.rules.")]
    assert len(rules) > 1  # the package and its topics
    for module in rules:
        assert not {d for d in graph[module] if d.split(".")[0:2] in [i.split(".") for i in io]}


def test_backends_import_no_layer_above_them() -> None:
    graph = import_graph()
    above = {"syncd.pipeline.engine", "syncd.scheduler", "syncd.indexing.workers"}
    above |= {"syncd.service.operations", "syncd.daemon.core", "syncd.daemon.runner"}
    above |= {"syncd.api", "syncd.cli.main", "syncd.indexing.maintenance"}
    for module, deps in graph.items():
        if module.startswith(("syncd.store", "syncd.queue")):
            assert not deps & above, (module, deps & above)
