"""The webhook outbox's verbs and endpoint health outside a record, alike on every backend."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from django_strait.models import EndpointHealth, WebhookDelivery
from django_strait.rules.resilience.health import Sample
from django_strait.storage.webhooks import Settled
from tests.integration.factories import make_job, make_run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.needs_database]

LEASE = dt.timedelta(seconds=60)


def owed(count: int, *, due: dt.datetime | None = None) -> list[WebhookDelivery]:
    """``count`` pending deliveries of completed runs, due at ``due`` (now), oldest first."""
    job = make_job(webhook_url="http://127.0.0.1:9/hook")
    at = due or timezone.now()
    return [
        WebhookDelivery.objects.create(
            run=make_run(job, status="completed"),
            event="run.completed",
            url=job.webhook_url,
            next_attempt_at=at + dt.timedelta(microseconds=i),
        )
        for i in range(count)
    ]


def test_claim_deliveries__leases_the_due_oldest_first(storage):
    rows = owed(3)
    later = owed(1, due=timezone.now() + dt.timedelta(hours=1))
    now = timezone.now() + dt.timedelta(seconds=1)

    claimed = storage.claim_deliveries(limit=2, now=now, lease=LEASE)
    rest = storage.claim_deliveries(limit=10, now=now, lease=LEASE)

    assert [d.pk for d in claimed] == [rows[0].pk, rows[1].pk]
    assert [d.pk for d in rest] == [rows[2].pk]  # the leased ones are not due; later is not
    assert claimed[0].run_id == rows[0].run_id and claimed[0].row_error == ""
    leased = WebhookDelivery.objects.get(pk=rows[0].pk).next_attempt_at
    assert leased == now + LEASE
    assert later[0].pk not in {d.pk for d in claimed + rest}


def test_settle_deliveries__moves_only_pending_rows(storage):
    pending, redelivered = owed(2)
    now = timezone.now()
    WebhookDelivery.objects.filter(pk=redelivered.pk).update(status="delivered")

    storage.settle_deliveries(
        [
            Settled(pending.pk, "failed", 3, now, status_code=500, error="http.500"),
            Settled(redelivered.pk, "failed", 3, now),
        ]
    )

    row = WebhookDelivery.objects.get(pk=pending.pk)
    assert (row.status, row.attempt, row.last_status_code, row.last_error) == (
        "failed", 3, 500, "http.500",
    )  # fmt: skip
    assert WebhookDelivery.objects.get(pk=redelivered.pk).status == "delivered"


def test_hold_deliveries__puts_them_back_without_an_attempt(storage):
    [row] = owed(1)
    until = timezone.now() + dt.timedelta(minutes=5)

    storage.hold_deliveries([row.pk], until=until)

    row.refresh_from_db()
    assert (row.next_attempt_at, row.attempt, row.status) == (until, 0, "pending")


def test_redeliver__gives_any_delivery_a_fresh_budget(storage):
    failed, pending = owed(2)
    WebhookDelivery.objects.filter(pk=failed.pk).update(status="failed", attempt=8)
    now = timezone.now()

    assert storage.redeliver([failed.pk], now=now) == 1
    assert storage.redeliver([], now=now) == 0

    failed.refresh_from_db()
    assert (failed.status, failed.attempt, failed.next_attempt_at) == ("pending", 0, now)


def test_fold_health__scores_a_new_endpoint_and_forget_health_drops_it(storage):
    url = "http://127.0.0.1:9/hook"
    sample = Sample(url, 4, 0.5, 0.0, 1.0, 120.0, 10_000.0)

    storage.fold_health([sample])
    storage.fold_health([])

    row = EndpointHealth.objects.get(endpoint_url=url)
    assert row.samples == 4 and row.failure_rate > 0
    assert storage.forget_health([url, "http://127.0.0.1:9/other"]) == 1
    assert not EndpointHealth.objects.exists()
