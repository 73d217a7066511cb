"""OJS level 4 queue operations: list, stats, pause and resume (http-binding section 11).

Queues are Strait's own: a pause (``storage.queues``) stops the project's workers
and OJS fetches alike from claiming the queue's runs; runs already claimed go on,
and enqueueing into a paused queue still works (the conformance suite's
``pause-queue`` enqueues into one and expects 201).
"""

from __future__ import annotations

from typing import Any

from django.db.models import Count
from django.http import HttpResponse
from django.utils import timezone
from rest_framework.request import Request

from django_strait.api.auth import QueueScope, Rule
from django_strait.database import alias_for_queue, aliases
from django_strait.models import Job, JobRun, QueueState
from django_strait.ojs import errors, inputs, placed
from django_strait.ojs.present import stamp
from django_strait.ojs.states import in_state
from django_strait.ojs.views import OjsView, answer
from django_strait.rules.states import RunStatus
from django_strait.storage import queues as queue_states

#: The statuses of runs not yet ended: the queues they name are listed.
LIVE = (RunStatus.QUEUED, RunStatus.DEQUEUED, RunStatus.EXECUTING, RunStatus.WAITING)
_READ = Rule("runs:read", "django_strait.view_jobrun")
_WRITE = Rule("jobs:write", "django_strait.change_job")


def counts(scope: QueueScope, names: list[str] | None = None) -> dict[str, dict[str, int]]:
    """Each queue's runs by OJS state (one grouped query an alias, summed), for
    ``names`` or every queue."""
    now = timezone.now()
    by_state = {name: Count("id", filter=where) for name, where in in_state(now).items()}

    def on(where: str) -> dict[str, dict[str, int]]:
        runs = scope.only(JobRun.objects.using(where))
        if names is not None:
            runs = runs.filter(queue__in=names)
        return {row.pop("queue"): row for row in runs.values("queue").annotate(**by_state)}

    return placed.summed(on(where) for where in aliases())


EMPTY = dict.fromkeys(
    ("available", "scheduled", "retryable", "pending", "active", "completed", "cancelled",
     "discarded"), 0,
)  # fmt: skip


def describe(state: QueueState, by_state: dict[str, int] | None = None) -> dict[str, Any]:
    """A queue as OJS shows it: its name, status and (when given) its jobs by state."""
    body: dict[str, Any] = {
        "name": state.name,
        "status": "paused" if state.paused_at else "active",
        "paused": state.paused_at is not None,
        "paused_at": stamp(state.paused_at),
    }
    if by_state is not None:
        body.update(by_state)
    return body


def known(scope: QueueScope) -> list[QueueState]:
    """Every queue within ``scope`` that has a state row, a job naming it, or live runs
    (read from the live runs only: the history is not scanned), on any alias, by name.

    A queue's state is the row on the queue's own alias, where its workers read it."""
    by_name: dict[str, QueueState] = {}
    for where in aliases():
        for state in QueueState.objects.using(where):
            if scope.allows(state.name) and alias_for_queue(state.name) == where:
                by_name[state.name] = state
    for where in aliases():
        live = JobRun.objects.using(where).filter(status__in=LIVE)
        for rows in (scope.only(Job.objects.using(where)), scope.only(live)):
            for name in rows.values_list("queue", flat=True).distinct():
                by_name.setdefault(name, QueueState(name=name))
    return [by_name[name] for name in sorted(by_name)]


def named(name: str, scope: QueueScope, field: str = "name") -> str:
    """The queue ``name`` of the path, checked (its pattern, the key's queues)."""
    inputs.queue_name(name, field)
    if not scope.allows(name):
        raise errors.forbidden(field, scope.refusal(name))
    return name


def page_of(request: Request, total: int) -> tuple[int, int]:
    """The ``limit`` and ``offset`` of a list (50 and 0 by default; at most 500)."""
    try:
        limit = min(max(int(request.query_params.get("limit", 50)), 1), 500)
        offset = max(int(request.query_params.get("offset", 0)), 0)
    except ValueError:
        raise errors.invalid_request("limit", "limit and offset must be whole numbers") from None
    return limit, offset


class Queues(OjsView):
    """``GET /ojs/v1/queues``: ``{queues, pagination}``."""

    rules = {"GET": _READ}

    def get(self, request: Request) -> HttpResponse:
        listed = known(self.scope)
        limit, offset = page_of(request, len(listed))
        shown = listed[offset : offset + limit]
        return answer(request, {"queues": [describe(s) for s in shown], "pagination": {
            "total": len(listed), "limit": limit, "offset": offset,
            "has_more": offset + limit < len(listed)}})  # fmt: skip


class QueueStats(OjsView):
    """``GET /ojs/v1/queues/{name}/stats``: the queue's jobs by state."""

    rules = {"GET": _READ}

    def get(self, request: Request, name: str) -> HttpResponse:
        name = named(name, self.scope)
        by_state = {**EMPTY, **counts(self.scope, [name]).get(name, {})}
        state = queue_states.state(alias_for_queue(name), name)
        queue = describe(state, by_state)
        return answer(request, {"queue": queue, "status": queue["status"], "stats": by_state,
                                "computed_at": stamp(timezone.now())})  # fmt: skip


class QueuePause(OjsView):
    """``POST /ojs/v1/queues/{name}/pause`` (and ``/resume``: ``pause = False``)."""

    rules = {"POST": _WRITE}
    pause = True

    def post(self, request: Request, name: str) -> HttpResponse:
        name = named(name, self.scope)
        # On the queue's alias: its workers and fetches read their pauses there.
        state = queue_states.set_paused(alias_for_queue(name), name, self.pause, timezone.now())
        queue = describe(state)
        moment = "paused_at" if self.pause else "resumed_at"
        return answer(request, {"queue": queue, "status": queue["status"],
                                "paused": queue["paused"], moment: stamp(timezone.now())})  # fmt: skip


class QueueResume(QueuePause):
    pause = False
