"""django-strait: durable background jobs on your Django database.

from django_strait import job, handler, retry_function, trigger, trigger_many
from django_strait import define_workflow, trigger_workflow, cancel_workflow_run
from django_strait import Retry, Discard, DeadLetter, Fail, Error
from django_strait import replay, cancel, discard
from django_strait import TriggerError, PolicyError, InvalidTransition, SettingError
from django_strait import WorkflowError

``job``, ``handler`` and ``retry_function`` may be imported and used anywhere,
also before Django's app registry is ready (an app's ``__init__.py``).
"""

from __future__ import annotations

from typing import Any

from django_strait.rules.actions import DeadLetter, Discard, Error, Fail, Retry

__all__ = [
    "DeadLetter",
    "Discard",
    "Error",
    "Fail",
    "InvalidTransition",
    "PolicyError",
    "Retry",
    "ScheduleError",
    "SettingError",
    "TriggerError",
    "UnknownSettingError",
    "WorkflowError",
    "cancel",
    "discard",
    "handler",
    "job",
    "replay",
    "retry_function",
    "cancel_workflow_run",
    "define_workflow",
    "trigger",
    "trigger_many",
    "trigger_workflow",
]

__version__ = "0.1.0"

_LAZY = {
    "job": "django_strait.services.decorators",
    "handler": "django_strait.rules.handlers",
    "retry_function": "django_strait.rules.retry.functions",
    "trigger": "django_strait.services.triggering",
    "trigger_many": "django_strait.services.triggering",
    "replay": "django_strait.transitions",
    "cancel": "django_strait.transitions",
    "discard": "django_strait.transitions",
    "define_workflow": "django_strait.workflows",
    "trigger_workflow": "django_strait.workflows",
    "cancel_workflow_run": "django_strait.workflows",
    # The errors a caller of the functions above can catch.
    "TriggerError": "django_strait.services.triggering",
    "PolicyError": "django_strait.rules.retry.errors",
    "InvalidTransition": "django_strait.rules.states",
    "ScheduleError": "django_strait.rules.cron",
    "SettingError": "django_strait.conf",
    "UnknownSettingError": "django_strait.conf",
    "WorkflowError": "django_strait.workflows",
}


def __getattr__(name: str) -> Any:
    # The ORM-backed parts load on first use so that importing the package
    # (e.g. from settings.py) never touches the app registry.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'django_strait' has no attribute {name!r}")
