"""Django ``@task`` functions the tests enqueue on StraitBackend (imported by autodiscovery).

Only imported when Django's task framework is there (tests/settings.py sets TASKS then).
"""

from __future__ import annotations

import asyncio

try:
    from django.tasks import task
except ImportError:  # Django 5.2 with the django-tasks backport
    from django_tasks import task


class TaskBoom(Exception):
    """Raised by a task that always fails."""


@task
def add(a, b):
    return a + b


@task(queue_name="emails")
def send_email(to):
    return {"sent": to}


@task
def fail():
    raise TaskBoom("the task failed on purpose")


@task
def exits():
    raise SystemExit(3)


@task
async def async_exits():
    raise SystemExit(4)


@task(backend="retrying")
def fail_twice():
    raise TaskBoom("again")


@task(takes_context=True)
def with_context(context, x):
    return {"attempt": context.attempt, "id": context.task_result.id, "x": x}


@task
def returns_a_set():
    return {1, 2}


@task
def returns_a_tuple():
    return (1, "two")


@task
async def async_add(a, b):
    await asyncio.sleep(0)
    return a + b


@task(takes_context=True)
async def async_with_context(context):
    return context.attempt


@task
def label(name):
    return name
