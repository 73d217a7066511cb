"""Completion webhooks' outbox with the ORM (every backend): written with transitions, claimed, settled.

The outbox rows are written in the transaction of the transition that ends a
run: :func:`notify_runs` for people's transitions and the reaper's rescues (and
the record's part on databases other than PostgreSQL, where the record's own
statement writes them: ``record.webhooks`` in ``postgres/queries.sql``), and
:func:`notify_workflows` for workflow runs that complete or fail. Workers claim
due rows (:func:`claim_due`: skipping rows another worker holds, and leasing
them by moving ``next_attempt_at`` ahead, so a worker that dies mid-delivery
leaves its rows to another once the lease ends) and settle them
(:func:`settle`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connections, transaction
from django.db.models import TextField
from django.db.models.functions import Cast

from django_strait.dispatch.events import RUN_EVENT_FOR_STATUS, WORKFLOW_EVENT_FOR_STATUS
from django_strait.models import DeliveryStatus, JobRun, WebhookDelivery, WorkflowRun
from django_strait.rules.states import TERMINAL
from django_strait.storage.rows import Unreadable, read, readable_instants
from django_strait.storage.values import Change

logger = logging.getLogger(__name__)


def notify_runs(alias: str, run_ids: Iterable[int], now: dt.datetime) -> int:
    """Write the deliveries owed for the ended runs among ``run_ids``; return how many.

    Call in the transaction that ended them: a run's job names the URL and the
    events it wants.
    """
    ids = list(run_ids)
    if not ids:
        return 0
    rows = (
        JobRun.objects.using(alias)
        .filter(pk__in=ids, status__in=TERMINAL)
        .exclude(job__webhook_url="")
        .values_list("pk", "status", "job__webhook_url", "job__webhook_events")
    )
    # A job whose webhook columns cannot be read owes nothing (and says so), and the
    # transition that ended its run still commits.
    owed = [
        WebhookDelivery(run_id=pk, event=event, url=url, next_attempt_at=now, created_at=now)
        for pk, status, url, wanted in read(rows).rows
        if (event := RUN_EVENT_FOR_STATUS[status]) in _events(wanted)
    ]
    WebhookDelivery.objects.using(alias).bulk_create(owed)
    return len(owed)


def notify_workflows(alias: str, changes: Sequence[Change], now: dt.datetime) -> int:
    """Write the deliveries owed for workflow runs that completed or failed; return how many."""
    ended = {c.workflow_run_id: c.status for c in changes if c.status in WORKFLOW_EVENT_FOR_STATUS}
    if not ended:
        return 0
    rows = (
        WorkflowRun.objects.using(alias)
        .filter(pk__in=list(ended))
        .exclude(workflow__webhook_url="")
        .values_list("pk", "workflow__webhook_url", "workflow__webhook_events")
    )
    owed = [
        WebhookDelivery(
            workflow_run_id=pk, event=event, url=url, next_attempt_at=now, created_at=now
        )
        for pk, url, wanted in read(rows).rows
        if (event := WORKFLOW_EVENT_FOR_STATUS[ended[pk]]) in _events(wanted)
    ]
    WebhookDelivery.objects.using(alias).bulk_create(owed)
    return len(owed)


def _events(wanted: Any) -> Sequence[str]:
    # A row written around validation may hold anything: only a list of names counts.
    return wanted if isinstance(wanted, list) else ()


@dataclass(frozen=True, slots=True)
class Due:
    """A claimed delivery, with what sending it needs."""

    pk: int
    delivery_id: str
    event: str
    url: str
    #: Attempts made before this one.
    attempt: int
    #: When the transition wrote it (the delivery's lag counts from here).
    created_at: dt.datetime
    #: The run's (or workflow run's) id, job name, attempt, result, errors, end.
    run_id: int
    job: str | None
    workflow: str | None
    run_attempt: int
    result: Any
    error_type: str
    error: str
    finished_at: dt.datetime | None
    secret: str
    #: The job's ``webhook_retry`` (partial policy, None: the default).
    retry: Any
    #: Why the row cannot be sent as it is (an unreadable result): it fails without a call.
    row_error: str = ""


_RUN_FIELDS = (
    "pk", "delivery_id", "event", "url", "attempt", "created_at", "run_id", "run__job__name", "run__attempt",
    Cast("run__result", TextField()), "run__error_type", "run__last_error", "run__finished_at",
    "run__job__signing_secret", Cast("run__job__webhook_retry", TextField()),
)  # fmt: skip
_WORKFLOW_FIELDS = (
    "pk", "delivery_id", "event", "url", "attempt", "created_at", "workflow_run_id", "workflow_run__workflow__name",
    "workflow_run__error_type", "workflow_run__last_error", "workflow_run__finished_at",
    "workflow_run__workflow__signing_secret",
)  # fmt: skip


def claim_due(alias: str, limit: int, now: dt.datetime, lease: dt.timedelta) -> list[Due]:
    """Claim up to ``limit`` due deliveries for ``lease``, oldest due first; skip rows held elsewhere."""
    rows = WebhookDelivery.objects.using(alias)
    with transaction.atomic(using=alias):
        due = rows.filter(status=DeliveryStatus.PENDING, next_attempt_at__lte=now).order_by(
            "next_attempt_at", "id"
        )
        if connections[alias].features.has_select_for_update_skip_locked:
            due = due.select_for_update(skip_locked=True)
        ids = list(due.values_list("pk", flat=True)[:limit])
        if not ids:
            return []
        rows.filter(pk__in=ids).update(next_attempt_at=now + lease)
    by_run = read(rows.filter(pk__in=ids, run__isnull=False).values_list(*_RUN_FIELDS))
    by_workflow = read(rows.filter(pk__in=ids, run__isnull=True).values_list(*_WORKFLOW_FIELDS))
    claimed = [_run_due(*row) for row in by_run.rows]
    claimed += [_workflow_due(*row) for row in by_workflow.rows]
    claimed += _unreadable_due(alias, by_run.unreadable + by_workflow.unreadable, now)
    return sorted(claimed, key=lambda d: ids.index(d.pk))


def _unreadable_due(alias: str, problems: list[Unreadable], now: dt.datetime) -> list[Due]:
    """Claimed deliveries whose rows (or their runs' rows) cannot be read: each fails
    without a call, its ``last_error`` naming what cannot be read."""
    why: dict[int, list[str]] = {}
    for problem in problems:
        why.setdefault(problem.pk, []).append(str(problem))
    found = WebhookDelivery.objects.using(alias).filter(pk__in=list(why))
    return [
        Due(
            pk,
            str(delivery_id),
            event,
            url,
            attempt,
            now,
            0,
            None,
            None,
            0,
            None,
            "",
            "",
            None,
            "",
            None,
            f"the row cannot be read: {'; '.join(why[pk])}",
        )  # fmt: skip
        for pk, delivery_id, event, url, attempt in found.values_list(
            "pk", "delivery_id", "event", "url", "attempt"
        )
    ]


def _run_due(
    pk, delivery_id, event, url, attempt, created, run_id, job, run_attempt, result, *rest
) -> Due:
    error_type, error, finished_at, secret, retry = rest
    problems = []
    result, bad = _decoded(result)
    if bad:
        problems.append(f"the run's result cannot be read ({bad})")
    retry, bad = _decoded(retry)
    if bad:
        problems.append(f"the job's webhook_retry cannot be read ({bad})")
    return Due(
        pk, str(delivery_id), event, url, attempt, created, run_id, job, None, run_attempt, result,
        error_type, error, finished_at, secret, retry, "; ".join(problems),
    )  # fmt: skip


def _workflow_due(pk, delivery_id, event, url, attempt, created, wr_id, workflow, *rest) -> Due:
    error_type, error, finished_at, secret = rest
    return Due(
        pk, str(delivery_id), event, url, attempt, created, wr_id, None, workflow, 0, None,
        error_type, error, finished_at, secret, None,
    )  # fmt: skip


def _decoded(text: str | None) -> tuple[Any, str]:
    if text is None:
        return None, ""
    try:
        return json.loads(text), ""
    except (ValueError, RecursionError) as exc:
        return None, type(exc).__name__


@dataclass(frozen=True, slots=True)
class Settled:
    """What became of one claimed delivery."""

    pk: int
    status: str
    attempt: int
    next_attempt_at: dt.datetime
    status_code: int | None = None
    error: str = ""
    response: str = ""
    delivered_at: dt.datetime | None = None


def settle(alias: str, settled: Sequence[Settled]) -> None:
    """Write what became of claimed deliveries: one UPDATE per distinct outcome, not per row.

    Only rows still pending move: a delivery redelivered meanwhile keeps its fresh budget.
    """
    groups: dict[Settled, list[int]] = {}
    for s in settled:
        groups.setdefault(dataclasses.replace(s, pk=0), []).append(s.pk)
    rows = WebhookDelivery.objects.using(alias)
    with transaction.atomic(using=alias):
        for s, pks in groups.items():
            rows.filter(pk__in=pks, status=DeliveryStatus.PENDING).update(
                status=s.status,
                attempt=s.attempt,
                next_attempt_at=s.next_attempt_at,
                last_status_code=s.status_code,
                last_error=s.error,
                last_response=s.response,
                delivered_at=s.delivered_at,
            )


def hold(alias: str, pks: Sequence[int], until: dt.datetime) -> None:
    """Put claimed deliveries back until ``until``, spending no attempt (an open circuit)."""
    WebhookDelivery.objects.using(alias).filter(
        pk__in=list(pks), status=DeliveryStatus.PENDING
    ).update(next_attempt_at=until)


def redeliver(alias: str, pks: Sequence[int], now: dt.datetime) -> int:
    """Make deliveries due now with a fresh attempt budget, whatever their status; return how many."""
    return (
        WebhookDelivery.objects.using(alias)
        .filter(pk__in=list(pks))
        .update(status=DeliveryStatus.PENDING, attempt=0, next_attempt_at=now, delivered_at=None)
    )


def lag(alias: str, now: dt.datetime) -> tuple[int, float]:
    """How many deliveries are due, and how late the oldest is (seconds)."""
    due = WebhookDelivery.objects.using(alias).filter(
        status=DeliveryStatus.PENDING, next_attempt_at__lte=now
    )
    aged = due.filter(readable_instants("next_attempt_at")).order_by("next_attempt_at")
    oldest = aged.values_list("next_attempt_at", flat=True).first()
    return due.count(), 0.0 if oldest is None else max((now - oldest).total_seconds(), 0.0)
