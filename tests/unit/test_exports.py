"""What ``django_strait`` exports: every public name resolves, the errors among them are errors."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys

import pytest

import django_strait
from django_strait.services.triggering import TriggerError
from tests.conftest import ROOT

ERRORS = (
    "TriggerError",
    "PolicyError",
    "InvalidTransition",
    "ScheduleError",
    "SettingError",
    "UnknownSettingError",
    "WorkflowError",
)


@pytest.mark.parametrize("name", django_strait.__all__)
def test_exports__every_public_name_resolves(name):
    assert getattr(django_strait, name) is not None


@pytest.mark.parametrize("name", ERRORS)
def test_exports__the_public_errors_are_exceptions(name):
    assert name in django_strait.__all__
    assert issubclass(getattr(django_strait, name), Exception)


def test_exports__trigger_error_is_the_one_trigger_raises():
    assert django_strait.TriggerError is TriggerError


def test_exports__importing_the_package_needs_no_settings():
    # settings.py may import django_strait: that must not touch Django's app registry.
    code = "import django_strait; print(sorted(django_strait.__all__)[0])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: The modules of what a project calls on runs and workflows: a function of theirs that
#: the docs call by its bare name must be importable from the package itself.
USER_MODULES = (
    "django_strait.transitions.people",
    "django_strait.services.triggering",
    "django_strait.workflows",
)


def _docs() -> str:
    return "\n".join(page.read_text() for page in PAGES)


def test_exports__every_name_the_docs_import_from_the_package_resolves():
    imported = re.findall(r"from django_strait import ([\w, ]+)", _docs())
    names = {n.strip() for line in imported for n in line.split(",") if n.strip()}
    assert {"job", "trigger", "Retry"} <= names  # the pattern still finds them
    missing = sorted(n for n in names if not hasattr(django_strait, n))
    assert missing == []


def test_exports__every_run_or_workflow_function_the_docs_call_is_exported():
    called = set(re.findall(r"`(\w+)\([^`]*\)`", _docs()))
    ours = {
        name
        for module in USER_MODULES
        for name in called
        if callable(getattr(importlib.import_module(module), name, None))
    }
    assert {"trigger", "cancel", "define_workflow"} <= ours
    assert sorted(ours - set(django_strait.__all__)) == []


def test_exports__every_dotted_function_the_docs_name_resolves():
    dotted = set(re.findall(r"\bdjango_strait((?:\.\w+)+)\(", _docs()))
    assert dotted  # django_strait.replay(...), django_strait.circuits.reset_circuit(...)
    wrong = []
    for path in dotted:
        *module, name = f"django_strait{path}".split(".")
        try:
            found = getattr(importlib.import_module(".".join(module)), name)
        except (ImportError, AttributeError):
            found = None
        if not callable(found):
            wrong.append(f"django_strait{path}")
    assert wrong == []
