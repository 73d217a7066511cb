"""The bounds of every number a job definition or a run may hold (docs/security.md).

One table, read by the model fields' validators (so the admin's forms, the REST
API's serializers and ``full_clean`` all check the same), by the retry policy's
own checks, and by the worker, which holds the runs of a row that bypassed them
(written by raw SQL, or by an older release) instead of failing on it.

docs/security.md lists these bounds; a test checks that it lists every one.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.utils.deconstruct import deconstructible

#: The longest duration anywhere: a retry delay, a delay before a run, a run_at ahead of now.
#: Ten years keeps ``now + duration`` far from datetime's year-9999 limit.
MAX_DURATION_SECS = 3650 * 86400.0
#: A job's attempt timeout: 1 ms to 7 days.
TIMEOUT_SECS = (0.001, 7 * 86400.0)
#: A retry policy's backoff coefficient (exponential base, polynomial exponent).
BACKOFF_COEFFICIENT = (1.0, 100.0)
#: Most attempts a run may be given (the attempt counters are 32-bit integers).
MAX_ATTEMPTS = (1, 2**31 - 1)
#: Most entries in a custom delay list and in a list of non-retryable error types.
MAX_LIST_ENTRIES = 100
#: Longest non-retryable error type pattern.
ERROR_TYPE_MAX_LENGTH = 200
#: A job's max_concurrency: 0 (or empty) means no limit, as in Strait.
MAX_CONCURRENCY = (0, 100_000)
#: A job's rate limit: runs per window, and the window's length in seconds (1 ms to 1 day).
RATE_LIMIT_MAX = (1, 1_000_000)
RATE_LIMIT_WINDOW_SECS = (0.001, 86400.0)
#: Days a job's finished runs are kept.
RETENTION_DAYS = (1, 3650)
#: A cost or a daily budget: the DecimalFields' 18 digits, 6 after the point.
COST = (Decimal(0), Decimal("999999999999.999999"))
#: A project's soft limit, as a share of its daily budget.
SOFT_LIMIT_RATIO = (0.0, 1.0)
#: A run's priority (Django's task priority range; higher runs first).
PRIORITY = (-100, 100)
#: Most fallback endpoints a job may list.
MAX_FALLBACK_ENDPOINTS = 10
#: Longest job description.
DESCRIPTION_MAX_LENGTH = 10_000
#: Error messages kept on a run or attempt (the full text can be long tracebacks).
ERROR_MAX_CHARS = 4000


def within(low: Any, high: Any, unit: str = "") -> list[Any]:
    """Return a field's validators for a finite number from ``low`` to ``high`` (inclusive).

    Django's min/max validators (which the admin's widgets and the API's schema
    read) with a message naming the whole range, and a check that refuses NaN
    and infinity, which compare as in range.
    """
    message = f"must be {allowed(low, high, unit)}; got %(show_value)s"
    return [FINITE, AtLeast(low, message=message), AtMost(high, message=message)]


def allowed(low: Any, high: Any, unit: str = "") -> str:
    """Say what a range allows: 'a number from 1 to 100 seconds'."""
    return f"a number from {_show(low)} to {_show(high)}{f' {unit}' if unit else ''}"


def _finite(value: Any) -> bool:
    if isinstance(value, Decimal):
        return value.is_finite()
    return not isinstance(value, float) or math.isfinite(value)


class AtLeast(MinValueValidator):
    """Django's minimum check, leaving NaN and infinity to FINITE (a NaN Decimal cannot compare)."""

    def compare(self, a: Any, b: Any) -> bool:
        return _finite(a) and super().compare(a, b)


class AtMost(MaxValueValidator):
    """Django's maximum check, leaving NaN and infinity to FINITE."""

    def compare(self, a: Any, b: Any) -> bool:
        return _finite(a) and super().compare(a, b)


@deconstructible
class FiniteValidator:
    """Refuse NaN and infinity (they pass min/max checks: every comparison with NaN is false)."""

    message = "must be a finite number; got %(value)s"

    def __call__(self, value: Any) -> None:
        if not _finite(value):
            raise ValidationError(self.message, code="finite", params={"value": value})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FiniteValidator)

    def __hash__(self) -> int:
        return hash(FiniteValidator)


FINITE = FiniteValidator()


def out_of_bounds(value: Any, low: Any, high: Any) -> str | None:
    """Return why ``value`` is not a finite number within ``[low, high]``, or None."""
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        return f"{value!r} is not a number"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value!r} is not a finite number"
    if isinstance(value, Decimal) and not value.is_finite():
        return f"{value} is not a finite number"
    if not low <= value <= high:
        return f"{_show(value)} is out of range; allowed: {allowed(low, high)}"
    return None


def _show(number: Any) -> str:
    if isinstance(number, float) and number.is_integer() and abs(number) < 1e15:
        number = int(number)
    if isinstance(number, int):
        return f"{number:,}" if abs(number) < 10**15 else f"{number:.3e}"
    if isinstance(number, Decimal):
        return f"{number.normalize():,f}"
    return f"{number:g}"


def trim(text: str, limit: int = ERROR_MAX_CHARS) -> str:
    """Cut ``text`` to ``limit`` characters, saying so."""
    if len(text) <= limit:
        return text
    return text[: limit - 20] + f"... [{len(text) - limit + 20} chars cut]"
