"""The pruner duty and ``manage.py strait_prune`` against the real database."""

from __future__ import annotations

import datetime as dt
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from django_strait.duties.pruner import Pruner
from django_strait.models import Job, JobRun, RunAttempt, WebhookDelivery
from tests.integration.factories import make_job, make_run

pytestmark = pytest.mark.django_db

NOW = timezone.now()


def finished(job: Job, status: str, days_ago: float) -> JobRun:
    run = make_run(job, status=status)
    JobRun.objects.filter(pk=run.pk).update(finished_at=NOW - dt.timedelta(days=days_ago))
    return run


def left(*runs: JobRun) -> list[bool]:
    return [JobRun.objects.filter(pk=r.pk).exists() for r in runs]


def test_run_once__deletes_old_completed_discarded_canceled_in_batches():
    job = make_job()
    old = [finished(job, s, 40) for s in ["completed"] * 5 + ["discarded"] * 2 + ["canceled"]]
    result = Pruner(batch_size=3).run_once(NOW)
    assert result.led
    assert result.counts == {"deleted": 8, "batches": 3, "days_dropped": 0, "kept_for_webhooks": 0}
    assert left(*old) == [False] * 8
    assert not RunAttempt.objects.filter(run_id__in=[r.pk for r in old]).exists()


def test_run_once__keeps_dead_letters_failed_active_and_recent_runs():
    job = make_job()
    kept = [
        finished(job, "dead_letter", 400),
        finished(job, "failed", 400),
        finished(job, "completed", 29),
        finished(job, "executing", 400),  # an old finish time left on an active run
        make_run(job, status="queued"),
        make_run(job, status="system_failed"),
    ]
    gone = finished(job, "completed", 31)
    result = Pruner().run_once(NOW)
    assert result.counts == {"deleted": 1, "batches": 1, "days_dropped": 0, "kept_for_webhooks": 0}
    assert left(*kept) == [True] * len(kept)
    assert left(gone) == [False]


def test_run_once__honours_per_job_retention_days():
    short, default, long = (
        make_job(retention_days=7),
        make_job(),
        make_job(retention_days=60),
    )
    short_old, short_new = finished(short, "completed", 10), finished(short, "completed", 5)
    default_mid, default_old = (
        finished(default, "completed", 10),
        finished(default, "completed", 31),
    )
    long_mid = finished(long, "completed", 40)
    Pruner(retention_days=30).run_once(NOW)
    assert left(short_old, short_new) == [False, True]
    assert left(default_mid, default_old) == [True, False]
    assert left(long_mid) == [True]


def test_run_once__stops_after_max_batches():
    job = make_job()
    runs = [finished(job, "completed", 40) for _ in range(5)]
    result = Pruner(batch_size=2, max_batches=2).run_once(NOW)
    assert result.counts == {"deleted": 4, "batches": 2, "days_dropped": 0, "kept_for_webhooks": 0}
    assert sum(left(*runs)) == 1


def test_run_once__nothing_to_delete_counts_zero():
    finished(make_job(), "completed", 1)
    assert Pruner().run_once(NOW).counts == {
        "deleted": 0,
        "batches": 0,
        "days_dropped": 0,
        "kept_for_webhooks": 0,
    }


def test_from_settings__reads_prune_settings(settings):
    settings.STRAIT = {
        **settings.STRAIT,
        "PRUNE_INTERVAL": "10m",
        "PRUNE_BATCH_SIZE": 7,
        "RETENTION_DAYS": 3,
    }
    pruner = Pruner.from_settings()
    assert (pruner.interval, pruner.batch_size, pruner.retention_days) == (600.0, 7, 3)


def test_pruner__rejects_bad_options_naming_them():
    for option in ("batch_size", "max_batches", "retention_days", "interval"):
        with pytest.raises(ValueError, match=option):
            Pruner(**{option: 0})


def prune(*args: str) -> str:
    out = StringIO()
    call_command("strait_prune", *args, stdout=out)
    return out.getvalue()


def test_command__dry_run_prints_per_job_and_status_and_deletes_nothing():
    billing, mail = make_job("billing"), make_job("mail")
    runs = [
        finished(billing, "completed", 40),
        finished(billing, "completed", 40),
        finished(billing, "canceled", 40),
        finished(mail, "discarded", 40),
        finished(mail, "dead_letter", 40),
    ]
    out = prune("--dry-run")
    assert "billing\tcompleted\t2" in out
    assert "billing\tcanceled\t1" in out
    assert "mail\tdiscarded\t1" in out
    assert "dead_letter" not in out
    assert "Would delete 4 run(s)." in out
    assert left(*runs) == [True] * 5


def test_command__deletes_for_one_job_older_than():
    billing, mail = make_job("billing"), make_job("mail")
    billing_run, mail_run = finished(billing, "completed", 3), finished(mail, "completed", 3)
    out = prune("--job", "billing", "--older-than", "2d")
    assert "Deleted 1 run(s)" in out
    assert left(billing_run, mail_run) == [False, True]


def test_command__older_than_applies_instead_of_retention():
    job = make_job(retention_days=90)
    run = finished(job, "completed", 10)
    prune("--older-than", "P7D")
    assert left(run) == [False]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--older-than", "soon"], "argument --older-than"),
        (["--older-than", "0s"], "duration > 0"),
        (["--job", "nope"], "--job: no job named 'nope'; allowed: the name of a job"),
    ],
)
def test_command__bad_option_names_it_and_what_is_allowed(args, says):
    with pytest.raises(CommandError, match=says):
        prune(*args)


def test_run_once__deletes_delivered_webhooks_with_their_runs_and_keeps_runs_that_owe_one():
    job = make_job(webhook_url="https://hooks.example.com/x")
    runs = {s: finished(job, "completed", 40) for s in ("delivered", "pending", "failed")}
    for status, run in runs.items():
        WebhookDelivery.objects.create(run=run, event="run.completed", url=job.webhook_url,
                                       status=status)  # fmt: skip

    result = Pruner().run_once(NOW)

    assert result.counts == {"deleted": 1, "batches": 1, "days_dropped": 0, "kept_for_webhooks": 2}
    assert left(*runs.values()) == [False, True, True]
    assert set(WebhookDelivery.objects.values_list("status", flat=True)) == {"pending", "failed"}


def test_prune_command__says_how_many_runs_it_kept_for_their_webhooks():
    job = make_job(webhook_url="https://hooks.example.com/x")
    owing = finished(job, "completed", 40)
    WebhookDelivery.objects.create(run=owing, event="run.completed", url=job.webhook_url)
    out = StringIO()

    call_command("strait_prune", stdout=out)

    assert "Deleted 0 run(s)" in out.getvalue()
    assert "Kept 1 run(s) past retention: they still owe a completion webhook" in out.getvalue()
