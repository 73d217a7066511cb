"""Integers as every input of the API reads them: ASCII digits within a range."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django_strait.api.errors import InvalidField

#: The most digits an integer parameter may have: past any range the API has, and far
#: below what ``int()`` refuses (4300 digits) or takes long to read.
MAX_DIGITS = 18


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


def shown(value: Any, limit: int = 40) -> str:
    """Return ``value`` quoted for a message, cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
