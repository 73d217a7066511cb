"""How long to wait before retry number n (docs/retry.md): the strategy formulas, floor, cap, jitter.

Pure functions of the policy, the retry number and a ``random.Random`` the
caller passes in, so tests choose the randomness instead of patching it.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import random
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from django_strait.rules.retry import functions

if TYPE_CHECKING:
    from django_strait.rules.retry.policy import RetryPolicy

logger = logging.getLogger(__name__)

Formula = Callable[["RetryPolicy", int, random.Random], float]


def compute_delay(policy: RetryPolicy, retry_number: int, *, rng: random.Random) -> float:
    """Return the delay in seconds before retry ``retry_number`` (1 = after the first failure)."""
    delay = clamp(policy, raw_delay(policy, retry_number, rng=rng))
    if policy.jitter > 0:
        delay = clamp(policy, delay * rng.uniform(1 - policy.jitter, 1 + policy.jitter))
    return delay


def retry_delay_for(
    policy: RetryPolicy, retry_number: int, *, requested: float | None, rng: random.Random
) -> float:
    """Return the delay a handler or ``Retry-After`` asked for, held in bounds; else compute it."""
    if requested is None or isinstance(requested, bool) or not _is_number(requested):
        return compute_delay(policy, retry_number, rng=rng)
    asked = float(requested)
    if math.isnan(asked):
        return compute_delay(policy, retry_number, rng=rng)
    return clamp(policy, asked)


def raw_delay(policy: RetryPolicy, retry_number: int, *, rng: random.Random) -> float:
    """Return the strategy's delay before floor, cap and jitter (may be ``inf``)."""
    if isinstance(retry_number, bool) or not isinstance(retry_number, int) or retry_number < 1:
        raise ValueError(f"retry_number must be an integer >= 1, got {retry_number!r}")
    try:
        return _FORMULAS[policy.strategy](policy, retry_number, rng)
    except OverflowError:
        # A retry number too large for float arithmetic is past any cap.
        return math.inf


def clamp(policy: RetryPolicy, seconds: float) -> float:
    """Return ``seconds`` held within ``[min_delay, max_delay]``."""
    return min(max(seconds, policy.min_delay), policy.max_delay)


def _power(base: float, exponent: float) -> float:
    # A huge retry number must cap at max_delay, not crash the recorder.
    try:
        return math.pow(base, exponent)
    except OverflowError:
        return math.inf


def _scaled(initial: float, factor: float) -> float:
    # 0 * inf is nan; a zero base stays zero however large the factor.
    return 0.0 if initial == 0 else initial * factor


def _exponential(policy: RetryPolicy, n: int, rng: random.Random) -> float:
    return _scaled(policy.initial_delay, _power(policy.backoff_coefficient, n - 1))


def _linear(policy: RetryPolicy, n: int, rng: random.Random) -> float:
    return policy.initial_delay * n


def _fixed(policy: RetryPolicy, n: int, rng: random.Random) -> float:
    return policy.initial_delay


def _polynomial(policy: RetryPolicy, n: int, rng: random.Random) -> float:
    return _scaled(policy.initial_delay, _power(n, policy.backoff_coefficient))


def _custom(policy: RetryPolicy, n: int, rng: random.Random) -> float:
    return policy.delays[min(n, len(policy.delays)) - 1]


def _power_curve(policy: RetryPolicy, n: int, rng: random.Random) -> float:
    # Sidekiq's curve: a polynomial in n plus additive jitter that widens with n.
    spread = n * rng.uniform(0, policy.jitter_window) if policy.jitter_window > 0 else 0.0
    return policy.initial_delay + _power(n, policy.backoff_coefficient) + spread


def _zizq_curve(policy: RetryPolicy, n: int, rng: random.Random) -> float:
    # Zizq's compute_backoff, in seconds: base + n^E milliseconds + U(0, J) * (n + 1).
    spread = (n + 1) * rng.uniform(0, policy.jitter_window) if policy.jitter_window > 0 else 0.0
    return policy.initial_delay + _power(n, policy.backoff_coefficient) / 1000 + spread


def _function(policy: RetryPolicy, n: int, rng: random.Random) -> float:
    fn = functions.table.find(policy.function)
    if fn is None:
        # Refused where policies are written; a stored one may predate a rename.
        logger.warning(
            "Retry function %s for retry %s: %s; using the exponential formula",
            policy.function,
            n,
            functions.table.unknown(policy.function),
        )
        return _exponential(policy, n, rng)
    try:
        returned = fn(n, policy)
    except Exception:
        logger.exception(
            "Retry function %s failed for retry %s; using the exponential formula",
            policy.function,
            n,
        )
        return _exponential(policy, n, rng)
    seconds = _returned_seconds(returned)
    if seconds is None:
        logger.warning(
            "Retry function %s returned %r for retry %s, not a number of seconds; "
            "using the exponential formula",
            policy.function,
            returned,
            n,
        )
        return _exponential(policy, n, rng)
    return seconds


def _returned_seconds(returned: Any) -> float | None:
    if isinstance(returned, dt.timedelta):
        return returned.total_seconds()
    if isinstance(returned, bool) or not _is_number(returned):
        return None
    try:
        seconds = float(returned)
    except OverflowError:
        return math.inf
    return None if math.isnan(seconds) else seconds


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float | Decimal | Fraction)


_FORMULAS: dict[str, Formula] = {
    "exponential": _exponential,
    "linear": _linear,
    "fixed": _fixed,
    "polynomial": _polynomial,
    "power": _power_curve,
    "zizq": _zizq_curve,
    "custom": _custom,
    "function": _function,
}

#: The strategy names, in the order the docs list them.
STRATEGIES: tuple[str, ...] = tuple(_FORMULAS)
