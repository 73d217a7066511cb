"""A Strait run read as Django's ``TaskResult``: status, return value, errors, workers.

Statuses (docs/django-tasks.md): queued, dequeued, waiting and system_failed (the reaper
will move it on) read ``READY``; executing ``RUNNING``; completed ``SUCCESSFUL``;
failed, dead_letter, discarded and canceled ``FAILED``. Each attempt that ended
adds one worker id, and one ``TaskError`` when it failed; an executing run
counts its current attempt's worker too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from inspect import iscoroutinefunction
from typing import Any

from django_strait.models import AttemptOutcome, JobRun, RunAttempt
from django_strait.rules.states import RunStatus
from django_strait.tasks.calls import split_error
from django_strait.tasks.framework import Task, TaskError, TaskResult, TaskResultStatus

__all__ = ["STATUSES", "attempts_of", "is_async", "of_run", "remember", "task_of"]

S = RunStatus
STATUSES: dict[str, str] = {
    S.QUEUED: TaskResultStatus.READY,
    S.DEQUEUED: TaskResultStatus.READY,
    S.WAITING: TaskResultStatus.READY,
    S.SYSTEM_FAILED: TaskResultStatus.READY,
    S.EXECUTING: TaskResultStatus.RUNNING,
    S.COMPLETED: TaskResultStatus.SUCCESSFUL,
    S.FAILED: TaskResultStatus.FAILED,
    S.DEAD_LETTER: TaskResultStatus.FAILED,
    S.DISCARDED: TaskResultStatus.FAILED,
    S.CANCELED: TaskResultStatus.FAILED,
}

#: Handler path -> the ``@task`` registered under it in this process.
_tasks: dict[str, Task] = {}


@dataclass(frozen=True, slots=True)
class Attempt:
    """What one ended attempt adds to a result."""

    worker: str
    error: TaskError | None
    started_at: Any


def remember(path: str, task: Task) -> None:
    """Note the task whose handler is registered under ``path``."""
    _tasks[path] = task


def task_of(run: JobRun) -> Task | None:
    """Return the task a run is of, if its job is a task registered here."""
    return _tasks.get(run.job.handler) if run.job.handler else None


def is_async(task: Task) -> bool:
    """Tell whether a task's function is a coroutine function."""
    return iscoroutinefunction(task.func)


def attempts_of(run: JobRun) -> Iterable[Attempt]:
    """Yield the ended attempts of ``run`` since its last replay, in order."""
    rows = (
        RunAttempt.objects.using(run._state.db)
        .filter(run=run, number__gt=run.attempts_before_replay)
        .exclude(outcome=AttemptOutcome.SHORT_CIRCUITED)
        .order_by("number")
        .values_list("worker", "outcome", "error_type", "error", "started_at")
    )
    for worker, outcome, error_type, error, started_at in rows:
        failed = outcome != AttemptOutcome.SUCCEEDED
        yield Attempt(worker, _error(outcome, error_type, error) if failed else None, started_at)


def of_run(run: JobRun, task: Task, alias: str, attempts: list[Attempt]) -> TaskResult:
    """Return ``run`` as the ``TaskResult`` of ``task`` on backend ``alias``."""
    status = STATUSES.get(run.status, TaskResultStatus.READY)
    workers = [a.worker for a in attempts]
    if status == TaskResultStatus.RUNNING and len(workers) < run.attempt:
        workers.append(run.claimed_by)
    payload = run.payload if isinstance(run.payload, dict) else {}
    result = TaskResult(
        task=task,
        id=str(run.pk),
        status=status,
        enqueued_at=run.created_at,
        started_at=run.started_at if status != TaskResultStatus.READY else None,
        finished_at=run.finished_at if status in _FINISHED else None,
        last_attempted_at=_last_attempted(run, attempts),
        args=list(payload.get("args") or []),
        kwargs=dict(payload.get("kwargs") or {}),
        backend=alias,
        errors=[a.error for a in attempts if a.error is not None],
        worker_ids=workers,
    )
    if status == TaskResultStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", run.result)
    return result


_FINISHED = {TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED}


def _last_attempted(run: JobRun, attempts: list[Attempt]) -> Any:
    if run.status == S.EXECUTING:
        return run.started_at
    return attempts[-1].started_at if attempts else None


def _error(outcome: str, error_type: str, error: str) -> TaskError:
    found = split_error(error)
    if found is not None:
        return TaskError(exception_class_path=found[0], traceback=found[1])
    # Not raised by the task (a timeout, a lost worker, an unknown handler): a builtin
    # class that says what happened, the attempt's own error as the text.
    cls = (
        "builtins.TimeoutError" if outcome == AttemptOutcome.TIMED_OUT else "builtins.RuntimeError"
    )
    return TaskError(exception_class_path=cls, traceback=f"{error_type}: {error}")
