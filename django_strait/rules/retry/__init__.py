"""Retry policies: durations, the layered policy, and the delay before each retry (docs/retry.md)."""

from __future__ import annotations

from django_strait.rules.retry.durations import DURATION_SYNTAX, MAX_DURATION, parse_duration
from django_strait.rules.retry.functions import retry_function
from django_strait.rules.retry.policy import (
    BUILTIN,
    FIELDS,
    JOB_COLUMNS,
    ON_EXHAUSTION,
    STEP_FIELDS,
    STRATEGIES,
    PolicyError,
    RetryPolicy,
    check_registered,
    clamp,
    collect_errors,
    compute_delay,
    is_non_retryable,
    job_partial,
    merge,
    raw_delay,
    resolve,
    retry_delay_for,
    step_partial,
    validate_field,
    validate_partial,
)

__all__ = [
    "BUILTIN",
    "DURATION_SYNTAX",
    "FIELDS",
    "JOB_COLUMNS",
    "MAX_DURATION",
    "ON_EXHAUSTION",
    "STEP_FIELDS",
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
    "parse_duration",
    "raw_delay",
    "resolve",
    "retry_delay_for",
    "retry_function",
    "step_partial",
    "validate_field",
    "validate_partial",
]
