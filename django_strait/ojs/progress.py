"""OJS ext-progress: a worker reports how far its active job is; anyone with read access reads it.

Kept in the run's OJS envelope (``ojs["progress"]``) by the storage verb
``set_external_progress``, for the attempt that reported it only: a retried job
starts with no progress, a completed one reads 1.0 (the spec's sections 5.3 and
8.1). A report is also a heartbeat: it moves the job's visibility deadline on.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from django.utils import timezone

from django_strait import transitions
from django_strait.api.auth import QueueScope
from django_strait.models import JobRun
from django_strait.ojs import errors, inputs, work
from django_strait.ojs.present import job_body, stamp
from django_strait.rules.states import RunStatus
from django_strait.storage import backend

MESSAGE_MAX_LENGTH = 1000
#: JSON bytes of ``data`` or ``checkpoint`` (the spec recommends 4 KB for ``data``).
DATA_MAX_BYTES = 16_384
KNOWN_KEYS = frozenset(
    {"progress", "message", "data", "checkpoint", "worker_id", "attempt", "job_id"}
)


def checked(body: Mapping[str, Any]) -> dict[str, Any]:
    """The report's ``progress`` (clamped to 0..1), ``message``, ``data`` and ``checkpoint``."""
    unknown = sorted(set(body) - KNOWN_KEYS)
    if unknown:
        raise errors.invalid_request(
            unknown[0], f"is not a progress field; allowed: {', '.join(sorted(KNOWN_KEYS))}"
        )
    out: dict[str, Any] = {}
    number = body.get("progress")
    if number is not None:
        if (
            isinstance(number, bool)
            or not isinstance(number, int | float)
            or not math.isfinite(number)
        ):
            raise errors.invalid_request(
                "progress", f"must be a number from 0.0 to 1.0, got {number!r}"
            )
        out["progress"] = min(max(float(number), 0.0), 1.0)  # clamped, as the spec says
    message = body.get("message")
    if message is not None:
        if not isinstance(message, str) or len(message) > MESSAGE_MAX_LENGTH:
            raise errors.invalid_request(
                "message", f"must be a string of at most {MESSAGE_MAX_LENGTH} characters"
            )
        out["message"] = message
    for name in ("data", "checkpoint"):
        value = body.get(name)
        if value is None:
            continue
        if not isinstance(value, Mapping) or len(json.dumps(value)) > DATA_MAX_BYTES:
            raise errors.invalid_request(
                name, f"must be a JSON object of at most {DATA_MAX_BYTES} bytes"
            )
        out[name] = dict(value)
    if not out.keys() & {"progress", "message", "data"}:
        raise errors.invalid_request("progress", "give at least one of progress, message, data")
    return out


def report(ident: Any, body: Mapping[str, Any], scope: QueueScope) -> dict[str, Any]:
    """Keep the progress of an active job the worker holds; answer what is kept.

    A job that is not active (it ended, or was requeued) is left as it is and the
    answer says ``accepted: false`` (the spec: such a report is ignored, not an
    error). A report naming a reservation (``worker_id``, ``attempt``) that is not
    the job's is refused with 409, as an ack would be.
    """
    wanted = checked(body)
    run = work.find(ident, scope)
    holder = inputs.holder(body)
    if run.status != RunStatus.EXECUTING:
        return {**_answer(run), "accepted": False}
    work.check_held(run, run.job, ident, "report progress on", holder)
    now = timezone.now()
    storage = backend(run._state.db)  # the alias the run was found on
    kept = transitions.external.report_progress(
        run.pk, run.claimed_by or "", run.attempt, {**wanted, "updated_at": stamp(now)},
        storage=storage,
    )  # fmt: skip
    if kept is None:  # the reservation ended between the read and the write
        return {**_answer(work.reload(run)), "accepted": False}
    visible = (run.ojs or {}).get("visibility_timeout_ms") or inputs.default_visibility_ms()
    deadline = work.deadline_from(run, now, visible)
    transitions.external.extend(run.claimed_by or "", {run.pk: deadline}, storage=storage)
    return {**_answer(work.reload(run)), "accepted": True}


def read(ident: Any, scope: QueueScope) -> dict[str, Any]:
    """``GET /ojs/v1/jobs/{id}/progress``: the current attempt's progress (null if none)."""
    return _answer(work.find(ident, scope))


def current(run: JobRun, state: str) -> dict[str, Any] | None:
    """The progress of the run's current attempt (1.0 once completed), or None."""
    envelope = run.ojs if isinstance(run.ojs, dict) else {}
    kept = envelope.get("progress")
    if not isinstance(kept, dict) or kept.get("attempt") != run.attempt:
        return None
    out = {k: kept.get(k) for k in ("progress", "message", "data", "checkpoint", "updated_at")}
    if state == "completed":
        out["progress"] = 1.0
    return out


def _answer(run: JobRun) -> dict[str, Any]:
    state = job_body(run, run.job, timezone.now())["state"]
    kept = current(run, state) or {}
    return {
        "job_id": str(run.ojs_id),
        "state": state,
        "progress": kept.get("progress"),
        "message": kept.get("message"),
        "data": kept.get("data"),
        "updated_at": kept.get("updated_at"),
    }
