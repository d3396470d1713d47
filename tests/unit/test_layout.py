"""The package's layout and import graph (DESIGN.md §10): the top level of ``syncd/`` lists
its layers, and dependencies point one way, with no cycle — counting imports inside functions
and ``TYPE_CHECKING`` blocks too, so that no cycle hides behind a deferred import."""

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


def _within(module: str, packages: set[str]) -> bool:
    """True when ``module`` is one of ``packages`` or inside one of them."""
    return any(module == p or module.startswith(p + ".") for p in packages)


# The layers of syncd/, top to bottom (DESIGN.md §10, docs/design.md "Layout"). A module may
# import its own package and any layer below its own, never one above it or beside it: the
# names of one row are peers that do not import each other, except in the last row, the
# foundation, whose few modules may (the cycle test above still holds them).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("__main__",),
    ("cli",),
    ("daemon",),
    ("api",),
    ("service", "scheduler"),
    ("pipeline",),
    ("indexing",),
    ("plugins",),
    ("sources", "indexers"),
    ("schema",),
    ("http",),
    ("config",),
    ("store", "queue"),
    ("runtime",),
    ("observability",),
    ("rules",),
    ("models", "errors", "paths", "jsontext", "version", "ui", "data"),
)
_RANK = {name: rank for rank, row in enumerate(LAYERS) for name in row}


def _layer(module: str) -> str:
    """``syncd.store.sqlite.sql`` → ``store``."""
    return module.split(".")[1]


def back_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a layer above or beside the importer's own, as ``a -> b``."""
    found = []
    foundation = len(LAYERS) - 1
    for module, deps in sorted(graph.items()):
        if module == "syncd":
            continue  # the package root's lazy re-exports sit above everything
        mine = _layer(module)
        for dep in sorted(deps):
            theirs = _layer(dep) if dep != "syncd" else None
            if theirs is None or theirs == mine:
                if theirs is None:
                    found.append(f"{module} -> {dep}")
                continue
            if _RANK[theirs] < _RANK[mine] or (
                _RANK[theirs] == _RANK[mine] and _RANK[mine] != foundation
            ):
                found.append(f"{module} -> {dep}")
    return found


def test_every_package_has_a_layer() -> None:
    packages = {_layer(m) for m in import_graph() if m != "syncd"}
    assert packages <= set(_RANK), sorted(packages - set(_RANK))


def test_dependencies_point_down_the_layers() -> None:
    assert back_imports(import_graph()) == []


def test_the_layer_check_names_a_back_import() -> None:
    graph = {"syncd.rules.x": {"syncd.pipeline.run"}, "syncd.store.a": {"syncd.queue.b"}}
    graph |= {"syncd.models": {"syncd.jsontext"}, "syncd.pipeline.run": {"syncd.rules.x"}}
    assert back_imports(graph) == [
        "syncd.rules.x -> syncd.pipeline.run",
        "syncd.store.a -> syncd.queue.b",
    ]


def test_the_state_rules_import_no_io() -> None:
    graph = import_graph()
    io = {"syncd.store", "syncd.queue", "syncd.http", "syncd.sources", "syncd.indexers"}
    io |= {"syncd.api", "syncd.cli", "syncd.daemon", "syncd.service", "syncd.indexing"}
    io |= {"syncd.pipeline", "syncd.scheduler", "syncd.runtime"}
    rules = [m for m in graph if _within(m, {"syncd.rules"})]
    assert len(rules) > 1  # the package and its topics
    for module in rules:
        assert not {d for d in graph[module] if _within(d, io)}, module


# The top level of syncd/: a few shared modules, then one package per layer or concern. A new
# module goes into the package of its concern; a new top-level name is a decision, made here.
TOP_LEVEL = {
    "__init__",
    "__main__",
    "errors",  # syncd's exceptions
    "jsontext",  # JSON text in and out
    "models",  # records and statuses
    "paths",  # paths into JSON values (dotted or JSON Pointer)
    "version",  # the version, written once
    "plugins",  # the registry of sources and indexers
    "scheduler",  # the scheduler tick
    "api",  # the control API
    "cli",  # the syncd command
    "config",  # the configuration
    "daemon",  # the composition root and running it as a service
    "data",  # the files `syncd init` writes
    "http",  # transport, paginator, host budgets
    "indexers",  # the built-in indexers
    "indexing",  # workers, a batch's run, queue and store housekeeping
    "observability",  # logs and metrics
    "pipeline",  # a sync run
    "queue",  # the work queue backends
    "rules",  # the pure state rules
    "runtime",  # asyncio plumbing: owned tasks, pacing
    "schema",  # connector models and body validation
    "service",  # the connector operations and the changes they announce
    "sources",  # the built-in sources
    "store",  # the store backends
    "ui",  # the dashboard
}


def test_the_top_level_lists_the_layers() -> None:
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    # A directory holding Python files (left-over __pycache__ directories hold none).
    packages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and any(p.glob("*.py"))}
    assert modules | packages == TOP_LEVEL
    assert all((PACKAGE / p / "__init__.py").is_file() for p in packages)


# DESIGN.md §10: files stay under ~600 lines; a class that outgrows 400 holds more than one
# concern (the issue that split the engine and the workers drew that line).
MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 400


def test_no_module_or_class_outgrows_its_concern() -> None:
    too_long = []
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        if text.count("\n") > MAX_MODULE_LINES:
            too_long.append(f"{path.relative_to(PACKAGE)}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_CLASS_LINES:
                    too_long.append(f"{path.relative_to(PACKAGE)}: class {node.name} {lines}")
    assert too_long == []


def test_cancellation_is_never_suppressed() -> None:
    # ``contextlib.suppress(CancelledError)`` swallows a cancellation meant for the caller too
    # (DESIGN.md §10: "never swallow CancelledError"); cancel_and_wait is the way to stop a task.
    found = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and ast.unparse(node.func).endswith("suppress")
                and any("CancelledError" in ast.unparse(arg) for arg in node.args)
            ):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert found == []
