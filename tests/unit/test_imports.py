"""The package imports in layers: no module imports, directly or through others, one that imports it.

Two graphs are read from every module's imports. Between modules, the imports
that run (also those inside functions; not those under ``if TYPE_CHECKING:``)
form no cycle, and none hides inside a function to step around one. Between
packages (each module counted as its top-level package under django_strait:
``storage.orm.claims`` is ``storage``; a loose module such as ``conf`` is its
own), every import counts, ``TYPE_CHECKING`` and function-level ones too: they
form no cycle, and each goes to its own layer or a lower one, in the order of
:data:`LAYERS` (docs/architecture.md, "Layers"). A cycle, or an import that
climbs a layer, is a sign that code sits in the wrong place: move it to where
it belongs (a rule both sides need to a lower layer), never hide the import.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "django_strait"
ROOT = "django_strait"
#: Functions that may import the package lazily: Django's own hook for "apps are ready".
LAZY_ALLOWED = {
    ("django_strait.apps", "ready"),
    # The OJS workflows (and DRF) load when an OJS workflow ends, not in every worker
    # at start: a memory choice (docs/ojs.md, Workflows), not a cycle dodged.
    ("django_strait.ojs.receivers", "ojs_batch_callbacks"),
}


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
    services = ("storage", "transitions", "services", "worker", "duties", "admin", "api")
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


# -- packages and layers (docs/architecture.md, "Layers") ---------------------------------

#: The layers, lowest first: a package may import its own layer and those below it.
LAYERS: list[tuple[str, set[str]]] = [
    # Pure rules: no database, no network, no settings (retry/ and resilience/ inside).
    ("rules", {"rules"}),
    # Settings, their system checks, the database router, the signals' definitions,
    # the package root (the public API, which loads the rest lazily) and the
    # documented re-export of rules.retry.
    ("settings", {"__init__", "conf", "checks", "database", "signals", "retry"}),
    # Speaking to endpoints (HTTP, signing, the Python executor, webhook events).
    ("wire", {"dispatch"}),
    ("models", {"models"}),
    # The one door to run-side rows, its backends, and reads shared by surfaces.
    ("storage", {"storage"}),
    # Decisions (transitions.decisions) and the named changes that apply them
    # through storage and send the signals (transitions.sending).
    ("transitions", {"transitions"}),
    ("services", {"services", "workflows", "webhooks", "circuits"}),
    # What runs in a worker process: the worker and its duties.
    ("runtime", {"worker", "duties"}),
    (
        "surfaces",
        {
            "admin",
            "api",
            "ojs",
            "tasks",
            "management",
            "metrics",
            "templatetags",
            "testing",
            "apps",
        },
    ),
]
RANK = {package: i for i, (_, packages) in enumerate(LAYERS) for package in packages}


def package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def every_import(module: str) -> set[str]:
    """The package modules ``module`` imports anywhere: at the top, in functions, for types."""
    found = set()
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.update(t for t in _target(module, node) if t in MODULES and t != module)
    return found


def package_graph(modules: dict[str, set[str]]) -> dict[str, dict[str, set[str]]]:
    """package -> imported package -> the ``module -> module`` imports behind the edge."""
    graph: dict[str, dict[str, set[str]]] = {package(m): {} for m in modules}
    for module, targets in modules.items():
        for target in targets:
            a, b = package(module), package(target)
            if a != b:
                graph[a].setdefault(b, set()).add(f"{module} -> {target}")
    return graph


PACKAGES = package_graph({module: every_import(module) for module in MODULES})


def climbing(graph: dict[str, dict[str, set[str]]], rank: dict[str, int]) -> dict[str, list[str]]:
    """The imports that go to a higher layer, by ``package -> package``."""
    return {
        f"{a} -> {b}": sorted(why)
        for a, edges in graph.items()
        for b, why in edges.items()
        if rank[b] > rank[a]
    }


def test_packages__form_no_cycle_counting_type_checking_and_function_imports():
    assert cycles({a: set(edges) for a, edges in PACKAGES.items()}) == []


def test_packages__each_has_a_layer():
    assert sorted(set(PACKAGES) - set(RANK)) == []


def test_packages__import_only_their_layer_or_lower():
    assert climbing(PACKAGES, RANK) == {}


def test_rules__import_nothing_outside_the_pure_layer():
    # Pure rules read no storage, no model, no setting and no surface.
    outside = {
        a_b: why for a_b, why in climbing(PACKAGES, RANK).items() if a_b.startswith("rules ")
    }
    assert outside == {}
    assert set(PACKAGES["rules"]) == set()


def test_layer_checks__can_fail():
    graph = package_graph(
        {
            "django_strait.rules.x": {"django_strait.storage.y"},
            "django_strait.storage.y": {"django_strait.rules.x"},
        }
    )
    assert cycles({a: set(edges) for a, edges in graph.items()}) == [["rules", "storage"]]
    assert climbing(graph, RANK) == {
        "rules -> storage": ["django_strait.rules.x -> django_strait.storage.y"]
    }
    # And the graph is read from real modules, TYPE_CHECKING imports included.
    assert "rules" in PACKAGES["storage"]
    assert "worker" in PACKAGES["metrics"]  # metrics/__init__ re-exports the worker's metrics
