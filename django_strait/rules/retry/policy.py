"""The retry policy (docs/retry.md): its fields, their validation, and the merge of its layers.

A policy is built by :func:`merge`, field by field, from built-in defaults <
``STRAIT["DEFAULT_RETRY"]`` < job columns < workflow step < run override;
:func:`resolve` does that for a job and a run. The delay formulas live in
``django_strait.rules.retry.delays`` and are re-exported here.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

from django_strait.rules import bounds
from django_strait.rules.callables import NAME_MAX_LENGTH
from django_strait.rules.retry import formats, functions
from django_strait.rules.retry.delays import (
    STRATEGIES,
    clamp,
    compute_delay,
    raw_delay,
    retry_delay_for,
)
from django_strait.rules.retry.durations import DURATION_SYNTAX, parse_duration
from django_strait.rules.retry.errors import PolicyError

__all__ = [
    "BUILTIN",
    "FIELDS",
    "JOB_COLUMNS",
    "ON_EXHAUSTION",
    "STRATEGIES",
    "PolicyError",
    "RetryPolicy",
    "check_registered",
    "clamp",
    "collect_errors",
    "compute_delay",
    "is_non_retryable",
    "job_partial",
    "merge",
    "raw_delay",
    "resolve",
    "retry_delay_for",
    "validate_field",
    "validate_partial",
]

ON_EXHAUSTION: tuple[str, ...] = ("dead_letter", "discard")
#: The largest attempt count the ``max_attempts`` columns can store.
MAX_ATTEMPTS_LIMIT = bounds.MAX_ATTEMPTS[1]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """A complete retry policy; durations in seconds. Build one with :func:`merge`."""

    max_attempts: int = 3
    strategy: str = "exponential"
    initial_delay: float = 1.0
    backoff_coefficient: float = 2.0
    max_delay: float = 3600.0
    min_delay: float = 1.0
    delays: tuple[float, ...] = ()
    jitter: float = 0.2
    jitter_window: float = 30.0
    function: str | None = None
    non_retryable_errors: tuple[str, ...] = ()
    on_exhaustion: str = "dead_letter"

    def as_dict(self) -> dict[str, Any]:
        """Return the policy in dict form (lists for sequences), e.g. for JSON."""
        return {
            name: list(value) if isinstance(value, tuple) else value
            for name, value in ((f, getattr(self, f)) for f in FIELDS)
        }


FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(RetryPolicy))
#: The built-in defaults (docs/retry.md), the bottom layer of every policy.
BUILTIN = RetryPolicy()

#: Policy field -> ``Job`` column. ``min_delay`` has no column.
JOB_COLUMNS: dict[str, str] = {
    "max_attempts": "max_attempts",
    "strategy": "retry_strategy",
    "initial_delay": "retry_initial_delay_secs",
    "backoff_coefficient": "retry_backoff_coefficient",
    "max_delay": "retry_max_delay_secs",
    "delays": "retry_delays_secs",
    "jitter": "retry_jitter",
    "jitter_window": "retry_jitter_window_secs",
    "function": "retry_function",
    "non_retryable_errors": "non_retryable_errors",
    "on_exhaustion": "on_exhaustion",
}

#: A workflow step's retry fields (docs/workflows.md: the seed's names), by policy field.
STEP_FIELDS: dict[str, str] = {
    "max_attempts": "max_attempts",
    "strategy": "retry_backoff",
    "initial_delay": "retry_initial_delay_secs",
    "max_delay": "retry_max_delay_secs",
}


def step_partial(step: Mapping[str, Any], *, prefix: str = "step") -> dict[str, Any]:
    """Return the partial policy a workflow step's fields set; missing or None fields inherit.

    An error names the step's own field (``{prefix}.retry_backoff``).
    """
    return {
        key: validate_field(key, step[name], field=f"{prefix}.{name}")
        for key, name in STEP_FIELDS.items()
        if step.get(name) is not None
    }


def validate_partial(raw: Mapping[str, Any], *, prefix: str = "retry") -> dict[str, Any]:
    """Return the normalised fields of a partial policy; raise PolicyError on the first bad one."""
    values, errors = _validate_each(raw, prefix)
    if errors:
        raise errors[0]
    _check_custom_delays(values, prefix)
    return values


def collect_errors(raw: Any, *, prefix: str = "retry") -> list[PolicyError]:
    """Return every problem of a partial policy (empty when it is valid)."""
    values, errors = _validate_each(raw, prefix)
    if errors:
        return errors
    try:
        _check_custom_delays(values, prefix)
        merge(BUILTIN, values, prefix=prefix)
    except PolicyError as exc:
        return [exc]
    return []


def validate_field(key: str, value: Any, *, field: str) -> Any:
    """Return one policy field's value normalised; raise PolicyError naming ``field``."""
    if key not in _VALIDATORS:
        raise PolicyError(
            field, key, f"one of {', '.join(FIELDS)}", problem=f"unknown field {key!r}"
        )
    return _VALIDATORS[key](value, field)


