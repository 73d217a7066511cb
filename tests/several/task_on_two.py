"""A Django ``@task`` on queue "two" (jobs2), for tests/several/control_scenario.py (not named
tasks.py: autodiscovery would import it under settings whose TASKS has no queue "two")."""

from __future__ import annotations

try:
    from django.tasks import task
except ImportError:  # Django 5.2 with the django-tasks backport
    from django_tasks import task


@task(queue_name="two")
def on_two():
    return "two"
