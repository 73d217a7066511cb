"""What a run's payload may be: JSON text within a size, without the NUL character.

Pure: the size limit is an argument (``STRAIT["TRIGGER_MAX_PAYLOAD_BYTES"]``,
passed by ``services.triggering`` and the transitions that take a new payload).
"""

from __future__ import annotations

import json
from typing import Any


class TriggerError(ValueError):
    """Bad trigger input; ``field`` names what was wrong."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def check_payload(payload: Any, *, field: str = "payload", limit: int) -> Any:
    """Return ``payload`` (``{}`` for None) if it is JSON within ``limit`` bytes, else raise naming ``field``."""
    payload_text(payload, field, limit)
    return {} if payload is None else payload


def payload_text(payload: Any, field: str, limit: int) -> str:
    """Return ``payload`` as JSON text, or raise a TriggerError naming ``field``."""
    if payload is None:
        return "{}"
    try:
        text = json.dumps(payload, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TriggerError(field, f"must be JSON-serialisable ({exc})") from None
    if len(text) > limit:  # json.dumps escapes non-ASCII: characters are bytes here
        raise TriggerError(
            field,
            f"is {len(text)} bytes as JSON; at most {limit} are allowed "
            "(STRAIT['TRIGGER_MAX_PAYLOAD_BYTES'])",
        )
    if "\\u0000" in text and has_nul(payload):
        # PostgreSQL's jsonb cannot store it; refuse it on every database alike.
        raise TriggerError(field, "must not contain the NUL character (\\u0000)")
    return text


def has_nul(value: Any) -> bool:
    """Whether ``value`` holds the NUL character in a string, a key or anywhere nested."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(has_nul(k) or has_nul(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(has_nul(v) for v in value)
    return False
