"""run_python with real sync and async handlers, a real thread pool (no database)."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from django_strait.dispatch.python import (
    RunContext,
    accepts_context,
    call_sync,
    is_async,
    run_python,
    settle,
)
from django_strait.dispatch.results import TRUNCATION_MARKER
from django_strait.rules.actions import DeadLetter, Discard, Error, Fail, Retry
from django_strait.rules.outcome import Action, Kind, Outcome

POOL_PREFIX = "strait-test-pool"


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(2, thread_name_prefix=POOL_PREFIX) as executor:
        yield executor


def context_for(payload: Any = None, **fields: Any) -> RunContext:
    values: dict[str, Any] = {"run_id": 11, "attempt": 2, "job": "reports", "payload": payload}
    values.update(fields)
    return RunContext(**values)


def run(
    func: Callable[..., Any],
    payload: Any = None,
    *,
    executor: ThreadPoolExecutor | None = None,
    context: RunContext | None = None,
    max_result_bytes: int = 65536,
) -> Outcome:
    """Run one attempt of ``func`` on a fresh event loop."""
    coro = run_python(
        func,
        payload,
        context or context_for(payload),
        executor=executor,
        max_result_bytes=max_result_bytes,
    )
    return asyncio.run(coro)


# Handlers


def double(payload):
    return {"doubled": payload["n"] * 2, "thread": threading.current_thread().name}


async def async_double(payload):
    await asyncio.sleep(0)
    return {"doubled": payload["n"] * 2, "thread": threading.current_thread().name}


def with_context(payload, context):
    return {"run_id": context.run_id, "attempt": context.attempt, "job": context.job}


async def async_with_context(payload, context):
    return {"run_id": context.run_id, "payload": context.payload}


def star_args(*args):
    return len(args)


def keyword_only_context(payload, *, context=None):
    return context is None


def raise_(exc: BaseException) -> Callable[[Any], Any]:
    def handler(payload):
        raise exc

    return handler


def async_raise(exc: BaseException) -> Callable[[Any], Any]:
    async def handler(payload):
        raise exc

    return handler


def returning(value: Any) -> Callable[[Any], Any]:
    def handler(payload):
        return value

    return handler


class PaymentDeclined(Exception):
    pass


# Calling


def test_run_python__sync_handler_runs_in_the_executor(pool):
    outcome = run(double, {"n": 21}, executor=pool)

    assert outcome.kind is Kind.SUCCEEDED
    assert outcome.attempt_outcome == "succeeded"
    assert outcome.result["doubled"] == 42
    assert outcome.result["thread"].startswith(POOL_PREFIX)
    assert outcome.duration_ms >= 0


def test_run_python__sync_handler_without_executor_uses_the_loops_default():
    outcome = run(double, {"n": 1}, executor=None)

    assert outcome.result["doubled"] == 2
    assert outcome.result["thread"] != threading.main_thread().name


def test_run_python__async_handler_runs_on_the_loop(pool):
    outcome = run(async_double, {"n": 5}, executor=pool)

    assert outcome.kind is Kind.SUCCEEDED
    assert outcome.result == {"doubled": 10, "thread": threading.main_thread().name}


def test_run_python__passes_context_to_a_second_parameter(pool):
    outcome = run(with_context, {"x": 1}, executor=pool)

    assert outcome.result == {"run_id": 11, "attempt": 2, "job": "reports"}


def test_run_python__passes_context_to_an_async_handler(pool):
    outcome = run(async_with_context, {"x": 1}, executor=pool)

    assert outcome.result == {"run_id": 11, "payload": {"x": 1}}


def test_run_python__passes_context_to_star_args(pool):
    assert run(star_args, "p", executor=pool).result == 2


def test_run_python__keyword_only_context_is_not_filled(pool):
    assert run(keyword_only_context, "p", executor=pool).result is True


def test_run_python__async_callable_object_is_awaited(pool):
    class AsyncHandler:
        async def __call__(self, payload):
            return threading.current_thread().name

    outcome = run(AsyncHandler(), executor=pool)

    assert outcome.result == threading.main_thread().name


def test_run_python__sync_wrapper_returning_a_coroutine_is_awaited(pool):
    def hidden_async(payload):
        return async_double(payload)  # a decorator that lost the coroutine marker

    outcome = run(hidden_async, {"n": 4}, executor=pool)

    assert outcome.result == {"doubled": 8, "thread": threading.main_thread().name}


def test_run_python__context_heartbeat_calls_the_workers_function(pool):
    beats: list[int] = []

    def beating(payload, context):
        context.heartbeat()
        context.heartbeat()
        return "done"

    context = context_for(heartbeat=lambda: beats.append(1))
    outcome = run(beating, executor=pool, context=context)

    assert outcome.result == "done"
    assert beats == [1, 1]


def test_run_context__default_heartbeat_does_nothing():
    assert context_for().heartbeat() is None


# accepts_context


class Handlers:
    def method(self, payload):
        return payload

    def method_with_context(self, payload, context):
        return payload


class Unhashable:
    __hash__ = None  # type: ignore[assignment]

    def __call__(self, payload, context):
        return context.run_id


@pytest.mark.parametrize(
    ("func", "expected"),
    [
        (double, False),
        (with_context, True),
        (async_with_context, True),
        (star_args, True),
        (keyword_only_context, False),
        (lambda payload, context=None: None, True),
        (Handlers().method, False),
        (Handlers().method_with_context, True),
        (functools.partial(with_context, "fixed"), False),
        (Unhashable(), True),
        (len, False),
    ],
)
def test_accepts_context__reads_the_signature(func, expected):
    assert accepts_context(func) is expected


def test_run_python__unhashable_callable_object_works(pool):
    assert run(Unhashable(), executor=pool).result == 11


# Results


def test_run_python__none_result(pool):
    outcome = run(returning(None), executor=pool)

    assert outcome.kind is Kind.SUCCEEDED
    assert outcome.result is None


def test_run_python__non_serialisable_result_is_non_retryable(pool):
    outcome = run(returning({"ids": {1, 2}}), executor=pool)

    assert outcome.kind is Kind.NON_RETRYABLE
    assert outcome.error_type == "python.result_not_serializable"
    assert outcome.error == (
        "The handler returned dict, which is not JSON-serialisable: "
        "Object of type set is not JSON serializable"
    )


def test_run_python__nan_result_is_not_serialisable(pool):
    outcome = run(returning(float("nan")), executor=pool)

    assert outcome.kind is Kind.NON_RETRYABLE
    assert outcome.error_type == "python.result_not_serializable"
    assert "float" in outcome.error


def test_run_python__oversized_result_is_trimmed_json_text(pool):
    # '"' + 100 two-byte characters + '"': 51 bytes keep the quote and 25 characters.
    outcome = run(returning("é" * 100), executor=pool, max_result_bytes=51)

    assert outcome.kind is Kind.SUCCEEDED
    assert outcome.result == '"' + "é" * 25 + TRUNCATION_MARKER.format(limit=51)


def test_run_python__result_of_exactly_the_limit_is_kept(pool):
    value = {"k": "v" * 20}  # {"k":"vvv…"} is 28 bytes

    assert run(returning(value), executor=pool, max_result_bytes=28).result == value


# Actions


@pytest.mark.parametrize("runner", [raise_, async_raise], ids=["sync", "async"])
@pytest.mark.parametrize(
    ("exc", "expected", "error_type", "error"),
    [
        (Discard("duplicate order"), Action.DISCARD, "python.Discard", "duplicate order"),
        (DeadLetter("bad data"), Action.DEAD_LETTER, "python.DeadLetter", "bad data"),
        (Fail("card expired"), Action.FAIL, "python.Fail", "card expired"),
        (Fail(type="billing.expired"), Action.FAIL, "billing.expired", "Fail"),
        (Retry("later"), Action.RETRY, "python.Retry", "later"),
    ],
)
def test_run_python__action_exceptions(pool, runner, exc, expected, error_type, error):
    outcome = run(runner(exc), executor=pool)

    assert outcome.kind is Kind.ACTION
    assert outcome.action is expected
    assert outcome.error_type == error_type
    assert outcome.error == error
    assert outcome.attempt_outcome == "failed"
    assert outcome.retry_after is None


@pytest.mark.parametrize(
    ("delay", "seconds"),
    [(30, 30.0), (2.5, 2.5), ("2m", 120.0), ("PT1H", 3600.0), (0, 0.0)],
)
def test_run_python__retry_delay_becomes_retry_after(pool, delay, seconds):
    outcome = run(raise_(Retry(delay=delay)), executor=pool)

    assert outcome.action is Action.RETRY
    assert outcome.retry_after == seconds


@pytest.mark.parametrize("delay", ["soon", -5, True])
def test_run_python__unreadable_retry_delay_still_retries(pool, delay):
    outcome = run(raise_(Retry("later", delay=delay)), executor=pool)

    assert outcome.action is Action.RETRY
    assert outcome.retry_after is None
    assert outcome.error.startswith("later (ignored Retry.delay:")
    assert outcome.error.endswith("the retry policy's delay applies)")


# Errors


def test_run_python__typed_error_is_retryable_with_its_type(pool):
    outcome = run(raise_(Error("card declined", type="billing.declined")), executor=pool)

    assert outcome.kind is Kind.RETRYABLE
    assert outcome.error_type == "billing.declined"
    assert outcome.error == "card declined"


def test_run_python__untyped_error_is_python_error(pool):
    outcome = run(raise_(Error("no type")), executor=pool)

    assert outcome.kind is Kind.RETRYABLE
    assert outcome.error_type == "python.Error"


def crash(payload):
    raise PaymentDeclined(f"card {payload['card']} declined")


async def async_crash(payload):
    raise PaymentDeclined(f"card {payload['card']} declined")


@pytest.mark.parametrize("handler", [crash, async_crash], ids=["sync", "async"])
def test_run_python__exception_is_retryable_named_after_its_class(pool, handler):
    outcome = run(handler, {"card": "4242"}, executor=pool)

    assert outcome.kind is Kind.RETRYABLE
    assert outcome.attempt_outcome == "failed"
    assert outcome.error_type == "python.PaymentDeclined"
    assert outcome.error == "PaymentDeclined: card 4242 declined"
    assert outcome.response_excerpt.startswith("Traceback (most recent call last):")
    assert "raise PaymentDeclined(f\"card {payload['card']} declined\")" in (
        outcome.response_excerpt
    )
    assert "django_strait" not in outcome.response_excerpt
    assert outcome.response_excerpt.endswith("PaymentDeclined: card 4242 declined\n")


def test_run_python__long_traceback_keeps_its_end(pool):
    # Two functions calling each other: Python folds identical repeated frames.
    def ping(n):
        if n == 0:
            raise ValueError("at the bottom")
        return pong(n - 1)

    def pong(n):
        return ping(n - 1)

    outcome = run(lambda payload: ping(50), executor=pool)

    assert len(outcome.response_excerpt) == 1000
    assert outcome.response_excerpt.startswith("…")
    assert outcome.response_excerpt.endswith("ValueError: at the bottom\n")


@pytest.mark.parametrize("runner", [raise_, async_raise], ids=["sync", "async"])
def test_run_python__system_exit_is_contained(pool, runner):
    async def two_runs() -> tuple[Outcome, Outcome]:
        first = await run_python(runner(SystemExit(3)), None, context_for(), executor=pool)
        second = await run_python(double, {"n": 1}, context_for(), executor=pool)
        return first, second

    exited, after = asyncio.run(two_runs())

    assert exited.kind is Kind.RETRYABLE
    assert exited.error_type == "python.SystemExit"
    assert exited.error == "SystemExit: 3"
    assert after.result["doubled"] == 2


def test_run_python__stop_iteration_from_a_sync_handler_is_an_error(pool):
    outcome = run(raise_(StopIteration("done early")), executor=pool)

    assert outcome.kind is Kind.RETRYABLE
    assert outcome.error_type == "python.StopIteration"


@pytest.mark.parametrize("runner", [raise_, async_raise], ids=["sync", "async"])
def test_run_python__keyboard_interrupt_propagates(pool, runner):
    with pytest.raises(KeyboardInterrupt):
        run(runner(KeyboardInterrupt()), executor=pool)


def test_run_python__cancellation_propagates(pool):
    with pytest.raises(asyncio.CancelledError):
        run(async_raise(asyncio.CancelledError()), executor=pool)


# call_sync and settle: the worker's own handler threads


def test_call_sync__returns_the_outcome_in_the_calling_thread():
    outcome = call_sync(double, {"n": 3}, context_for())

    assert outcome.kind is Kind.SUCCEEDED
    assert outcome.result == {"doubled": 6, "thread": threading.current_thread().name}


def test_call_sync__passes_the_context():
    assert call_sync(with_context, None, context_for()).result["run_id"] == 11


def test_call_sync__maps_exceptions_and_contains_system_exit():
    assert call_sync(crash, {"card": "1"}, context_for()).error_type == "python.PaymentDeclined"
    assert call_sync(raise_(Discard("x")), None, context_for()).action is Action.DISCARD
    assert call_sync(raise_(SystemExit(1)), None, context_for()).error_type == "python.SystemExit"


def test_call_sync__keyboard_interrupt_propagates():
    with pytest.raises(KeyboardInterrupt):
        call_sync(raise_(KeyboardInterrupt()), None, context_for())


def test_call_sync__hands_back_a_returned_coroutine_for_settle():
    def hidden_async(payload):
        return async_double(payload)

    pending = call_sync(hidden_async, {"n": 5}, context_for())
    assert not isinstance(pending, Outcome)

    outcome = asyncio.run(settle(pending))
    assert outcome.result == {"doubled": 10, "thread": threading.main_thread().name}


def test_settle__maps_an_exception_of_the_awaitable():
    outcome = asyncio.run(settle(async_raise(Fail("no"))(None)))

    assert outcome.action is Action.FAIL


def test_is_async__tells_coroutine_functions_apart():
    assert is_async(async_double)
    assert not is_async(double)
