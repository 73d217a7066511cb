"""The bounds table: every bounded field is checked the same way and listed in docs/security.md."""

from __future__ import annotations

import math
from decimal import Decimal
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError

from django_strait.models import Job, JobRun, Project
from django_strait.rules import bounds

SECURITY_DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"


def bounded_fields() -> list[str]:
    return [
        f"{model.__name__}.{field.name}"
        for model in (Job, JobRun, Project)
        for field in model._meta.get_fields()
        if bounds.FINITE in getattr(field, "validators", ())
    ]


def test_docs__security_lists_every_bounded_field():
    text = SECURITY_DOC.read_text()
    missing = [name for name in bounded_fields() if f"`{name}`" not in text]
    assert bounded_fields() and missing == []


@pytest.mark.parametrize(
    "value", [math.nan, math.inf, -math.inf, Decimal("NaN"), Decimal("Infinity")]
)
def test_within__refuses_what_is_not_finite(value):
    with pytest.raises(ValidationError) as caught:
        for validator in bounds.within(0, 10):
            validator(value)
    assert "finite" in caught.value.messages[0]


@pytest.mark.parametrize(
    ("low", "high", "unit", "value", "message"),
    [
        (
            0.001,
            604800.0,
            "seconds",
            1e308,
            "must be a number from 0.001 to 604,800 seconds; got 1e+308",
        ),
        (1, 1_000_000, "", 0, "must be a number from 1 to 1,000,000; got 0"),
        (
            Decimal(0),
            bounds.COST[1],
            "",
            Decimal(-1),
            "must be a number from 0 to 999,999,999,999.999999; got -1",
        ),
    ],
)
def test_within__names_the_whole_range(low, high, unit, value, message):
    errors = []
    for validator in bounds.within(low, high, unit):
        try:
            validator(value)
        except ValidationError as exc:
            errors += exc.messages
    assert errors == [message]


@pytest.mark.parametrize("value", [0.001, 604800.0, 30])
def test_within__accepts_the_range_inclusive(value):
    for validator in bounds.within(*bounds.TIMEOUT_SECS, "seconds"):
        validator(value)


def test_job_full_clean__names_each_field_out_of_bounds():
    job = Job(
        name="x", handler="tests.testapp.jobs.noop", timeout_secs=math.inf, retention_days=0,
        retry_jitter=2, max_concurrency=100_001,
    )  # fmt: skip
    with pytest.raises(ValidationError) as caught:
        job.full_clean(validate_unique=False, validate_constraints=False)
    assert set(caught.value.message_dict) >= {
        "timeout_secs", "retention_days", "retry_jitter", "max_concurrency",
    }  # fmt: skip
