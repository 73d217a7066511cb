"""The worker against the real database: claiming, executing, recording."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

from django_strait import trigger, trigger_many
from django_strait.models import Job, JobRun, RunAttempt
from tests.conftest import Reply

pytestmark = pytest.mark.django_db(transaction=True)


def make_due(*runs: JobRun) -> None:
    """Skip a retry's backoff: make the runs due now (the test is not about time)."""
    JobRun.objects.filter(pk__in=[r.pk for r in runs]).update(available_at=timezone.now())


def test_worker__completes_sync_python_runs_with_one_attempt_each(burst):
    runs = trigger_many("test-noop", [{"i": i} for i in range(30)])

    stats = burst()

    assert stats.succeeded == 30
    assert set(JobRun.objects.values_list("status", flat=True)) == {"completed"}
    assert RunAttempt.objects.filter(outcome="succeeded").count() == 30
    done = JobRun.objects.get(pk=runs[0].pk)
    assert done.attempt == 1 and done.finished_at and done.started_at and done.claimed_by == ""


def test_worker__passes_context_and_stores_the_result(burst):
    run = trigger("test-echo", {"hello": "world"})

    burst()

    run.refresh_from_db()
    assert run.status == "completed"
    assert run.result == {"payload": {"hello": "world"}, "attempt": 1, "run_id": run.pk}


def test_worker__runs_coroutine_handlers_on_its_loop(burst):
    run = trigger("test-async-echo", [1, 2])

    burst()

    run.refresh_from_db()
    assert (run.status, run.result) == ("completed", {"async": True, "payload": [1, 2]})


def test_worker__retries_a_failing_handler_then_dead_letters_it_with_every_error(burst):
    run = trigger("test-boom", {})  # max_attempts=2, initial_delay 1s, no jitter

    before = timezone.now()
    burst()
    run.refresh_from_db()
    assert (run.status, run.attempt, run.error_type) == ("queued", 1, "python.ValueError")
    assert (
        before + dt.timedelta(seconds=0.9)
        <= run.available_at
        <= timezone.now() + dt.timedelta(seconds=1.1)
    )

    make_due(run)
    burst()

    run.refresh_from_db()
    assert (run.status, run.attempt) == ("dead_letter", 2)
    attempts = list(run.attempts.values_list("number", "outcome", "error_type", "error"))
    assert attempts == [
        (1, "failed", "python.ValueError", "ValueError: boom"),
        (2, "failed", "python.ValueError", "ValueError: boom"),
    ]


def test_worker__context_heartbeat_from_a_sync_handler_writes_heartbeat_at(burst):
    run = trigger("test-heartbeat", {})

    burst()

    run.refresh_from_db()
    assert (run.status, run.result) == ("completed", {"moved": True})


def test_worker__an_async_handler_past_its_timeout_is_cancelled_and_retried(burst):
    run = trigger("test-slow-async", {})

    burst()

    run.refresh_from_db()
    assert (run.status, run.error_type) == ("queued", "python.timeout")
    assert run.attempts.get().outcome == "timed_out"


def test_worker__burst_leaves_runs_that_are_not_due_yet(burst):
    later = trigger("test-noop", {}, delay="1h")
    now = trigger("test-noop", {})

    burst()

    assert JobRun.objects.get(pk=later.pk).status == "queued"
    assert JobRun.objects.get(pk=now.pk).status == "completed"


@pytest.mark.parametrize(
    ("action", "status"),
    [("discard", "discarded"), ("dead_letter", "dead_letter"), ("fail", "failed")],
)
def test_worker__applies_handler_actions(burst, action, status):
    run = trigger("test-actions", {"action": action})

    burst()

    run.refresh_from_db()
    assert run.status == status and run.attempt == 1
    assert run.attempts.get().outcome == "failed"


def test_worker__retry_action_uses_the_handlers_delay(burst):
    run = trigger("test-actions", {"action": "retry", "delay": "2h"})

    burst()

    run.refresh_from_db()
    assert run.status == "queued"
    # The handler asked for 2 h; the default max_delay (1 h) caps it.
    wait = (run.available_at - timezone.now()).total_seconds()
    assert 3500 < wait <= 3600


