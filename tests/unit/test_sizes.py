"""No class over 250 lines, no module over 600, anywhere in django_strait (issue 37).

A class that grows past the limit is doing the work of several parts: the worker's
engine was one, and is now a composer of its parts (docs/architecture.md).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "django_strait"
MAX_CLASS_LINES = 250
MAX_MODULE_LINES = 600
#: Modules over the limit while another change splits them (storage/workflows.py), or
#: not yet split (conf.py, since STRAIT["STORAGE"]): remove each as it comes under.
MODULES_BEING_SPLIT = {"conf.py"}
#: Classes over the limit while another change splits them: the Storage Protocol and
#: the two backends, grown by the named verbs that replaced the generic apply and the
#: free-function modules (workflows, the outbox).
CLASSES_BEING_SPLIT = {"storage/base.py", "storage/orm/__init__.py", "storage/postgres/__init__.py"}


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "migrations" not in p.parts)


def classes_over(path: Path, limit: int) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [
        f"{node.name}: {node.end_lineno - node.lineno + 1} lines"
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > limit
    ]


def test_sizes__no_class_is_over_250_lines():
    found = {
        str(p.relative_to(PACKAGE)): over
        for p in modules()
        if (over := classes_over(p, MAX_CLASS_LINES))
    }
    assert set(found) <= CLASSES_BEING_SPLIT, found


def test_sizes__no_module_is_over_600_lines():
    found = {
        str(p.relative_to(PACKAGE)): n
        for p in modules()
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert set(found) <= MODULES_BEING_SPLIT, found


@pytest.mark.parametrize("limit", [1])
def test_sizes__the_check_finds_a_class_over_its_limit(limit):
    assert classes_over(PACKAGE / "worker" / "engine.py", limit)
