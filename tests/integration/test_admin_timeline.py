"""A run's timeline in the admin: attempts on a time axis, waits and why, holds as periods."""

from __future__ import annotations

import datetime as dt
import re
from types import SimpleNamespace

import pytest
from django.contrib.auth.models import User
from django.test import Client

from django_strait.admin import timeline
from django_strait.models import RunAttempt, RunHold
from tests.integration.factories import make_job, make_run
from tests.integration.stories import HELD_CLAIMS, retried_held_completed

pytestmark = pytest.mark.django_db(transaction=True)

T0 = dt.datetime(2026, 1, 1, 12, tzinfo=dt.UTC)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


@pytest.fixture
def admin_client() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("ops", "ops@example.invalid", "x"))
    return client


def test_timeline__a_run_that_retried_was_held_and_completed(http_server, admin_client):
    run = retried_held_completed(http_server)
    assert run.status == "completed"

    [period] = RunHold.objects.filter(run=run)
    assert (period.reason, period.after_attempt, period.times) == ("circuit.open", 2, HELD_CLAIMS)
    outcomes = list(RunAttempt.objects.filter(run=run).values_list("number", "outcome"))
    assert outcomes == [(1, "failed"), (2, "failed"), (3, "succeeded")]

    page = admin_client.get(f"/admin/django_strait/jobrun/{run.pk}/change/").content.decode()
    assert "strait-timeline" in page
    assert page.count('data-kind="attempt"') == 3 and page.count('data-kind="hold"') == 1
    assert "retry delay after 503 (Retry-After when sent, else backoff)" in page
    assert f"circuit.open, held {HELD_CLAIMS} time(s)" in page
    assert http_server.url("/partner") in page
    # The dead letter page draws it too (the same admin underneath).
    dead = make_run(make_job(), status="dead_letter", attempts=2)
    page = admin_client.get(f"/admin/django_strait/deadletter/{dead.pk}/change/").content.decode()
    assert page.count('data-kind="attempt"') == 2


def test_timeline__attempts_are_listed_oldest_first_in_the_inline_and_the_api(admin_client):
    run = make_run(make_job(), status="dead_letter", attempts=3)
    # Out of number order on purpose: a replayed run's numbers keep counting, times decide.
    for number, seconds in ((1, 30), (2, 10), (3, 20)):
        RunAttempt.objects.filter(run=run, number=number).update(started_at=at(seconds))

    page = admin_client.get(f"/admin/django_strait/jobrun/{run.pk}/change/").content.decode()
    inline = re.sub(r"\s+", "", page[page.index('id="attempts-group"') :])
    cells = re.findall(r'<tdclass="field-number"><p>(\d+)</p>', inline)
    assert cells == ["2", "3", "1"]
    staff = User.objects.get(username="ops")
    from rest_framework.test import APIClient

    api = APIClient()
    api.force_authenticate(staff)
    body = api.get(f"/api/strait/runs/{run.pk}/").json()
    assert [a["number"] for a in body["attempts"]] == [2, 3, 1]


def test_build__legacy_short_circuited_rows_fold_into_one_band():
    run = SimpleNamespace(created_at=at(0), finished_at=at(100), status="completed",
                          available_at=at(0))  # fmt: skip
    rows = [attempt(1, 1, "failed", 503)]
    rows += [attempt(n, 1, "short_circuited", error_type="circuit.open") for n in (5, 35, 65)]
    rows.append(attempt(95, 2, "succeeded", 200))

    line = timeline.build(run, rows, [], now=at(200))

    [band] = line.of("hold")
    assert (band.start, band.end, band.times, band.label) == (at(5), at(95), 3, "circuit.open")
    assert [a.number for a in line.of("attempt")] == [1, 2]
    waits = line.of("wait")
    assert [w.label for w in waits] == [
        "queued until claimed",
        "retry delay after 503 (Retry-After when sent, else backoff)",
    ]


def test_build__a_queued_run_waits_until_now_after_its_last_attempt():
    run = SimpleNamespace(created_at=at(0), finished_at=None, status="queued", available_at=at(90))
    line = timeline.build(run, [attempt(0, 1, "failed", None, "python.KeyError")], [], now=at(30))
    assert line.of("wait")[-1].label == "backoff after python.KeyError"
    assert line.end == at(30)


def attempt(seconds, number, outcome, code=None, error_type=""):
    return SimpleNamespace(
        pk=int(seconds * 10), number=number, outcome=outcome, status_code=code,
        started_at=at(seconds), finished_at=at(seconds + 0.2), duration_ms=200,
        error_type=error_type, error="", endpoint="https://partner.example/hook", worker="w1",
    )  # fmt: skip
