"""The value an executor returns: what happened on one attempt, nothing persisted.

Executors (HTTP, Python) turn a run into an :class:`Outcome`; the worker's
completer maps it to one transition (``django_strait.transitions.decisions``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

#: The error type of an attempt whose worker stopped heartbeating (the reaper's rescue).
LOST_ERROR_TYPE = "worker.lost"


class Kind(enum.Enum):
    """The shape of an attempt's result."""

    SUCCEEDED = "succeeded"
    #: Failed; the retry policy decides (unless the error type is non-retryable).
    RETRYABLE = "retryable"
    #: Failed in a way that retrying cannot fix (e.g. ``http.404``).
    NON_RETRYABLE = "non_retryable"
    #: The handler/endpoint asked for an action: see ``action``.
    ACTION = "action"


class Action(enum.Enum):
    """An explicit instruction from a handler or endpoint (OJS codes)."""

    RETRY = "retry"
    DISCARD = "discard"
    DEAD_LETTER = "dead_letter"
    FAIL = "fail"


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one attempt produced."""

    kind: Kind
    #: JSON-serialisable result (or trimmed text) for the run's ``result``.
    result: Any = None
    error_type: str = ""
    error: str = ""
    action: Action | None = None
    #: A delay asked for by the handler (``Retry(delay=)``) or ``Retry-After``, in seconds.
    retry_after: float | None = None
    #: RunAttempt.outcome: succeeded / failed / timed_out.
    attempt_outcome: str = "succeeded"
    status_code: int | None = None
    endpoint: str = ""
    response_excerpt: str = ""
    duration_ms: int = 0
    #: What the attempt cost, as the endpoint reported it (``Strait-Cost``); None = not said.
    cost: Decimal | None = None

    @property
    def succeeded(self) -> bool:
        return self.kind is Kind.SUCCEEDED


def success(result: Any = None, **extra: Any) -> Outcome:
    """Build a successful outcome."""
    return Outcome(Kind.SUCCEEDED, result=result, **extra)


def failure(error_type: str, error: str, *, retryable: bool = True, **extra: Any) -> Outcome:
    """Build a failed outcome with an error type such as ``http.503``."""
    extra.setdefault("attempt_outcome", "failed")
    kind = Kind.RETRYABLE if retryable else Kind.NON_RETRYABLE
    return Outcome(kind, error_type=error_type, error=error, **extra)


def action(act: Action, error_type: str = "", error: str = "", **extra: Any) -> Outcome:
    """Build an outcome carrying an explicit handler/endpoint action."""
    extra.setdefault("attempt_outcome", "failed")
    return Outcome(Kind.ACTION, action=act, error_type=error_type, error=error, **extra)
