"""Django's task framework: ``django.tasks`` (Django >= 6.0) or the ``django-tasks`` backport.

The one place that chooses. Everything else in ``django_strait.tasks`` imports
the framework's names from here, so the backend reads the same on Django 6 and
on Django 5.2 with ``pip install django-strait[tasks]``.
"""

from __future__ import annotations

try:
    from django.tasks import task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import (
        Task,
        TaskContext,
        TaskError,
        TaskResult,
        TaskResultStatus,
    )
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued
    from django.utils.json import normalize_json

    FRAMEWORK = "django.tasks"
except ImportError:  # Django 5.2: the backport, an optional extra
    try:
        from django_tasks import task_backends
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import (
            Task,
            TaskContext,
            TaskError,
            TaskResult,
            TaskResultStatus,
        )
        from django_tasks.exceptions import InvalidTaskError as InvalidTask
        from django_tasks.exceptions import TaskResultDoesNotExist
        from django_tasks.signals import task_enqueued
        from django_tasks.utils import normalize_json
    except ImportError as exc:
        raise ImportError(
            "django_strait.tasks needs Django's task framework: Django >= 6.0, or on "
            "Django 5.2 the django-tasks backport (pip install 'django-strait[tasks]')"
        ) from exc

    FRAMEWORK = "django_tasks"

__all__ = [
    "FRAMEWORK",
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "normalize_json",
    "task_backends",
    "task_enqueued",
]
