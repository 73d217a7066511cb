"""``StraitBackend``: Django's task API (``@task``, ``enqueue``, ``get_result``) on Strait runs.

``TASKS = {"default": {"BACKEND": "django_strait.tasks.StraitBackend"}}``.
Each ``@task`` function is a Strait job named after its module path (dots
become hyphens), kept in sync like an ``@job`` one, with the function
registered as that job's handler when its module is imported (the worker
imports every app's ``jobs.py`` and ``tasks.py``). ``enqueue`` is a
``trigger``: in the caller's transaction, seen by workers at commit. The task
result's id is the run's id (docs/django-tasks.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from asgiref.sync import sync_to_async
from django.apps import apps
from django.core import checks
from django.db import connections

from django_strait.database import alias_for_id, placed
from django_strait.models import JobRun
from django_strait.rules.handlers import handlers
from django_strait.rules.retry import PolicyError
from django_strait.services import registry
from django_strait.services.registry import JobSpec
from django_strait.services.triggering import TriggerError, trigger
from django_strait.tasks import results
from django_strait.tasks.calls import AsyncTaskCall, TaskCall, payload_of
from django_strait.tasks.framework import (
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    task_enqueued,
)

__all__ = ["StraitBackend", "job_name"]

#: The OPTIONS this backend reads.
OPTIONS = ("RETRY",)
_SLUG = re.compile(r"[-a-zA-Z0-9_]+")
_MAX_RUN_ID = 2**63 - 1


class _Entry:
    """A task's place in the job registry (what ``registry.sync`` reads)."""

    def __init__(self, spec: JobSpec, task: Task) -> None:
        self.spec = spec
        self.task = task


def _declared_queue(task: Task, name: str) -> str | None:
    """On several databases, the queue whose alias the task's job lives on: the one its
    ``@task`` declares (the first registration's: ``task.using(queue_name=...)`` makes a
    variant of the same job). One database: None, as before (the row keeps "default")."""
    if not placed():
        return None
    known = registry.get(name)
    return known.spec.columns.get("queue") if known is not None else task.queue_name


def job_name(task: Task) -> str:
    """Return the Strait job name of a task: its module path, dots as hyphens."""
    # Python names hold no hyphen, so two module paths never share a job name.
    return task.module_path.replace(".", "-")


