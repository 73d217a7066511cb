"""Run a Python handler once and describe what it did as an Outcome.

A handler is called as ``handler(payload)``, or ``handler(payload, context)`` when
it declares a second positional parameter. Coroutine functions run on the worker's
event loop; plain functions run in the worker's thread pool. What the handler
returns becomes the result; what it raises becomes a retry, an action or an error
(see :mod:`django_strait.rules.actions`). Nothing is persisted here.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import json
import logging
import time
import traceback
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django_strait.dispatch.results import trim
from django_strait.rules.actions import DeadLetter, Discard, Error, Fail, Retry, StraitAction
from django_strait.rules.outcome import Action, Outcome, action, failure, success
from django_strait.rules.retry.durations import parse_duration

__all__ = ["RunContext", "accepts_context", "call_sync", "is_async", "run_python", "settle"]

logger = logging.getLogger(__name__)

#: How much of a handler's traceback an attempt keeps (the end: where it raised).
#: The worker stores response excerpts of up to 1,000 characters.
TRACEBACK_CHARS = 1000

_ACTIONS: tuple[tuple[type[StraitAction], Action], ...] = (
    (Retry, Action.RETRY),
    (Discard, Action.DISCARD),
    (DeadLetter, Action.DEAD_LETTER),
    (Fail, Action.FAIL),
)


# Built once: json.dumps with options builds a new encoder on every call (hot path).
_COMPACT_JSON = json.JSONEncoder(allow_nan=False, separators=(",", ":"))


def _no_heartbeat() -> None:
    """Do nothing: the worker passes a real heartbeat."""


@dataclass(frozen=True)
class RunContext:
    """What a handler that takes a second parameter learns about its run."""

    run_id: int
    attempt: int
    job: str
    payload: Any
    #: Call ``context.heartbeat()`` during long work so the reaper knows the run is alive.
    heartbeat: Callable[[], None] = _no_heartbeat
    #: A workflow step's parents' results, by step name (empty for a plain run or a root).
    parents: Mapping[str, Any] = field(default_factory=dict)
    #: A workflow step's ``{"run_id", "step", "parents"}``; None for a plain run.
    workflow: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class _Plan:
    is_async: bool
    wants_context: bool


def _wants_context(func: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        # No introspectable signature (some builtins): call with the payload alone.
        return False
    positional = 0
    for parameter in parameters:
        if parameter.kind is parameter.VAR_POSITIONAL:
            return True
        if parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD):
            positional += 1
    return positional >= 2


def _compute_plan(func: Callable[..., Any]) -> _Plan:
    # An object whose __call__ is a coroutine function is async too.
    call = type(func).__call__ if not inspect.isroutine(func) else None
    is_async = inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(call)
    return _Plan(is_async=is_async, wants_context=_wants_context(func))


# Signatures are read once per handler, not once per run: this is the hot path.
_cached_plan = functools.lru_cache(maxsize=4096)(_compute_plan)


def _plan(func: Callable[..., Any]) -> _Plan:
    try:
        return _cached_plan(func)
    except TypeError:
        # An unhashable callable object cannot be a cache key; inspect it each time.
        return _compute_plan(func)


def accepts_context(func: Callable[..., Any]) -> bool:
    """Tell whether ``func`` takes a second positional parameter for the run context."""
    return _plan(func).wants_context


async def run_python(
    func: Callable[..., Any],
    payload: Any,
    context: RunContext,
    *,
    executor: concurrent.futures.Executor | None,
    max_result_bytes: int = 65536,
) -> Outcome:
    """Call ``func`` for one attempt of ``context``'s run and describe what it did."""
    started = time.perf_counter()
    plan = _plan(func)
    args = (payload, context) if plan.wants_context else (payload,)
    try:
        if plan.is_async:
            value = await func(*args)
        else:
            loop = asyncio.get_running_loop()
            returned, value = await loop.run_in_executor(executor, _call_in_thread, func, args)
            if not returned:
                return _raised(value, _elapsed_ms(started))
            if inspect.isawaitable(value):
                # A plain function that returned a coroutine (a decorator that hid
                # an async handler): finish that work on the loop.
                value = await value
    except (KeyboardInterrupt, asyncio.CancelledError, GeneratorExit):
        raise
    except BaseException as exc:  # SystemExit included: a handler never stops the worker
        return _raised(exc, _elapsed_ms(started))
    return _returned(value, max_result_bytes, _elapsed_ms(started))


def _call_in_thread(
    func: Callable[..., Any], args: tuple[Any, ...], close: bool = True
) -> tuple[bool, Any]:
    # The exception travels back as a value: a StopIteration raised through the
    # executor's future would never resolve the awaiting asyncio future.
    try:
        return True, func(*args)
    except BaseException as exc:
        return False, exc
    finally:
        if close:
            _close_old_connections()