def test_worker__non_retryable_error_types_skip_retries(burst):
    run = trigger(
        "test-actions",
        {"action": "error", "type": "billing.declined"},
        retry={"non_retryable_errors": ["billing.*"]},
    )
    other = trigger(
        "test-actions",
        {"action": "error", "type": "billingx.declined"},
        retry={"non_retryable_errors": ["billing.*"]},
    )

    burst()

    run.refresh_from_db()
    other.refresh_from_db()
    assert (run.status, run.error_type) == ("dead_letter", "billing.declined")
    assert (other.status, other.error_type) == ("queued", "billingx.declined")


def test_worker__on_exhaustion_discard_discards_instead_of_dead_lettering(burst):
    run = trigger("test-boom", {}, max_attempts=1, retry={"on_exhaustion": "discard"})

    burst()

    run.refresh_from_db()
    assert (run.status, run.last_error) == ("discarded", "ValueError: boom")


def test_worker__takes_higher_priority_first(burst):
    low = trigger("test-noop", {}, priority=-5)
    high = trigger("test-noop", {}, priority=50)
    mid = trigger("test-noop", {})

    burst(concurrency=1, batch_size=1)

    started = dict(JobRun.objects.values_list("pk", "started_at"))
    assert started[high.pk] < started[mid.pk] < started[low.pk]


def test_worker__only_takes_its_queues(burst):
    mine = trigger("test-noop", {}, queue="emails")
    other = trigger("test-noop", {}, queue="reports")

    burst(queues=["emails"])

    assert JobRun.objects.get(pk=mine.pk).status == "completed"
    assert JobRun.objects.get(pk=other.pk).status == "queued"


def test_worker__skips_runs_of_a_paused_job(burst):
    run = trigger("test-noop", {})
    Job.objects.filter(name="test-noop").update(enabled=False)

    burst()

    assert JobRun.objects.get(pk=run.pk).status == "queued"


def test_worker__a_handler_not_registered_in_code_is_dead_lettered_unrun(burst, settings):
    # Written around validation (raw ORM): the worker looks the name up, never imports it.
    # No grace: no other worker may know it (tests/integration/test_rolling_deploy.py).
    settings.STRAIT = {**settings.STRAIT, "UNKNOWN_HANDLER_GRACE": 0}
    Job.objects.create(name="ghost", handler="os.system", max_attempts=3)
    run = trigger("ghost", "echo pwned")

    burst()

    run.refresh_from_db()
    assert (run.status, run.error_type, run.attempt) == ("dead_letter", "handler.unknown", 1)
    assert "'os.system' is not a registered handler" in run.last_error
    assert run.result is None


def test_trigger__refuses_a_payload_with_a_nul_character():
    from django_strait.services.triggering import TriggerError

    with pytest.raises(TriggerError, match="payload: must not contain the NUL"):
        trigger("test-noop", {"x": "a\u0000b"})
    assert trigger("test-noop", {"x": "a literal \\u0000 is fine"}).pk


@pytest.mark.postgres
def test_worker__a_result_the_database_refuses_becomes_a_retried_attempt(burst):
    if connection.vendor != "postgresql":
        pytest.skip("only PostgreSQL refuses \\u0000 in jsonb")
    run = trigger("test-nul", {})

    burst()

    run.refresh_from_db()
    assert (run.status, run.error_type) == ("queued", "worker.record_failed")
    assert run.attempts.get().error_type == "worker.record_failed"


# -- HTTP jobs ---------------------------------------------------------------------


def http_job(server, path: str = "/hook", **fields) -> Job:
    return Job.objects.create(
        name=fields.pop("name", "hook"), endpoint_url=server.url(path), **fields
    )


