"""What ``django_strait`` exports: every public name resolves, the errors among them are errors."""

from __future__ import annotations

import subprocess
import sys

import pytest

import django_strait
from django_strait.triggering import TriggerError

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