def _close_old_connections() -> None:
    # Imported here so that this module loads without configured Django settings.
    from django.db import close_old_connections

    try:
        # The pool thread is reused: drop a connection the handler opened, as
        # Django does at the end of a request, so threads do not hoard them.
        close_old_connections()
    except Exception:
        logger.exception("Closing database connections after a handler failed")


def _elapsed_ms(started: float) -> int:
    return int((time.perf_counter() - started) * 1000)


def _returned(value: Any, limit: int, duration_ms: int) -> Outcome:
    if value is None:
        return success(None, duration_ms=duration_ms)
    try:
        # ASCII output: its length in characters is its length in bytes.
        text = _COMPACT_JSON.encode(value)
    except (TypeError, ValueError, RecursionError) as exc:
        message = (
            f"The handler returned {type(value).__name__}, which is not JSON-serialisable: {exc}"
        )
        return failure(
            "python.result_not_serializable", message, retryable=False, duration_ms=duration_ms
        )
    if len(text) <= limit:
        return success(value, duration_ms=duration_ms)
    readable = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return success(trim(readable, limit), duration_ms=duration_ms)


def _raised(exc: BaseException, duration_ms: int) -> Outcome:
    if isinstance(exc, KeyboardInterrupt | asyncio.CancelledError):
        raise exc
    if isinstance(exc, Error):
        return failure(
            exc.type or "python.Error",
            exc.message or "Error",
            duration_ms=duration_ms,
            response_excerpt=_traceback_excerpt(exc),
        )
    for cls, requested in _ACTIONS:
        if isinstance(exc, cls):
            return _action(requested, exc, duration_ms)
    name = type(exc).__name__
    return failure(
        f"python.{name}",
        f"{name}: {_text(exc)}",
        duration_ms=duration_ms,
        response_excerpt=_traceback_excerpt(exc),
    )


def _action(requested: Action, exc: StraitAction, duration_ms: int) -> Outcome:
    name = type(exc).__name__
    message = exc.message or name
    retry_after = None
    if isinstance(exc, Retry):
        retry_after, note = _retry_delay(exc.delay)
        message += note
    return action(
        requested,
        exc.type or f"python.{name}",
        message,
        retry_after=retry_after,
        duration_ms=duration_ms,
    )


def _retry_delay(delay: Any) -> tuple[float | None, str]:
    if delay is None:
        return None, ""
    # Imported here: the duration syntax belongs to the retry package, and a
    # handler asking for its own delay is rare enough not to load it up front.
    try:
        return parse_duration(delay, field="Retry.delay"), ""
    except ValueError as exc:  # a bad delay must not lose the retry it came with
        return None, f" (ignored {exc}; the retry policy's delay applies)"


def _text(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:
        return "<the exception's str() failed>"


def _traceback_excerpt(exc: BaseException) -> str:
    tb = exc.__traceback__
    # Skip this module's frames: the handler's own frames are what the reader needs.
    while tb is not None and tb.tb_frame.f_globals.get("__name__") == __name__:
        tb = tb.tb_next
    text = "".join(traceback.format_exception(type(exc), exc, tb))
    if len(text) <= TRACEBACK_CHARS:
        return text
    return "…" + text[1 - TRACEBACK_CHARS :]


def is_async(func: Callable[..., Any]) -> bool:
    """Tell whether ``func`` is a coroutine function (it must run on the event loop)."""
    return _plan(func).is_async


def call_sync(
    func: Callable[..., Any],
    payload: Any,
    context: RunContext,
    *,
    max_result_bytes: int = 65536,
    close_connections: bool = True,
) -> Outcome | Awaitable[Any]:
    """Call a plain-function handler in the calling thread and describe what it did.

    For the worker's own handler threads: no future or loop hop per call. If the
    handler returned an awaitable, that is returned for the loop to ``settle()``.
    ``close_connections=False`` leaves the thread's database connections alone
    afterwards: the caller's thread is not a worker's (a test's transaction).
    """
    started = time.perf_counter()
    args = (payload, context) if _plan(func).wants_context else (payload,)
    returned, value = _call_in_thread(func, args, close_connections)
    if not returned:
        return _raised(value, _elapsed_ms(started))
    if inspect.isawaitable(value):
        return value
    return _returned(value, max_result_bytes, _elapsed_ms(started))


async def settle(awaitable: Awaitable[Any], *, max_result_bytes: int = 65536) -> Outcome:
    """Await what a plain-function handler returned and describe the result."""
    started = time.perf_counter()
    try:
        value = await awaitable
    except (KeyboardInterrupt, asyncio.CancelledError, GeneratorExit):
        raise
    except BaseException as exc:
        return _raised(exc, _elapsed_ms(started))
    return _returned(value, max_result_bytes, _elapsed_ms(started))
