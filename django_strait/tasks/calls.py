"""A ``@task`` function as a Strait handler: its run's payload in, the task's call out.

A task run's payload is ``{"args": [...], "kwargs": {...}}``. The handler the
worker calls unpacks it, passes a ``TaskContext`` first when the task takes
one, and checks the return value is JSON as Django defines it (a task that
returns anything else fails, not retried, with a ``TypeError``). An exception
the task raises is re-raised as a Strait ``Error`` of the usual type
(``python.<Class>``, so ``non_retryable_errors`` match as for any job) whose
message starts with the exception's module-qualified class path and carries
the traceback: Django's ``TaskError`` is read back from it.
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

from django_strait.rules.actions import Error, Fail, StraitAction
from django_strait.tasks.framework import Task, TaskContext, normalize_json
from django_strait.transitions.decisions import ERROR_MAX_CHARS

__all__ = ["AsyncTaskCall", "TaskCall", "error_message", "payload_of", "split_error"]

#: Between the ``path: message`` line and the traceback in an attempt's error.
SEPARATOR = "\n\n"
#: Room the error keeps for the first line; the traceback keeps its end.
_HEADER_CHARS = 500


def payload_of(args: Any, kwargs: Any) -> dict[str, Any]:
    """Return a task call's arguments as a run payload (JSON as Django normalises it)."""
    return {"args": normalize_json(list(args)), "kwargs": normalize_json(dict(kwargs))}


def class_path(cls: type) -> str:
    """Return ``module.QualName`` of a class, as Django's ``TaskError`` names it."""
    return f"{cls.__module__}.{cls.__qualname__}"


def error_message(exc: BaseException) -> str:
    """Return the attempt error for ``exc``: ``path: message``, a blank line, its traceback."""
    header = f"{class_path(type(exc))}: {_text(exc)}"[:_HEADER_CHARS]
    text = "".join(traceback.format_exception(exc))
    room = ERROR_MAX_CHARS - len(header) - len(SEPARATOR)
    if len(text) > room:
        text = "…" + text[1 - room :]  # keep the end: where it raised
    return header + SEPARATOR + text


def split_error(error: str) -> tuple[str, str] | None:
    """Return the class path and traceback of an error written by :func:`error_message`."""
    header, sep, tb = error.partition(SEPARATOR)
    path, colon, _ = header.partition(": ")
    if not sep or not colon or "." not in path or " " in path or "\n" in path:
        return None
    return path, tb


#: What a task call lets through as raised: Strait's own actions, and what stops or
#: cancels the worker (a timeout cancels an async task's coroutine). Everything else,
#: SystemExit included, is the task's failure, recorded with its own class path.
_PASSED_ON = (StraitAction, KeyboardInterrupt, asyncio.CancelledError, GeneratorExit)


class TaskCall:
    """The handler registered for a plain ``@task`` function."""

    def __init__(self, task: Task, context_for: Callable[[int], Any]) -> None:
        self.task = task
        self._context_for = context_for
        # dotted_path(handler) must be the task's path: the name it is registered under.
        self.__module__ = task.func.__module__
        self.__qualname__ = task.func.__qualname__
        self.__name__ = task.func.__name__

    def __call__(self, payload: Any, context: Any) -> Any:
        args, kwargs = _arguments(payload)
        if self.task.takes_context:
            args = [TaskContext(task_result=self._context_for(context.run_id)), *args]
        try:
            value = self.task.func(*args, **kwargs)
        except _PASSED_ON:
            raise
        except BaseException as exc:  # SystemExit too, as django-tasks records it
            raise _error(exc) from None
        return _json(value)


class AsyncTaskCall(TaskCall):
    """The handler registered for an ``async def`` ``@task`` function."""

    def __init__(self, task: Task, context_for: Callable[[int], Awaitable[Any]]) -> None:
        super().__init__(task, context_for)

    async def __call__(self, payload: Any, context: Any) -> Any:  # type: ignore[override]
        args, kwargs = _arguments(payload)
        if self.task.takes_context:
            args = [TaskContext(task_result=await self._context_for(context.run_id)), *args]
        try:
            value = await self.task.func(*args, **kwargs)
        except _PASSED_ON:
            raise
        except BaseException as exc:
            raise _error(exc) from None
        return _json(value)


def _arguments(payload: Any) -> tuple[list[Any], dict[str, Any]]:
    payload = payload if isinstance(payload, dict) else {}
    return list(payload.get("args") or []), dict(payload.get("kwargs") or {})


def _error(exc: BaseException) -> Error:
    return Error(error_message(exc), type=f"python.{type(exc).__name__}")


def _json(value: Any) -> Any:
    try:
        return normalize_json(value)
    except (TypeError, ValueError) as exc:
        # Django: a task's return value must be JSON. Not retried: it would fail again.
        problem = TypeError(f"the task returned {type(value).__name__}, which is not JSON: {exc}")
        raise Fail(error_message(problem), type="python.TypeError") from None


def _text(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:
        return "<the exception's str() failed>"
