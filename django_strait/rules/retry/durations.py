"""Durations as users write them: seconds, a number with a unit, or ISO 8601.

``parse_duration(value, field=...)`` turns ``12.5``, ``"12.5"``, ``"500ms"``,
``"3m"``, ``"1h30m"``, ``"PT5M"``, ``"P1DT2H"`` or a ``timedelta`` into float
seconds, and raises :class:`PolicyError` naming the field for anything else.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from decimal import Decimal
from fractions import Fraction
from typing import Any

from django_strait.rules import bounds
from django_strait.rules.retry.errors import PolicyError

#: The longest accepted duration. It keeps ``now + delay`` far from datetime's year-9999 limit.
MAX_DURATION = bounds.MAX_DURATION_SECS

DURATION_SYNTAX = (
    "a duration >= 0: seconds as a number (12.5), a number with a unit "
    "(500ms, 12.5s, 3m, 1h, 2d, or combined: 1h30m) or ISO 8601 without years or months "
    "(PT5M, P1DT2H, PT0.5S), "
    "at most 3650 days"
)

_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_NUMBER = r"\d+(?:\.\d+)?|\.\d+"
_PLAIN = re.compile(rf"(?:{_NUMBER})(?:e[+-]?\d+)?", re.IGNORECASE)
_UNIT_PART = re.compile(rf"\s*({_NUMBER})\s*(ms|s|m|h|d)\s*", re.IGNORECASE)
_UNITS = re.compile(rf"(?:\s*(?:{_NUMBER})\s*(?:ms|s|m|h|d)\s*)+", re.IGNORECASE)
_ISO_NUMBER = r"\d+(?:[.,]\d+)?"
_ISO = re.compile(
    rf"P(?!$)(?:(?P<w>{_ISO_NUMBER})W)?(?:(?P<d>{_ISO_NUMBER})D)?"
    rf"(?:T(?=\d)(?:(?P<h>{_ISO_NUMBER})H)?(?:(?P<m>{_ISO_NUMBER})M)?(?:(?P<s>{_ISO_NUMBER})S)?)?",
    re.IGNORECASE,
)
_ISO_SECONDS = {"w": 604800.0, "d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}


def parse_duration(value: Any, *, field: str) -> float:
    """Return ``value`` as seconds, or raise PolicyError naming ``field``."""
    seconds = _seconds(value, field)
    if math.isnan(seconds) or math.isinf(seconds):
        raise PolicyError(
            field, value, DURATION_SYNTAX, problem=f"{value!r} is not a finite number"
        )
    if seconds < 0:
        raise PolicyError(field, value, DURATION_SYNTAX, problem=f"{value!r} is negative")
    if seconds > MAX_DURATION:
        raise PolicyError(field, value, DURATION_SYNTAX, problem=f"{value!r} is too long")
    return seconds


def _seconds(value: Any, field: str) -> float:
    if isinstance(value, bool):
        # bool is an int subclass; True meaning "1 second" is always a mistake.
        raise PolicyError(field, value, DURATION_SYNTAX)
    if isinstance(value, int | float | Decimal | Fraction):
        return _to_float(value, field)
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, str):
        return _parse_text(value, field)
    raise PolicyError(
        field, value, DURATION_SYNTAX, problem=f"a {type(value).__name__} is not a duration"
    )


def _to_float(value: int | float | Decimal | Fraction, field: str) -> float:
    try:
        return float(value)
    except OverflowError:
        raise PolicyError(
            field, value, DURATION_SYNTAX, problem="the number is too large"
        ) from None


def _parse_text(text: str, field: str) -> float:
    body = text.strip()
    negative = body.startswith("-")
    if negative:
        body = body[1:].lstrip()
    seconds = _parse_unsigned(body)
    if seconds is None:
        raise PolicyError(field, text, DURATION_SYNTAX)
    return -seconds if negative else seconds


def _parse_unsigned(body: str) -> float | None:
    if _PLAIN.fullmatch(body):
        return float(body)
    if _UNITS.fullmatch(body):
        return sum(
            float(number) * _UNIT_SECONDS[unit.lower()] for number, unit in _UNIT_PART.findall(body)
        )
    iso = _ISO.fullmatch(body)
    if iso:
        return sum(
            float(number.replace(",", ".")) * _ISO_SECONDS[part]
            for part, number in iso.groupdict().items()
            if number is not None
        )
    return None
