"""The overview's time charts and the per-job and per-endpoint drill-down pages."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from django.utils import timezone

from django_strait.admin import charts, series
from django_strait.duties.sampler import QueueSampler
from django_strait.models import EndpointHealth, HealthSample, QueueSample, RunAttempt, RunRollup
from tests.integration.factories import make_job, make_run

pytestmark = pytest.mark.django_db

URL = "http://127.0.0.1:9/hook"


def minute(ago: int, now: dt.datetime | None = None) -> dt.datetime:
    now = now or timezone.now()
    return now.replace(second=0, microsecond=0) - dt.timedelta(minutes=ago)


def busy_hour() -> tuple:
    """A job whose runs retried and completed over the last minutes, at an endpoint."""
    job = make_job("partner-webhook", endpoint_url=URL)
    now = timezone.now()  # one clock: a minute boundary between rows must not merge two
    for ago in (1, 2, 3):
        for status, count in (("completed", 8), ("queued", 2), ("dead_letter", 2)):
            RunRollup.objects.create(minute=minute(ago, now), job=job, status=status, count=count)
    run = make_run(job, status="completed", attempts=2)
    for n, ms in ((1, 100), (2, 900)):
        RunAttempt.objects.filter(run=run, number=n).update(
            started_at=minute(2) + dt.timedelta(seconds=n), duration_ms=ms, endpoint=URL,
            outcome="failed" if n == 1 else "succeeded",
        )  # fmt: skip
    EndpointHealth.objects.create(endpoint_url=URL, success_rate=0.5, failure_rate=0.5,
                                  latency_p95_ms=900.0, samples=20)  # fmt: skip
    HealthSample.objects.create(endpoint_url=URL, at=minute(2), score=55.0)
    return job, run


def svg_texts(body: str, section: str) -> list[str]:
    part = body[body.index(f'id="strait-{section}"') :]
    part = part[: part.index("</svg>")]
    return re.findall(r"<text[^>]*>([^<]+)</text>", part)


def test_overview__charts_have_time_axes_y_ticks_and_legends(admin_client):
    job, _ = busy_hour()
    QueueSample.objects.create(queue="default", at=minute(2), depth=40, due=30, lag_seconds=12.5)
    first = minute(59)  # the window's first minute, read on both sides of the request
    body = admin_client.get(reverse("admin:django_strait_overview")).content.decode()

    texts = svg_texts(body, "throughput")
    assert {f"{timezone.localtime(m):%H:%M}" for m in (first, minute(59))} & set(texts)
    assert "0/min" in texts and "20/min" in texts  # y ticks up to a round top (12 -> 20)
    assert "attempts ended" in body and "runs finished" in body
    assert "1000 ms" in svg_texts(body, "latency")  # p95 of 900 ms, under a round top
    assert 'data-series="p50"' in body and 'data-series="p95"' in body
    assert 'data-series="default"' in body  # the queue's lag line
    assert 'data-series="dead_letter"' in body  # an outcome layer
    assert reverse("admin:django_strait_job_stats", args=[job.pk]) in body  # the drill-down
    assert "Pause auto-refresh" in body


def test_job_drilldown__success_rate_latency_and_attempts_per_run(admin_client):
    job, _ = busy_hour()
    body = admin_client.get(
        reverse("admin:django_strait_job_stats", args=[job.pk])
    ).content.decode()
    assert "Job partner-webhook: the last hour" in body
    for section in ("success", "latency", "attempts", "outcomes"):
        assert f'id="strait-{section}"' in body
    assert "100%" in svg_texts(body, "success")  # the percent axis is 0-100
    summary = re.sub(r"\s+", " ", body[body.index("strait-summary") :])
    assert "finished in the hour</th><td>30" in summary  # 3 minutes x (8 completed + 2 dead)


def test_endpoint_drilldown__reads_its_attempts_and_health_samples(admin_client):
    busy_hour()
    page = reverse("admin:django_strait_endpoint_stats")
    body = admin_client.get(page, {"url": URL}).content.decode()
    assert f"Endpoint {URL}: the last hour" in body
    assert 'data-series="health score"' in body
    summary = re.sub(r"\s+", " ", body[body.index("strait-summary") :])
    assert "attempts in the hour</th><td>2" in summary and "succeeded</th><td>1" in summary
    assert admin_client.get(page, {"url": "http://nowhere.invalid/"}).status_code == 404


def test_drilldown__needs_view_jobrun(client):
    job = make_job()
    client.force_login(User.objects.create_user("viewer", is_staff=True))
    assert client.get(reverse("admin:django_strait_job_stats", args=[job.pk])).status_code == 403


def test_queue_sampler__one_sample_per_queue_and_minute():
    job = make_job(queue="mail")
    make_run(job, available_at=timezone.now() - dt.timedelta(seconds=30))
    now = timezone.now()
    assert QueueSampler().run_once(now).counts == {"sampled": 1, "forgotten": 0}
    assert QueueSampler().run_once(now).counts == {"sampled": 0, "forgotten": 0}
    sample = QueueSample.objects.get()
    assert (sample.queue, sample.depth, sample.due) == ("mail", 1, 1)
    assert sample.lag_seconds >= 29


def test_percentile_and_nice_top():
    assert series.percentile([10, 20, 30, 40], 0.5) == 20
    assert series.percentile([10, 20, 30, 40], 0.95) == 40
    assert [charts.nice_top(v) for v in (0, 0.3, 7, 12, 240, 1000)] == [1, 0.5, 10, 20, 250, 1000]
