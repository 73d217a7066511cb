"""How Strait's run statuses read on the OJS wire: eight states (docs/ojs.md)."""

from __future__ import annotations

import datetime as dt

from django.db.models import F, Q

from django_strait.rules.states import RunStatus

S = RunStatus

#: Strait status -> OJS state. ``queued`` is split by time and attempts (:func:`ojs_state`).
STATES: dict[str, str] = {
    S.DEQUEUED: "active",
    S.EXECUTING: "active",
    S.WAITING: "pending",
    S.COMPLETED: "completed",
    S.FAILED: "discarded",
    S.DEAD_LETTER: "discarded",
    S.DISCARDED: "discarded",
    S.CANCELED: "cancelled",
    S.SYSTEM_FAILED: "retryable",
}

#: The OJS states a run can be in, in the order of a job's life.
OJS_STATES = (
    "scheduled",
    "available",
    "pending",
    "active",
    "retryable",
    "completed",
    "cancelled",
    "discarded",
)


def ojs_state(status: str, *, due: dt.datetime, attempts: int, now: dt.datetime) -> str:
    """Return the OJS state of a run in ``status``, due at ``due``, ``attempts`` spent.

    A queued run is ``available`` once due; before that it is ``retryable`` after a
    failed attempt, else ``scheduled``.
    """
    if status != S.QUEUED:
        return STATES[status]
    if due <= now:
        return "available"
    return "retryable" if attempts > 0 else "scheduled"


def in_state(now: dt.datetime) -> dict[str, Q]:
    """Each OJS state as a filter of runs (as :func:`ojs_state` reads a run)."""
    queued = Q(status=S.QUEUED)
    later = queued & Q(available_at__gt=now)
    retried = Q(attempt__gt=F("attempts_before_replay"))
    return {
        "available": queued & Q(available_at__lte=now),
        "scheduled": later & ~retried,
        "retryable": (later & retried) | Q(status=S.SYSTEM_FAILED),
        "pending": Q(status=S.WAITING),
        "active": Q(status__in=[S.DEQUEUED, S.EXECUTING]),
        "completed": Q(status=S.COMPLETED),
        "cancelled": Q(status=S.CANCELED),
        "discarded": Q(status__in=[S.DISCARDED, S.FAILED, S.DEAD_LETTER]),
    }