def test_worker__dispatches_http_jobs_and_stores_the_json_answer(burst, http_server):
    http_server.routes["/hook"] = lambda r: Reply(200, b'{"charged": true}')
    http_job(http_server, signing_secret="s3cret")
    run = trigger("hook", {"amount": 5})

    burst()

    run.refresh_from_db()
    assert (run.status, run.result, run.endpoint_used) == (
        "completed",
        {"charged": True},
        http_server.url("/hook"),
    )
    [got] = http_server.requests
    assert got.json == {"run_id": run.pk, "job": "hook", "attempt": 1, "payload": {"amount": 5}}
    assert got.headers["Strait-Run-Id"] == str(run.pk)
    assert got.headers["Idempotency-Key"] == str(run.pk)
    from django_strait.dispatch.signing import verify

    assert verify("s3cret", got.body, got.headers["Strait-Signature"])
    attempt = run.attempts.get()
    assert (attempt.status_code, attempt.endpoint) == (200, http_server.url("/hook"))


def test_worker__http_503_retries_and_404_dead_letters_at_once(burst, http_server):
    http_server.routes["/busy"] = lambda r: Reply(503, b"busy", {"Retry-After": "120"})
    http_server.routes["/gone"] = lambda r: Reply(404, b"no such thing")
    http_job(http_server, "/busy", name="busy")
    http_job(http_server, "/gone", name="gone", max_attempts=5)
    busy, gone = trigger("busy", {}), trigger("gone", {})

    burst()

    busy.refresh_from_db()
    gone.refresh_from_db()
    assert (busy.status, busy.error_type) == ("queued", "http.503")
    wait = (busy.available_at - timezone.now()).total_seconds()
    assert 100 < wait <= 120  # Retry-After honoured
    assert (gone.status, gone.error_type, gone.attempt) == ("dead_letter", "http.404", 1)
    assert gone.attempts.get().status_code == 404


def test_worker__strait_action_header_overrides_the_status(burst, http_server):
    http_server.routes["/hook"] = lambda r: Reply(500, b"nope", {"Strait-Action": "discard"})
    http_job(http_server)
    run = trigger("hook", {})

    burst()

    assert JobRun.objects.get(pk=run.pk).status == "discarded"


def test_job_clean__refuses_headers_that_strait_sets():
    from django.core.exceptions import ValidationError

    job = Job(
        name="h",
        endpoint_url="https://example.invalid/x",
        headers={"Strait-Run-Id": "1", "X-Team": "a"},
    )

    with pytest.raises(ValidationError) as info:
        job.full_clean()

    assert "Strait-Run-Id" in str(info.value.message_dict["headers"])


def test_worker__logs_each_attempt_that_did_not_complete_with_its_run_in_extra(burst, caplog):
    run = trigger("test-actions", {"action": "dead_letter"})

    with caplog.at_level("INFO", logger="django_strait.worker.recorder"):
        burst()

    [line] = [r for r in caplog.records if getattr(r, "run_id", None) == run.pk]
    assert line.levelname == "WARNING" and line.job == "test-actions" and line.attempt == 1
    assert "-> dead_letter" in line.getMessage()


def test_worker__counts_finished_attempts_per_minute_in_the_rollup(burst):
    from django_strait.models import RunRollup

    trigger_many("test-noop", [{}] * 5)
    trigger("test-actions", {"action": "dead_letter"})
    trigger("test-boom", {})

    burst()

    counts = {(r.job.name, r.status): r.count for r in RunRollup.objects.select_related("job")}
    assert counts == {
        ("test-noop", "completed"): 5,
        ("test-actions", "dead_letter"): 1,
        ("test-boom", "queued"): 1,
    }


@pytest.mark.parametrize(
    ("strait", "named"),
    [
        ({"POLL_INTERVAL": "soon"}, "STRAIT.POLL_INTERVAL"),
        ({"WORKER_CONCURRENCY": 0}, "STRAIT.WORKER_CONCURRENCY"),
        ({"DEFAULT_RETRY": {"jitter": 7}}, "STRAIT.DEFAULT_RETRY.jitter"),
    ],
)
def test_worker_command__bad_settings_raise_at_once_from_call_command(settings, strait, named):
    # call_command runs no system checks: the command itself must refuse to start.
    trigger("test-noop", {})
    settings.STRAIT = strait

    with pytest.raises(CommandError, match=named):
        call_command("run_strait_worker", burst=True, worker_id="bad-settings", verbosity=0)
    assert JobRun.objects.get().status == "queued"
