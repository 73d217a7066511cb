"""The ``Strait-Signature`` header: sign a request body, verify it on the endpoint.

The header reads ``t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">``. The
timestamp is inside the signed text so that a captured request cannot be replayed
later with a fresh ``t``; ``verify`` refuses timestamps outside its tolerance.
"""

from __future__ import annotations

import hashlib
import hmac
import time

__all__ = ["SIGNATURE_HEADER", "sign", "verify"]

SIGNATURE_HEADER = "Strait-Signature"
#: Unix seconds have 10 digits until the year 2286; a longer ``t`` is refused before
#: ``int()`` (which raises past 4300 digits) or a float comparison (which overflows).
MAX_TIMESTAMP_DIGITS = 15


def _digest(secret: str, body: bytes, timestamp: int) -> str:
    signed = b"%d." % timestamp + body
    return hmac.new(secret.encode("utf-8"), signed, hashlib.sha256).hexdigest()


def sign(secret: str, body: bytes, timestamp: int) -> str:
    """Return the ``Strait-Signature`` header value for ``body`` sent at ``timestamp``."""
    return f"t={timestamp},v1={_digest(secret, body, timestamp)}"


def _parse(header: str) -> tuple[int | None, list[str]]:
    timestamp: int | None = None
    signatures: list[str] = []
    for part in header.split(","):
        key, _, value = part.strip().partition("=")
        if key == "t" and value.isascii() and value.isdigit():
            if len(value) > MAX_TIMESTAMP_DIGITS:
                return None, []
            timestamp = int(value)
        elif key == "v1" and value:
            # Several v1 entries are allowed so that a sender can sign with an
            # old and a new secret while the secret is being rotated.
            signatures.append(value)
    return timestamp, signatures


def verify(
    secret: str,
    body: bytes,
    header: str,
    *,
    tolerance: float = 300,
    now: float | None = None,
) -> bool:
    """Tell whether ``header`` signs ``body`` with ``secret`` within ``tolerance`` seconds.

    A malformed header, or one that is not a string, is False.
    """
    if not isinstance(header, str) or not header or not secret:
        return False
    timestamp, signatures = _parse(header)
    if timestamp is None or not signatures:
        return False
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance:
        return False
    expected = _digest(secret, body, timestamp).encode("ascii")
    # Compare against every candidate so the time taken does not depend on which
    # matched; bytes, because compare_digest refuses non-ASCII str from a forged header.
    matches = [
        hmac.compare_digest(expected, candidate.encode("utf-8", "replace"))
        for candidate in signatures
    ]
    return any(matches)