def job_partial(job: Any) -> dict[str, Any]:
    """Return the partial policy a ``Job``'s columns set; empty columns inherit."""
    values: dict[str, Any] = {}
    for key, column in JOB_COLUMNS.items():
        value = getattr(job, column, None)
        if value is None or value == "" or value == []:
            continue
        try:
            values[key] = validate_field(key, value, field=f"retry.{key}")
        except PolicyError as exc:
            raise exc.with_field(exc.field, column=column) from None
    try:
        _check_custom_delays(values, "retry")
    except PolicyError as exc:
        raise exc.with_field(exc.field, column=JOB_COLUMNS["delays"]) from None
    return values


def merge(
    base: RetryPolicy, *partials: Mapping[str, Any] | None, prefix: str = "retry"
) -> RetryPolicy:
    """Return ``base`` overridden field by field by each partial in turn (later wins)."""
    values: dict[str, Any] = {}
    for partial in partials:
        if partial:
            values.update(validate_partial(partial, prefix=prefix))
    policy = dataclasses.replace(base, **values)
    _check_whole(policy, prefix, touched=values.keys())
    return policy


def resolve(
    job: Any,
    run_max_attempts: int | None = None,
    run_overrides: Mapping[str, Any] | None = None,
    *,
    step: Mapping[str, Any] | None = None,
    defaults: RetryPolicy,
) -> RetryPolicy:
    """Return the policy for a run: ``defaults`` (the settings' policy) < job < workflow step < run.

    Pass ``strait_settings.DEFAULT_RETRY`` as ``defaults``: it already merges the
    built-in defaults with ``STRAIT["DEFAULT_RETRY"]`` and its environment.
    """
    attempts = None
    if run_max_attempts is not None:
        attempts = {
            "max_attempts": validate_field("max_attempts", run_max_attempts, field="max_attempts")
        }
    job_layer = job_partial(job) if job is not None else None
    return merge(defaults, job_layer, step, run_overrides, attempts)


def is_non_retryable(error_type: str, patterns: Sequence[str]) -> bool:
    """Return whether ``error_type`` matches a pattern: exact, or ``prefix.*`` as a prefix."""
    for pattern in patterns:
        if pattern.endswith(".*"):
            if error_type.startswith(pattern[:-1]):
                return True
        elif error_type == pattern:
            return True
    return False


def _validate_each(raw: Any, prefix: str) -> tuple[dict[str, Any], list[PolicyError]]:
    if not isinstance(raw, Mapping):
        allowed = f"an object (dict) of policy fields: {', '.join(FIELDS)}"
        return {}, [
            PolicyError(prefix, raw, allowed, problem=f"a {type(raw).__name__} is not an object")
        ]
    values: dict[str, Any] = {}
    fields, errors = formats.translate(raw, prefix)
    for key, source in fields.items():
        if source.value is None and (key in _VALIDATORS or source.key != key):
            continue  # null means "inherit", as an empty Job column does
        try:
            values[key] = validate_field(key, source.value, field=f"{prefix}.{source.key}")
        except PolicyError as exc:
            errors.append(exc)
    return values, errors


def _check_custom_delays(values: Mapping[str, Any], prefix: str) -> None:
    if values.get("strategy") == "custom" and "delays" in values and not values["delays"]:
        raise PolicyError(f"{prefix}.delays", [], _DELAYS_FOR_CUSTOM)


def _check_whole(policy: RetryPolicy, prefix: str, *, touched: Any) -> None:
    if policy.min_delay > policy.max_delay:
        if "max_delay" in touched:
            raise PolicyError(
                f"{prefix}.max_delay",
                policy.max_delay,
                f"a duration >= min_delay ({policy.min_delay:g} s)",
            )
        raise PolicyError(
            f"{prefix}.min_delay",
            policy.min_delay,
            f"a duration <= max_delay ({policy.max_delay:g} s)",
        )
    if policy.strategy == "custom" and not policy.delays:
        raise PolicyError(f"{prefix}.delays", list(policy.delays), _DELAYS_FOR_CUSTOM)
    if policy.strategy == "function" and not policy.function:
        raise PolicyError(
            f"{prefix}.function", policy.function, f"{_FUNCTION_SYNTAX} when strategy is 'function'"
        )


_DELAYS_FOR_CUSTOM = "a non-empty list of delays when strategy is 'custom'"
_FUNCTION_SYNTAX = (
    "the name of a function f(retry_number, policy) -> seconds registered in code with "
    "@retry_function (its dotted path, unless it was given a name)"
)
_PATTERN = re.compile(r"[^\s*]+(?:\.\*)?")
_PATTERN_SYNTAX = (
    f"a list of at most {bounds.MAX_LIST_ENTRIES} error types of at most "
    f"{bounds.ERROR_TYPE_MAX_LENGTH} characters, each exact (http.404) or a prefix ending in "
    "'.*' (auth.*); no other wildcard"
)