class StraitBackend(BaseTaskBackend):
    """Run Django ``@task`` functions as durable Strait runs."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.retry = self.options.get("RETRY") if isinstance(self.options, dict) else None
        self._queues_setting = params.get("QUEUES")
        #: Why ``OPTIONS["RETRY"]`` cannot be used (check E104 says it); None when it can.
        self._retry_problem = _retry_problem(alias, self.retry)

    def validate_task(self, task: Task) -> None:
        """Check ``task`` as Django does, then register it so workers may run it."""
        super().validate_task(task)
        name = job_name(task)
        if len(name) > 200 or not _SLUG.fullmatch(name):
            raise InvalidTask(
                f"{task.module_path!r} cannot name a Strait job: at most 200 ASCII letters, "
                "digits and underscores in its module path"
            )
        self._register(task, name)

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        """Queue a run of ``task`` (in the caller's transaction) and return its result."""
        self.validate_task(task)
        if self._retry_problem:
            # No run under a policy other than the one the settings meant.
            raise InvalidTask(self._retry_problem)
        try:
            run = trigger(
                job_name(task),
                payload_of(args, kwargs),
                run_at=task.run_after,
                priority=task.priority,
                queue=task.queue_name,
            )
        except TriggerError as exc:
            raise InvalidTask(str(exc)) from exc
        result = results.of_run(run, task, self.alias, [])
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult:
        """Return the result of the task run whose id is ``result_id``."""
        run = self._run(result_id)
        task = results.task_of(run)
        if task is None:
            raise TaskResultDoesNotExist(result_id)
        return results.of_run(run, task, self.alias, list(results.attempts_of(run)))

    async def aget_result(self, result_id: str) -> TaskResult:
        """See ``get_result``."""
        return await sync_to_async(self.get_result, thread_sensitive=True)(result_id)

    def check(self, **kwargs: Any) -> Iterable[checks.CheckMessage]:
        """Say what is wrong with this backend's configuration."""
        yield from _check_app(self.alias)
        yield from _check_queues(self.alias, self._queues_setting, self.queues)
        yield from _check_options(self.alias, self.options)

    def _run(self, result_id: Any) -> JobRun:
        text = result_id if isinstance(result_id, str) else ""
        if (
            not text.isascii()
            or not text.isdigit()
            or len(text) > len(str(_MAX_RUN_ID))
            or not 0 < int(text) <= _MAX_RUN_ID
        ):
            raise TaskResultDoesNotExist(result_id)
        # Several databases: the id says which alias the run lives on (None: none of them).
        where = alias_for_id(int(text))
        if where is None:
            raise TaskResultDoesNotExist(result_id)
        run = JobRun.objects.using(where).select_related("job").filter(pk=int(text)).first()
        if run is None:
            raise TaskResultDoesNotExist(result_id)
        return run

    def _register(self, task: Task, name: str) -> None:
        # A bad RETRY is the settings' fault, not the task's: @task runs at import
        # time (in AppConfig.ready), where raising would stop `manage.py check` before
        # it could report E104. The task registers without it; enqueue() refuses.
        spec = registry.spec_of(
            task.func, name=name, queue=_declared_queue(task, name), priority=None, max_attempts=None,
            retry=None if self._retry_problem else self.retry, timeout=None,
            description=f"@task {task.module_path}",
        )  # fmt: skip
        registry.register(_Entry(spec, task))
        call_class = AsyncTaskCall if results.is_async(task) else TaskCall
        context_for = self._async_context if results.is_async(task) else self._context
        handlers.put(spec.path, call_class(task, context_for))
        results.remember(spec.path, task)

    def _context(self, run_id: int) -> TaskResult:
        return self.get_result(str(run_id))

    async def _async_context(self, run_id: int) -> TaskResult:
        # On the worker's loop: read in a pool thread and close its connection there,
        # so no thread keeps one open for the rest of the worker's life.
        return await sync_to_async(self._closing_result, thread_sensitive=False)(run_id)

    def _closing_result(self, run_id: int) -> TaskResult:
        try:
            return self.get_result(str(run_id))
        finally:
            connections.close_all()


def _check_app(alias: str) -> Iterable[checks.CheckMessage]:
    if not apps.is_installed("django_strait"):
        yield checks.Error(
            f"TASKS[{alias!r}] uses django_strait.tasks.StraitBackend, but django_strait "
            "is not in INSTALLED_APPS",
            hint="Add 'django_strait' to INSTALLED_APPS and run migrate.",
            id="django_strait.E101",
        )


def _check_queues(alias: str, setting: Any, queues: Any) -> Iterable[checks.CheckMessage]:
    if isinstance(setting, str | bytes):
        yield checks.Error(
            f"TASKS[{alias!r}]['QUEUES'] is the string {setting!r}, read as one queue per "
            "character; give a list of queue names",
            id="django_strait.E102",
        )
        return
    for queue in sorted(queues, key=repr):
        if not isinstance(queue, str) or not queue or len(queue) > 100 or "\x00" in queue:
            yield checks.Error(
                f"TASKS[{alias!r}]['QUEUES'] holds {queue!r}; a Strait queue is a non-empty "
                "string of at most 100 characters without NUL",
                id="django_strait.E102",
            )


def _check_options(alias: str, options: Any) -> Iterable[checks.CheckMessage]:
    if not isinstance(options, dict):
        yield checks.Error(
            f"TASKS[{alias!r}]['OPTIONS'] must be a dict, got {type(options).__name__}",
            id="django_strait.E103",
        )
        return
    for key in sorted(set(options) - set(OPTIONS), key=str):
        yield checks.Error(
            f"TASKS[{alias!r}]['OPTIONS'] has an unknown key {key!r}; "
            f"StraitBackend reads {', '.join(OPTIONS)}",
            id="django_strait.E103",
        )
    problem = _retry_problem(alias, options.get("RETRY"))
    if problem:
        yield checks.Error(problem, id="django_strait.E104")


def _retry_problem(alias: str, retry: Any) -> str | None:
    """Say why ``OPTIONS["RETRY"]`` cannot be a job's retry policy (None if it can)."""
    if retry is None:
        return None
    try:
        registry.spec_of(
            _retry_problem, name="check", queue=None, priority=None, max_attempts=None,
            retry=retry, timeout=None, description=None,
        )  # fmt: skip
    except (PolicyError, TypeError, AttributeError) as exc:
        return f"TASKS[{alias!r}]['OPTIONS']['RETRY']: {exc}"
    return None
