"""The package imports in layers: no module imports, directly or through others, one that imports it.

Pure rules at the bottom (states, retry, resilience, cron, decisions), models
above them, the storage backends above models, transitions above storage, the
worker and the surfaces on top (docs/architecture.md). A cycle, or an import
hidden inside a function to step around one, is a sign the layering is wrong:
these tests read every module's imports (also those inside functions; not those
under ``if TYPE_CHECKING:``, which never run) and fail on either.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "django_strait"
ROOT = "django_strait"
#: Functions that may import the package lazily: Django's own hook for "apps are ready".
LAZY_ALLOWED = {("django_strait.apps", "ready")}


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        if "migrations" in path.parts:
            continue
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = modules()


def _target(module: str, node: ast.ImportFrom | ast.Import) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        base = module.split(".")
        if MODULES[module].name != "__init__.py":
            base = base[:-1]
        base = base[: len(base) - (node.level - 1)]
        prefix = ".".join([*base, *([node.module] if node.module else [])])
    else:
        prefix = node.module or ""
    # "from a import b" imports the module a.b when there is one, else names of a.
    return [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in MODULES else prefix for a in node.names]


class _Imports(ast.NodeVisitor):
    """Every package import of one module, and the functions that import lazily."""

    def __init__(self, module: str) -> None:
        self.module = module
        self.targets: set[str] = set()
        self.lazy: list[tuple[str, int]] = []
        self._function: list[str] = []

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        if (
            getattr(test, "id", None) == "TYPE_CHECKING"
            or getattr(test, "attr", None) == "TYPE_CHECKING"
        ):
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._function.append(node.name)
        self.generic_visit(node)
        self._function.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def _note(self, node: ast.Import | ast.ImportFrom) -> None:
        mine = [t for t in _target(self.module, node) if t.split(".")[0] == ROOT]
        self.targets.update(t for t in mine if t in MODULES and t != self.module)
        if mine and self._function and (self.module, self._function[-1]) not in LAZY_ALLOWED:
            self.lazy.append((self._function[-1], node.lineno))

    visit_Import = visit_ImportFrom = _note


def read(module: str) -> _Imports:
    found = _Imports(module)
    found.visit(ast.parse(MODULES[module].read_text()))
    return found


GRAPH = {module: read(module) for module in MODULES}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Return the strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_imports__form_no_cycle():
    assert cycles({m: found.targets for m, found in GRAPH.items()}) == []


def test_imports__none_hidden_inside_a_function():
    lazy = {m: found.lazy for m, found in GRAPH.items() if found.lazy}
    assert lazy == {}


def test_cycles__are_found_when_there_is_one():
    # The check itself must be able to fail.
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_layers__models_import_no_service():
    services = (
        "storage",
        "transitions",
        "worker",
        "triggering",
        "duties",
        "signals",
        "admin",
        "api",
    )
    for module, found in GRAPH.items():
        if module.startswith(f"{ROOT}.models"):
            bad = [t for t in found.targets if t.split(".")[1] in services]
            assert bad == [], module


# -- where the decision lives (docs/architecture.md) --------------------------------------

DECISIONS = f"{ROOT}.transitions.decisions"
#: What resolves or decides: only the decision home (and the retry package's own
#: ``resolve``, which it wraps) may call these on a run's behalf.
DECIDING_NAMES = {"decide", "run_policy", "resolve"}


def _names_imported(module: str) -> set[tuple[str, str]]:
    """Every ``from <package module> import <name>`` of ``module``: (module, name) pairs."""
    found = set()
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(ROOT):
            found.update((node.module, alias.name) for alias in node.names)
    return found


def _calls(module: str, name: str) -> list[int]:
    """Lines of ``module`` that call ``name`` or ``<anything>.name``."""
    lines = []
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.Call):
            func = node.func
            called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if called == name:
                lines.append(node.lineno)
    return lines


def test_storage__imports_no_decision_and_resolves_no_policy():
    # Storage applies decisions made above it: it is handed them, never makes them.
    bad = {}
    for module, found in GRAPH.items():
        if not module.startswith(f"{ROOT}.storage"):
            continue
        deciding = {
            f"{source}.{name}"
            for source, name in _names_imported(module)
            if name in DECIDING_NAMES or source == DECISIONS
        }
        if DECISIONS in found.targets or deciding:
            bad[module] = sorted(deciding | ({DECISIONS} & found.targets))
    assert bad == {}


def test_decide__is_called_only_in_the_decision_home():
    callers = {
        module: lines
        for module in MODULES
        if module != DECISIONS and (lines := _calls(module, "decide"))
    }
    importers = sorted(
        module
        for module in MODULES
        if module != DECISIONS and (DECISIONS, "decide") in _names_imported(module)
    )
    assert (callers, importers) == ({}, [])


def test_decision_checks__can_fail():
    # The checks read real modules: the home itself calls decide, and the worker imports it.
    assert _calls(DECISIONS, "decide")
    assert any(source == DECISIONS for source, _ in _names_imported(f"{ROOT}.worker.outcomes"))
