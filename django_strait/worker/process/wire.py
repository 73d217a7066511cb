"""What crosses the pipe between the worker and a child: JSON messages, and exit meanings.

One message per ``Connection.send_bytes`` (length-prefixed). The payload goes in
and the outcome comes out as JSON: a child never sends the worker anything it
would have to unpickle, and never touches the database for the run itself.
"""

from __future__ import annotations

import json
import signal
from typing import Any

from django_strait.rules.outcome import Action, Kind, Outcome, failure
from django_strait.rules.presets import OOM_ERROR, OOM_OUTCOME

#: A shell's exit status for a process killed by SIGKILL (128 + 9): what the
#: kernel's OOM killer leaves behind under a container runtime.
EXIT_KILLED = 128 + signal.SIGKILL

_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"))


def dumps(message: dict[str, Any]) -> bytes:
    """Encode one message."""
    return _ENCODER.encode(message).encode()


def loads(data: bytes) -> dict[str, Any]:
    """Decode one message."""
    return json.loads(data)


def outcome_to_wire(outcome: Outcome) -> dict[str, Any]:
    """Return an outcome as a JSON-able dict (the child's half)."""
    return {
        "kind": outcome.kind.value,
        "result": outcome.result,
        "error_type": outcome.error_type,
        "error": outcome.error,
        "action": outcome.action.value if outcome.action else None,
        "retry_after": outcome.retry_after,
        "attempt_outcome": outcome.attempt_outcome,
        "response_excerpt": outcome.response_excerpt,
        "duration_ms": outcome.duration_ms,
    }


def outcome_from_wire(data: dict[str, Any]) -> Outcome:
    """Return the outcome a child sent (the worker's half)."""
    action = data.get("action")
    return Outcome(
        Kind(data["kind"]),
        result=data.get("result"),
        error_type=str(data.get("error_type") or ""),
        error=str(data.get("error") or ""),
        action=Action(action) if action else None,
        retry_after=data.get("retry_after"),
        attempt_outcome=str(data.get("attempt_outcome") or "succeeded"),
        response_excerpt=str(data.get("response_excerpt") or ""),
        duration_ms=int(data.get("duration_ms") or 0),
    )


def oom(message: str, **extra: Any) -> Outcome:
    """The outcome of an attempt killed for memory: retried at the next preset, or dead-lettered."""
    return failure(OOM_ERROR, message, attempt_outcome=OOM_OUTCOME, **extra)


def died(returncode: int | None) -> Outcome:
    """The outcome of a child that died without being told to: SIGKILL means memory."""
    if returncode in (-signal.SIGKILL, EXIT_KILLED):
        return oom(
            "the child process was killed by SIGKILL (most likely the kernel's "
            "out-of-memory killer)"
        )
    if returncode is not None and returncode < 0:
        try:
            how = f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            how = f"was killed by signal {-returncode}"
    else:
        how = f"exited with status {returncode}"
    return failure("system.process_died", f"the child process {how} during the run")
