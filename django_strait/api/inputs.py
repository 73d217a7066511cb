"""Integers and datetimes as every input of the API reads them: query parameters and body fields.

One rule each, wherever the value comes from: an integer is ASCII digits within a
range; a datetime is ISO 8601 with a UTC offset, in ASCII, that UTC can hold.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from django.utils import timezone
from django.utils.dateparse import parse_datetime

from django_strait.api.errors import InvalidField

#: The most digits an integer parameter may have: past any range the API has, and far
#: below what ``int()`` refuses (4300 digits) or takes long to read.
MAX_DIGITS = 18

DATETIME_SYNTAX = "an ISO 8601 datetime with a UTC offset, e.g. 2030-01-31T09:00:00Z"


def integer(params: Mapping[str, str], name: str, *, default: int, low: int, high: int) -> int:
    """Return the integer parameter ``name`` (``default`` if absent): ASCII digits, ``low`` to ``high``."""
    text = params.get(name)
    if text is None:
        return default
    if text.isascii() and text.isdigit() and len(text) <= MAX_DIGITS and low <= int(text) <= high:
        return int(text)
    raise InvalidField(
        name, f"must be an integer from {low} to {high} in ASCII digits (0-9), got {shown(text)}"
    )


def instant_or_none(value: Any) -> dt.datetime | None:
    """Return ``value`` in UTC if it is ISO 8601 text with an offset that UTC can hold, else None."""
    if not isinstance(value, str) or not value.isascii():
        return None  # Django's parser reads any Unicode digit ("２０３０") as a digit
    try:
        parsed = parse_datetime(value.strip())
        # Well formed but impossible (month 13), or out of range once in UTC (year 9999+).
        return parsed.astimezone(dt.UTC) if parsed and timezone.is_aware(parsed) else None
    except (ValueError, OverflowError):
        return None


def instant(value: str, field: str) -> dt.datetime:
    """Return ``value`` as :func:`instant_or_none` reads it, or refuse it naming ``field``."""
    parsed = instant_or_none(value)
    if parsed is None:
        raise InvalidField(field, f"must be {DATETIME_SYNTAX}; got {shown(value)}")
    return parsed


def shown(value: Any, limit: int = 40) -> str:
    """Return ``value`` quoted for a message, cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