def _finite(value: Any) -> float | None:
    # bool is an int subclass, but True as a coefficient is always a mistake.
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal | Fraction):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _max_attempts(value: Any, field: str) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not 1 <= value <= MAX_ATTEMPTS_LIMIT
    ):
        raise PolicyError(
            field,
            value,
            f"an integer from 1 to {MAX_ATTEMPTS_LIMIT} (0, OJS's 'no retry', only in a policy "
            "written in OJS's fields)",
        )
    return int(value)


def _strategy(value: Any, field: str) -> str:
    name = value.strip().lower() if isinstance(value, str) else None
    if name not in STRATEGIES:
        raise PolicyError(field, value, f"one of {', '.join(STRATEGIES)}")
    return name


def _duration(value: Any, field: str) -> float:
    return parse_duration(value, field=field)


def _positive_duration(value: Any, field: str) -> float:
    seconds = parse_duration(value, field=field)
    if seconds <= 0:
        raise PolicyError(field, value, "a duration > 0 (e.g. 1s, 500ms); zero would retry at once")
    return seconds


def _coefficient(value: Any, field: str) -> float:
    number = _finite(value)
    low, high = bounds.BACKOFF_COEFFICIENT
    if number is None or not low <= number <= high:
        raise PolicyError(field, value, bounds.allowed(low, high))
    return number


def _jitter(value: Any, field: str) -> float:
    number = _finite(value)
    if number is None or not 0 <= number <= 1:
        raise PolicyError(field, value, "a number from 0 to 1 (0.2 = ±20 %; 0 disables jitter)")
    return number


def _delays(value: Any, field: str) -> tuple[float, ...]:
    if (
        isinstance(value, str | bytes)
        or not isinstance(value, Sequence)
        or len(value) > bounds.MAX_LIST_ENTRIES
    ):
        raise PolicyError(
            field,
            _brief(value),
            f"a list of at most {bounds.MAX_LIST_ENTRIES} durations, each {DURATION_SYNTAX}",
        )
    return tuple(parse_duration(item, field=f"{field}[{i}]") for i, item in enumerate(value))


def _function(value: Any, field: str) -> str:
    # The shape only: whether it is registered is asked where a policy is written
    # (check_registered), so a stored name this process lacks never voids a policy.
    if not isinstance(value, str) or not value.strip() or len(value) > NAME_MAX_LENGTH:
        raise PolicyError(field, value, _FUNCTION_SYNTAX)
    return value.strip()


def check_registered(values: Mapping[str, Any], *, prefix: str = "retry") -> None:
    """Refuse a partial policy whose ``function`` is not registered with ``@retry_function``."""
    name = values.get("function")
    if name is not None and functions.table.find(name) is None:
        raise PolicyError(
            f"{prefix}.function",
            name,
            _FUNCTION_SYNTAX,
            column=JOB_COLUMNS["function"],
            problem=functions.table.unknown(name),
        )


def _error_patterns(value: Any, field: str) -> tuple[str, ...]:
    if (
        isinstance(value, str | bytes)
        or not isinstance(value, Sequence)
        or len(value) > bounds.MAX_LIST_ENTRIES
    ):
        raise PolicyError(field, _brief(value), _PATTERN_SYNTAX)
    for i, pattern in enumerate(value):
        if (
            not isinstance(pattern, str)
            or len(pattern) > bounds.ERROR_TYPE_MAX_LENGTH
            or not _PATTERN.fullmatch(pattern)
        ):
            raise PolicyError(f"{field}[{i}]", _brief(pattern), _PATTERN_SYNTAX)
    return tuple(value)


def _brief(value: Any) -> Any:
    """A value short enough to quote in an error message."""
    text = repr(value)
    return value if len(text) <= 200 else f"{text[:150]}... ({len(text)} characters)"


def _on_exhaustion(value: Any, field: str) -> str:
    if value not in ON_EXHAUSTION:
        raise PolicyError(field, value, f"one of {', '.join(ON_EXHAUSTION)}")
    return str(value)


_VALIDATORS: dict[str, Callable[[Any, str], Any]] = {
    "max_attempts": _max_attempts,
    "strategy": _strategy,
    "initial_delay": _duration,
    "backoff_coefficient": _coefficient,
    "max_delay": _positive_duration,
    "min_delay": _positive_duration,
    "delays": _delays,
    "jitter": _jitter,
    "jitter_window": _duration,
    "function": _function,
    "non_retryable_errors": _error_patterns,
    "on_exhaustion": _on_exhaustion,
}
