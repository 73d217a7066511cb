"""Fallback endpoints against real HTTP servers on 127.0.0.1 (docs/http-jobs.md)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.conf import settings
from django.test import override_settings
from django.utils import timezone

from django_strait import trigger
from django_strait.dispatch.failover import order
from django_strait.models import EndpointCircuit, Job, JobRun, RunAttempt, RunHold
from tests.conftest import Reply

pytestmark = pytest.mark.django_db(transaction=True)


def failover_job(server, *, fallbacks=("/backup",), **fields) -> Job:
    fields.setdefault("max_attempts", 3)
    fields.setdefault("retry_initial_delay_secs", 60)
    fields.setdefault("retry_jitter", 0)
    return Job.objects.create(
        name="hook",
        endpoint_url=server.url("/primary"),
        fallback_endpoint_urls=[server.url(p) for p in fallbacks],
        **fields,
    )


def attempts(run: JobRun) -> list[tuple[str, str, int | None]]:
    """(endpoint path, outcome, status code) of each attempt, in order."""
    rows = RunAttempt.objects.filter(run=run).order_by("number", "id")
    return [(r.endpoint.rsplit("/", 1)[1], r.outcome, r.status_code) for r in rows]


def make_due() -> None:
    JobRun.objects.filter(status="queued").update(available_at=timezone.now())


# -- the order of endpoints -------------------------------------------------------------


@pytest.mark.parametrize(
    ("last_used", "spent", "expected"),
    [
        ("", 0, ("p", "f1", "f2")),
        ("p", 0, ("p", "f1", "f2")),  # a new cycle (queued or replayed) starts at the primary
        ("p", 1, ("f1", "f2", "p")),
        ("f1", 2, ("f2", "p", "f1")),
        ("f2", 3, ("p", "f1", "f2")),  # after the last fallback, back to the primary
        ("gone", 2, ("p", "f1", "f2")),  # an endpoint since removed from the job
    ],
)
def test_order__starts_after_the_endpoint_that_failed_last(last_used, spent, expected):
    assert order(("p", "f1", "f2"), last_used=last_used, attempts_spent=spent) == expected


# -- failing over at once -----------------------------------------------------------------


@pytest.mark.parametrize("status", [400, 404, 503])
def test_failover__non_retryable_or_503_moves_to_the_fallback_at_once(burst, http_server, status):
    http_server.routes["/primary"] = lambda r: Reply(status, b"no")
    failover_job(http_server)
    run = trigger("hook", {"n": 1})

    burst()

    run.refresh_from_db()
    assert (run.status, run.attempt) == ("completed", 2)
    assert run.endpoint_used == http_server.url("/backup")
    assert attempts(run) == [("primary", "failed", status), ("backup", "succeeded", 200)]
    # No backoff between the two calls: the failover was due at once.
    first, second = RunAttempt.objects.filter(run=run).order_by("number")
    assert second.started_at - first.finished_at < dt.timedelta(seconds=5)
    assert [r.json["attempt"] for r in http_server.requests] == [1, 2]


def test_failover__retryable_500__next_attempt_after_the_backoff_goes_to_the_fallback(
    burst, http_server
):
    http_server.routes["/primary"] = lambda r: Reply(500, b"boom")
    failover_job(http_server)
    run = trigger("hook", {})

    burst()

    run.refresh_from_db()
    assert (run.status, run.attempt) == ("queued", 1)
    assert run.available_at > timezone.now() + dt.timedelta(seconds=30)  # the policy's backoff
    make_due()
    burst()

    run.refresh_from_db()
    assert run.status == "completed"
    assert attempts(run) == [("primary", "failed", 500), ("backup", "succeeded", 200)]


def test_failover__every_call_spends_an_attempt_and_the_last_endpoint_decides(burst, http_server):
    http_server.routes["/primary"] = lambda r: Reply(404, b"no")
    http_server.routes["/backup"] = lambda r: Reply(422, b"bad")
    failover_job(http_server)
    run = trigger("hook", {})

    burst()

    run.refresh_from_db()
    # The backup is the last endpoint: its non-retryable answer ends the run.
    assert (run.status, run.attempt, run.error_type) == ("dead_letter", 2, "http.422")
    assert attempts(run) == [("primary", "failed", 404), ("backup", "failed", 422)]


def test_failover__no_attempt_left__does_not_fail_over(burst, http_server):
    http_server.routes["/primary"] = lambda r: Reply(503, b"full")
    failover_job(http_server, max_attempts=1)
    run = trigger("hook", {})

    burst()

    run.refresh_from_db()
    assert (run.status, run.attempt) == ("dead_letter", 1)
    assert attempts(run) == [("primary", "failed", 503)]


def test_failover__two_fallbacks_tried_in_order(burst, http_server):
    http_server.routes["/primary"] = lambda r: Reply(503, b"full")
    http_server.routes["/second"] = lambda r: Reply(503, b"full too")
    failover_job(http_server, fallbacks=("/second", "/third"))
    run = trigger("hook", {})

    burst()

    run.refresh_from_db()
    assert run.status == "completed"
    assert [a[0] for a in attempts(run)] == ["primary", "second", "third"]


def test_failover__strait_action_is_obeyed_not_failed_over(burst, http_server):
    http_server.routes["/primary"] = lambda r: Reply(409, b"stop", {"Strait-Action": "dead_letter"})
    failover_job(http_server)
    run = trigger("hook", {})

    burst()

    run.refresh_from_db()
    assert (run.status, run.attempt) == ("dead_letter", 1)
    assert http_server.run_ids() == {run.pk: 1}


# -- open or unhealthy primaries ------------------------------------------------------------


def test_failover__open_primary_circuit__run_goes_to_the_fallback_spending_one_attempt(
    burst, http_server
):
    failover_job(http_server)
    EndpointCircuit.objects.create(
        endpoint_url=http_server.url("/primary"),
        state="open",
        failures=5,
        opened_at=timezone.now(),
    )
    run = trigger("hook", {})

    burst()

    run.refresh_from_db()
    assert (run.status, run.attempt) == ("completed", 1)
    assert attempts(run) == [("backup", "succeeded", 200)]
    assert {r.path for r in http_server.requests} == {"/backup"}


def test_failover__every_endpoint_open__run_is_held_without_an_attempt(burst, http_server):
    failover_job(http_server)
    now = timezone.now()
    for path in ("/primary", "/backup"):
        EndpointCircuit.objects.create(
            endpoint_url=http_server.url(path), state="open", failures=5, opened_at=now
        )
    run = trigger("hook", {})

    burst()

    run.refresh_from_db()
    assert (run.status, run.attempt, run.error_type) == ("queued", 0, "circuit.open")
    assert "fallback endpoint(s) are held too" in run.last_error
    assert attempts(run) == []
    [period] = RunHold.objects.filter(run=run)
    assert (period.reason, period.endpoint) == ("circuit.open", http_server.url("/primary"))
    assert http_server.requests == []


# -- SSRF on fallbacks ------------------------------------------------------------------------


def test_failover__fallback_outside_the_allowed_networks_is_refused_without_connecting(
    burst, http_server
):
    http_server.routes["/primary"] = lambda r: Reply(503, b"full")
    port = http_server.httpd.server_address[1]
    Job.objects.create(
        name="hook",
        endpoint_url=http_server.url("/primary"),
        fallback_endpoint_urls=[f"http://127.0.0.2:{port}/backup"],
        max_attempts=3,
    )
    run = trigger("hook", {})
    strait = {**settings.STRAIT, "ALLOWED_PRIVATE_NETWORKS": ["127.0.0.1/32"]}

    with override_settings(STRAIT=strait):
        burst()

    run.refresh_from_db()
    assert (run.status, run.error_type) == ("dead_letter", "ssrf.blocked")
    assert "127.0.0.2" in run.last_error
    assert [r.path for r in http_server.requests] == ["/primary"]
