"""Turn what a handler or endpoint produced into a run result of bounded size.

Both executors store a result that fits ``STRAIT["RESULT_MAX_BYTES"]``. When it
does not fit, the result becomes text: the first ``limit`` bytes (cut on a
character boundary) followed by :data:`TRUNCATION_MARKER` formatted with the limit,
e.g. ``'{"rows": [1, 2, 3…\\n[truncated by django-strait: more than 65536 bytes]'``.
"""

from __future__ import annotations

import codecs
import json
from typing import Any

__all__ = [
    "EXCERPT_CHARS",
    "TRUNCATION_MARKER",
    "decode",
    "decode_prefix",
    "excerpt",
    "parse_json",
    "trim",
]

#: Appended to a result that was cut; ``{limit}`` is the byte limit in force.
TRUNCATION_MARKER = "\n[truncated by django-strait: more than {limit} bytes]"

#: How much of a failed response body or traceback an attempt keeps.
EXCERPT_CHARS = 500


def _decoder(encoding: str) -> codecs.IncrementalDecoder:
    try:
        return codecs.getincrementaldecoder(encoding)(errors="replace")
    except LookupError:
        # An endpoint naming a charset Python does not know still gets its text stored.
        return codecs.getincrementaldecoder("utf-8")(errors="replace")


def decode(data: bytes, encoding: str = "utf-8") -> str:
    """Decode all of ``data``, replacing bytes that are not valid in ``encoding``."""
    return _decoder(encoding).decode(data, final=True)


def decode_prefix(data: bytes, limit: int, encoding: str = "utf-8") -> str:
    """Decode at most ``limit`` bytes of ``data`` without splitting a character."""
    # final=False keeps a trailing partial character in the decoder's buffer
    # instead of turning it into U+FFFD, which is exactly the cut we want.
    return _decoder(encoding).decode(data[:limit], final=False)


def trim(data: bytes, limit: int, encoding: str = "utf-8") -> str:
    """Return the first ``limit`` bytes of ``data`` as text, marked as truncated."""
    return decode_prefix(data, limit, encoding) + TRUNCATION_MARKER.format(limit=limit)


def excerpt(data: bytes, encoding: str = "utf-8") -> str:
    """Return the first :data:`EXCERPT_CHARS` characters of ``data``."""
    # A character is at most 4 bytes in UTF-8; decode no more than could be kept.
    return decode_prefix(data, EXCERPT_CHARS * 4, encoding)[:EXCERPT_CHARS]


def _reject_constant(name: str) -> Any:
    # NaN and Infinity are not JSON and PostgreSQL's jsonb refuses them.
    raise ValueError(f"{name} is not valid JSON")


# One decoder for every call: json.loads with options builds a new one each time.
_STRICT_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def parse_json(data: bytes) -> tuple[bool, Any]:
    """Parse UTF-8 ``data`` as strict JSON; return ``(False, None)`` when it is not JSON."""
    try:
        # JSON exchanged between systems is UTF-8 (RFC 8259 §8.1).
        return True, _STRICT_DECODER.decode(data.decode("utf-8"))
    except (ValueError, RecursionError):
        # RecursionError: a body nested deeper than the parser's stack is not a result.
        return False, None
