"""The import paths the documentation gives users keep working after the layered layout.

The layout (docs/architecture.md, "Layers") moved most modules into rules/,
services/, storage/ and transitions/. The paths users write in settings, tools and
tests stay where they were, at the module itself or as a re-export
(``django_strait.retry``): each is imported here by the path the docs give.
"""

from __future__ import annotations

import importlib

import pytest

import django_strait.rules.retry as retry_rules
from tests.conftest import ROOT

DOCUMENTED = [
    ("django_strait.database", "StraitRouter"),  # DATABASE_ROUTERS (docs/security.md)
    ("django_strait.conf", "strait_settings"),  # docs/settings.md
    ("django_strait.conf", "SettingError"),
    ("django_strait.signals", "circuit_opened"),  # receivers (docs/observability.md)
    ("django_strait.signals", "budget_soft_limit"),
    ("django_strait.signals", "run_succeeded"),
    ("django_strait.circuits", "reset_circuit"),  # docs/resilience.md
    ("django_strait.circuits", "reset_health"),
    ("django_strait.webhooks.redelivery", "redeliver"),  # docs/webhooks.md
    ("django_strait.dispatch.signing", "verify"),  # endpoints verifying a signature
    ("django_strait.tasks", "StraitBackend"),  # TASKS["BACKEND"] (docs/django-tasks.md)
    ("django_strait.testing", "drain"),  # docs/testing.md
    ("django_strait.retry", "resolve"),  # re-export of rules.retry (docs/retry.md)
    ("django_strait.retry", "compute_delay"),
    ("django_strait.retry", "merge"),
    ("django_strait.retry", "BUILTIN"),
]


@pytest.mark.parametrize(("module", "name"), DOCUMENTED)
def test_documented_path__imports(module, name):
    assert getattr(importlib.import_module(module), name) is not None


def test_retry_reexport__is_the_rules_module_names():
    old = importlib.import_module("django_strait.retry")
    assert old.__all__ == retry_rules.__all__
    assert all(getattr(old, name) is getattr(retry_rules, name) for name in old.__all__)


def test_retry_reexport__is_imported_by_nothing_in_the_package():
    users = [
        path.relative_to(ROOT)
        for path in (ROOT / "django_strait").rglob("*.py")
        if path != ROOT / "django_strait" / "retry.py"
        and "django_strait.retry " in path.read_text()
        or "django_strait.retry." in path.read_text()
    ]
    assert users == []
