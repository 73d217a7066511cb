"""parse_duration: every accepted spelling, and a clear error naming the field for the rest."""

from __future__ import annotations

import datetime as dt
import math
import pickle
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from django_strait.rules.retry import MAX_DURATION, PolicyError, parse_duration

hypothesis_settings = settings(database=None, deadline=None)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (0, 0.0),
        (12, 12.0),
        (12.5, 12.5),
        (Decimal("1.25"), 1.25),
        (Fraction(1, 4), 0.25),
        ("12.5", 12.5),
        (" 7 ", 7.0),
        (".5", 0.5),
        ("1e3", 1000.0),
        ("500ms", 0.5),
        ("12.5s", 12.5),
        ("3m", 180.0),
        ("1h", 3600.0),
        ("2d", 172800.0),
        ("1h30m", 5400.0),
        ("1m 30s", 90.0),
        ("10 S", 10.0),
        ("PT5M", 300.0),
        ("P1DT2H", 93600.0),
        ("PT0.5S", 0.5),
        ("PT0,5S", 0.5),
        ("P2W", 1209600.0),
        ("P1D", 86400.0),
        ("pt1h", 3600.0),
        ("PT1H2M3S", 3723.0),
        (dt.timedelta(minutes=2), 120.0),
        ("0s", 0.0),
        ("PT0S", 0.0),
    ],
)
def test_parse_duration__accepts(value, seconds):
    assert parse_duration(value, field="f") == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (-1, "negative"),
        (-0.5, "negative"),
        ("-5", "negative"),
        ("-5s", "negative"),
        ("-PT5M", "negative"),
        (dt.timedelta(seconds=-1), "negative"),
        (math.nan, "finite"),
        (math.inf, "finite"),
        ("nan", "not allowed"),
        ("inf", "not allowed"),
        ("1e400", "finite"),
        (True, "not allowed"),
        (False, "not allowed"),
        ("", "not allowed"),
        ("   ", "not allowed"),
        ("5x", "not allowed"),
        ("5 minutes", "not allowed"),
        ("1h30", "not allowed"),
        ("P", "not allowed"),
        ("PT", "not allowed"),
        ("P1DT", "not allowed"),
        ("P1Y", "not allowed"),
        ("P1M", "not allowed"),
        ("T5M", "not allowed"),
        (None, "NoneType is not a duration"),
        ([1], "list is not a duration"),
        (10**400, "too large"),
        ("3651d", "too long"),
        (MAX_DURATION + 1, "too long"),
    ],
)
def test_parse_duration__rejects_with_field_and_syntax(value, problem):
    with pytest.raises(PolicyError) as caught:
        parse_duration(value, field="retry.initial_delay")
    err = caught.value
    assert err.field == "retry.initial_delay"
    assert str(err).startswith("retry.initial_delay: ")
    assert problem in str(err)
    # The message always says what would have been accepted.
    assert "500ms" in err.allowed and "PT5M" in err.allowed
    assert err.column is None


def test_parse_duration__accepts_the_longest_allowed_duration():
    assert parse_duration("3650d", field="f") == MAX_DURATION


def test_policy_error__survives_pickling():
    with pytest.raises(PolicyError) as caught:
        parse_duration("soon", field="delay")
    copy = pickle.loads(pickle.dumps(caught.value))
    assert (copy.field, copy.value, copy.allowed, str(copy)) == (
        "delay",
        "soon",
        caught.value.allowed,
        str(caught.value),
    )


@hypothesis_settings
@given(st.integers(min_value=0, max_value=10**9))
def test_parse_duration__milliseconds_match_seconds(ms):
    assert parse_duration(f"{ms}ms", field="f") == pytest.approx(ms / 1000)


@hypothesis_settings
@given(st.floats(min_value=0, max_value=MAX_DURATION, allow_nan=False))
def test_parse_duration__number_text_round_trips(seconds):
    assert parse_duration(repr(seconds), field="f") == seconds
    assert parse_duration(seconds, field="f") == seconds


@hypothesis_settings
@given(
    st.integers(0, 500),
    st.integers(0, 23),
    st.integers(0, 59),
    st.integers(0, 59),
)
def test_parse_duration__iso_and_unit_forms_agree(days, hours, minutes, secs):
    iso = f"P{days}DT{hours}H{minutes}M{secs}S"
    units = f"{days}d{hours}h{minutes}m{secs}s"
    expected = days * 86400 + hours * 3600 + minutes * 60 + secs
    assert parse_duration(iso, field="f") == expected
    assert parse_duration(units, field="f") == expected
