"""What a completion webhook says: the events, their body and headers, their retry policy.

Pure: no database and no HTTP client. The outbox writers map a run's (or a
workflow run's) terminal status to its event here; the deliverer builds the
request here and signs it in the dispatch scheme (``dispatch.signing``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django_strait.dispatch.signing import SIGNATURE_HEADER, sign
from django_strait.rules.retry import BUILTIN, PolicyError, RetryPolicy, merge

#: A run's terminal status -> the event it notifies.
RUN_EVENT_FOR_STATUS: Mapping[str, str] = {
    "completed": "run.completed",
    "failed": "run.failed",
    "dead_letter": "run.dead_lettered",
    "discarded": "run.discarded",
    "canceled": "run.canceled",
}
#: A workflow run's end -> the event it notifies.
WORKFLOW_EVENT_FOR_STATUS: Mapping[str, str] = {
    "completed": "workflow.completed",
    "failed": "workflow.failed",
}
RUN_EVENTS: tuple[str, ...] = tuple(RUN_EVENT_FOR_STATUS.values())
WORKFLOW_EVENTS: tuple[str, ...] = tuple(WORKFLOW_EVENT_FOR_STATUS.values())
#: Every event, and the status each one reports.
STATUS_OF_EVENT: Mapping[str, str] = {
    **{e: s for s, e in RUN_EVENT_FOR_STATUS.items()},
    **{e: s for s, e in WORKFLOW_EVENT_FOR_STATUS.items()},
}

EVENT_HEADER = "Strait-Event"
DELIVERY_ID_HEADER = "Strait-Delivery-Id"

#: The delivery policy unless a job says otherwise: exponential, 10 attempts, capped at 1 h.
DEFAULT_POLICY: RetryPolicy = dataclasses.replace(BUILTIN, max_attempts=10, max_delay=3600.0)

_COMPACT_JSON = json.JSONEncoder(separators=(",", ":"))


def all_run_events() -> list[str]:
    """The default of ``Job.webhook_events``: every terminal state."""
    return list(RUN_EVENTS)


def all_workflow_events() -> list[str]:
    """The default of ``Workflow.webhook_events``: completed and failed."""
    return list(WORKFLOW_EVENTS)


def events_problem(value: Any, allowed: tuple[str, ...]) -> str | None:
    """Say what is wrong with a list of events, or None; ``allowed`` names every valid one."""
    choices = ", ".join(allowed)
    if not isinstance(value, list) or not all(isinstance(e, str) for e in value):
        return f"A list of events among: {choices}."
    unknown = [e for e in value if e not in allowed]
    if unknown:
        return f"Unknown event {unknown[0][:100]!r}; allowed: {choices}."
    if len(set(value)) != len(value):
        return "Each event at most once."
    return None


def policy(partial: Mapping[str, Any] | None) -> RetryPolicy:
    """The delivery policy: :data:`DEFAULT_POLICY` overridden by a job's ``webhook_retry``.

    Raises PolicyError naming the ``webhook_retry.<field>`` that is wrong.
    """
    if partial is not None and not isinstance(partial, Mapping):
        raise PolicyError("webhook_retry", partial, "an object of retry policy fields")
    return merge(DEFAULT_POLICY, partial, prefix="webhook_retry")


@dataclass(frozen=True, slots=True)
class Notice:
    """What one delivery tells its receiver (the POST body, docs/webhooks.md)."""

    event: str
    delivery_id: str
    run_id: int
    job: str | None
    status: str
    attempt: int
    result: Any
    error_type: str
    error: str
    finished_at: dt.datetime | None
    #: For workflow events: the workflow's name.
    workflow: str | None = None

    def body(self) -> bytes:
        """The JSON body, compact, in ASCII."""
        document: dict[str, Any] = {
            "event": self.event,
            "delivery_id": self.delivery_id,
            "run_id": self.run_id,
            "job": self.job,
            "status": self.status,
            "attempt": self.attempt,
            "result": self.result,
            "error_type": self.error_type,
            "error": self.error,
            "finished_at": None if self.finished_at is None else self.finished_at.isoformat(),
        }
        if self.workflow is not None:
            document["workflow"] = self.workflow
        return _COMPACT_JSON.encode(document).encode("ascii")

    def headers(self, body: bytes, secret: str, now: float) -> dict[str, str]:
        """Strait's headers for ``body``: event, delivery id and, with a secret, the signature."""
        headers = {EVENT_HEADER: self.event, DELIVERY_ID_HEADER: self.delivery_id}
        if secret:
            headers[SIGNATURE_HEADER] = sign(secret, body, int(now))
        return headers
