"""What a Python handler raises to tell the worker what to do with its run.

``raise Retry(delay="30s")`` retries (optionally with its own delay),
``raise Discard("why")`` drops the run, ``raise DeadLetter("why")`` sends it to
the dead-letter queue, ``raise Fail("why")`` marks it failed for good, and
``raise Error("why", type="billing.declined")`` is an ordinary retryable error
with a type of your choosing (matched by ``non_retryable_errors``). Any other
exception retries with error type ``python.<ExceptionClass>``.
"""

from __future__ import annotations

from typing import Any


class StraitAction(Exception):
    """Base of the handler actions."""

    def __init__(self, message: str = "", *, type: str | None = None) -> None:  # noqa: A002
        super().__init__(message)
        self.message = message
        self.type = type


class Retry(StraitAction):
    """Retry the run; ``delay`` (seconds or a duration string) replaces the policy's delay."""

    def __init__(self, message: str = "", *, delay: Any = None, type: str | None = None) -> None:  # noqa: A002
        super().__init__(message, type=type)
        self.delay = delay


class Discard(StraitAction):
    """Drop the run: status ``discarded``, errors kept."""


class DeadLetter(StraitAction):
    """Send the run to the dead-letter queue now, whatever attempts remain."""


class Fail(StraitAction):
    """Mark the run ``failed``: a recognised permanent failure."""


class Error(StraitAction):
    """A retryable error with a named ``type`` (e.g. ``billing.declined``)."""
