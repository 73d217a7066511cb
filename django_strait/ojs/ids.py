"""OJS job ids: lowercase UUIDv7 strings (RFC 9562), made here or given by the client."""

from __future__ import annotations

import os
import re
import time
import uuid

_UUID7 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}\Z")


def uuid7(now_ms: int | None = None) -> uuid.UUID:
    """Return a new UUIDv7: 48 bits of Unix milliseconds, then random bits (time-ordered)."""
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    value = (ms & (2**48 - 1)) << 80 | int.from_bytes(os.urandom(10), "big")
    value = value & ~(0xF << 76) | 0x7 << 76  # version 7
    value = value & ~(0x3 << 62) | 0x2 << 62  # RFC 9562 variant
    return uuid.UUID(int=value)


def is_uuid7(text: object) -> bool:
    """Return whether ``text`` is a lowercase UUIDv7 string, as OJS requires of a client id."""
    return isinstance(text, str) and bool(_UUID7.match(text))


def parse_any(text: str) -> uuid.UUID | None:
    """Return ``text`` as a UUID, or None when it is none (an unknown job, then)."""
    try:
        return uuid.UUID(text)
    except (ValueError, AttributeError, TypeError):
        return None
