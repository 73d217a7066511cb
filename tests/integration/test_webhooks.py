"""Completion webhooks against real listeners on 127.0.0.1: written with the transition, delivered signed."""

from __future__ import annotations

import datetime as dt
import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest
from django.core.exceptions import ValidationError
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

from django_strait import signals, transitions, trigger, trigger_many
from django_strait.dispatch.results import EXCERPT_CHARS
from django_strait.dispatch.signing import verify
from django_strait.models import EndpointCircuit, JobRun, WebhookDelivery
from django_strait.storage import backend
from tests.conftest import Received, Reply
from tests.integration.factories import make_job

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "whsec-test"
#: Each payload's answer from the job's endpoint, and the status it leaves the run in.
ANSWERS = {
    "ok": Reply(200, b'{"done": 1}'),
    "fail": Reply(400, b"no", {"Strait-Action": "fail"}),
    "dlq": Reply(404, b"gone"),
    "discard": Reply(200, b"", {"Strait-Action": "discard"}),
}


def hooks(server, path: str = "/hook") -> list[Received]:
    return [r for r in server.requests if r.path == path]


def answer_by_payload(request: Received) -> Reply:
    return ANSWERS[request.json["payload"]["answer"]]


@pytest.fixture
def running_worker() -> Iterator[Callable[..., object]]:
    """``start(**config)``: a worker in a thread (not burst); stopped at the test's end."""
    from django_strait.management.commands.run_strait_worker import build_config
    from django_strait.worker.engine import Worker

    started: list[tuple[Worker, threading.Thread]] = []

    def start(**config) -> Worker:
        cfg = replace(build_config({"worker_id": f"hook-{len(started)}"}), duties=False, **config)
        worker = Worker(cfg)
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        started.append((worker, thread))
        return worker

    yield start
    for worker, thread in started:
        worker.stop()
        thread.join(60)
        assert not thread.is_alive()


def wait_for(check: Callable[[], bool], why: Callable[[], str], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"still waiting after {timeout} s: {why()}")
        time.sleep(0.05)


def test_every_terminal_run__gets_one_post_signed_with_the_jobs_secret(http_server, burst):
    http_server.routes["/work"] = answer_by_payload
    job = make_job(
        endpoint_url=http_server.url("/work"),
        webhook_url=http_server.url("/hook"),
        signing_secret=SECRET,
        max_attempts=1,
    )
    ran = {a: trigger(job.name, {"answer": a}) for a in ANSWERS}
    canceled = transitions.cancel(trigger(job.name, {"answer": "ok"}, delay=3600).pk)
    dropped = transitions.discard(trigger(job.name, {"answer": "ok"}, delay=3600).pk)

    burst()

    statuses = {a: JobRun.objects.get(pk=r.pk).status for a, r in ran.items()}
    assert statuses == {
        "ok": "completed", "fail": "failed", "dlq": "dead_letter", "discard": "discarded"
    }  # fmt: skip
    got = hooks(http_server)
    by_run = Counter(r.json["run_id"] for r in got)
    assert by_run == {r.pk: 1 for r in [*ran.values(), canceled, dropped]}
    for request in got:
        body, headers = request.json, request.headers
        assert verify(SECRET, request.body, headers["Strait-Signature"])
        run = JobRun.objects.get(pk=body["run_id"])
        delivery = WebhookDelivery.objects.get(run=run)
        assert headers["Strait-Event"] == body["event"] == delivery.event
        assert headers["Strait-Delivery-Id"] == body["delivery_id"] == str(delivery.delivery_id)
        assert body["status"] == run.status and body["job"] == job.name
        assert body["attempt"] == run.attempt and body["error_type"] == run.error_type
        assert dt.datetime.fromisoformat(body["finished_at"]) == run.finished_at
        assert (delivery.status, delivery.attempt, delivery.last_status_code) == (
            "delivered", 1, 200
        )  # fmt: skip
    events = {r.json["run_id"]: r.json["event"] for r in got}
    assert events[ran["ok"].pk] == "run.completed"
    assert events[ran["dlq"].pk] == "run.dead_lettered"
    assert events[canceled.pk] == "run.canceled" and events[dropped.pk] == "run.discarded"
    completed = next(r.json for r in got if r.json["run_id"] == ran["ok"].pk)
    assert completed["result"] == {"done": 1} and completed["error"] == ""


def test_webhook_events__filter_what_is_notified_and_retries_notify_nothing(http_server, burst):
    http_server.routes["/work"] = answer_by_payload
    job = make_job(
        endpoint_url=http_server.url("/work"),
        webhook_url=http_server.url("/hook"),
        webhook_events=["run.dead_lettered"],
        max_attempts=2,
        retry_jitter=0,
    )
    trigger(job.name, {"answer": "ok"})
    retried = trigger(job.name, {"answer": "dlq"})
    plain = make_job()  # no webhook_url
    trigger_many(plain.name, [{}, {}])

    burst()

    assert [r.json["run_id"] for r in hooks(http_server)] == [retried.pk]
    assert "Strait-Signature" not in hooks(http_server)[0].headers  # no secret, no signature
    assert WebhookDelivery.objects.count() == 1


def test_a_rolled_back_transition__owes_no_webhook(http_server):
    job = make_job(webhook_url=http_server.url("/hook"))
    run = trigger(job.name, {}, delay=3600)

    with pytest.raises(RuntimeError), transaction.atomic():
        transitions.cancel(run.pk)
        assert WebhookDelivery.objects.filter(run=run).count() == 1
        raise RuntimeError("roll back")

    assert JobRun.objects.get(pk=run.pk).status == "queued"
    assert not WebhookDelivery.objects.exists()


def test_a_receiver_answering_503_twice__gets_the_delivery_on_the_third_try(
    http_server, running_worker, listen
):
    answers = iter([Reply(503, b"busy"), Reply(503, b"busy")])
    http_server.routes["/hook"] = lambda r: next(answers, Reply(204, b""))
    job = make_job(
        webhook_url=http_server.url("/hook"),
        webhook_retry={"strategy": "fixed", "initial_delay": "100ms", "min_delay": "100ms",
                       "jitter": 0},
    )  # fmt: skip
    failed, delivered = listen(signals.webhook_failed), listen(signals.webhook_delivered)
    run = trigger(job.name, {})

    running_worker(poll_interval=0.1)
    wait_for(
        lambda: bool(delivered.calls),  # sent once the delivery is settled
        lambda: str(list(WebhookDelivery.objects.values("status", "attempt", "last_error"))),
    )

    got = hooks(http_server)
    assert len(got) == 3
    assert len({r.headers["Strait-Delivery-Id"] for r in got}) == 1  # the receiver can dedupe
    assert {r.body for r in got} == {got[0].body}  # the same notice each time
    delivery = WebhookDelivery.objects.get(run=run)
    assert (delivery.attempt, delivery.last_status_code) == (3, 204)
    assert [(c["attempt"], c["status_code"], c["retrying"]) for c in failed.calls] == [
        (1, 503, True), (2, 503, True)
    ]  # fmt: skip
    assert [(c["attempt"], c["run_id"]) for c in delivered.calls] == [(3, run.pk)]


def test_a_receiver_that_never_succeeds__fails_after_its_policys_attempts(http_server, burst):
    http_server.routes["/hook"] = lambda r: Reply(410, b"unsubscribed")
    job = make_job(webhook_url=http_server.url("/hook"))
    run = trigger(job.name, {})

    burst()

    delivery = WebhookDelivery.objects.get(run=run)
    assert (delivery.status, delivery.attempt, delivery.last_status_code) == ("failed", 1, 410)
    assert "HTTP 410" in delivery.last_error and delivery.last_response == "unsubscribed"


def test_a_receivers_answer__is_kept_as_the_deliverys_last_response(http_server, burst):
    answers = {"short": b'{"received": true}', "long": b"x" * 3000}
    http_server.routes["/hook"] = lambda r: Reply(200, answers[r.json["result"]["size"]])
    http_server.routes["/work"] = lambda r: Reply(200, json.dumps(r.json["payload"]).encode())
    job = make_job(endpoint_url=http_server.url("/work"), webhook_url=http_server.url("/hook"))
    runs = {size: trigger(job.name, {"size": size}) for size in answers}

    burst()

    kept = {size: WebhookDelivery.objects.get(run=run) for size, run in runs.items()}
    assert kept["short"].status == "delivered"
    assert kept["short"].last_response == '{"received": true}'
    assert kept["long"].last_response == "x" * EXCERPT_CHARS  # an excerpt, as for a failure


def closed_port_url() -> str:
    """A URL on 127.0.0.1 where nothing listens (connections are refused at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/down"


def test_a_receiver_that_is_down__opens_its_circuit_and_other_jobs_runs_all_complete(burst):
    down = closed_port_url()
    hooked = make_job(webhook_url=down)
    other = make_job()
    first = trigger_many(hooked.name, [{"i": i} for i in range(6)])
    trigger_many(other.name, [{"i": i} for i in range(50)])
    burst()
    assert EndpointCircuit.objects.get(endpoint_url=down).state == "open"
    later = trigger_many(hooked.name, [{"i": i} for i in range(6)])
    others = trigger_many(other.name, [{"i": i} for i in range(50)])

    stats = burst()

    assert stats.succeeded == 56
    assert set(JobRun.objects.values_list("status", flat=True)) == {"completed"}
    assert len(others) == 50
    sent = WebhookDelivery.objects.filter(run__in=first)
    assert set(sent.values_list("attempt", "status")) == {(1, "pending")}
    assert "http.connect" not in sent.first().last_error  # the message, not the type
    assert "Cannot connect" in sent.first().last_error
    # Once the circuit is open, deliveries wait for its cooldown and spend no attempt.
    held = WebhookDelivery.objects.filter(run__in=later)
    assert set(held.values_list("attempt", "status")) == {(0, "pending")}
    assert held.filter(next_attempt_at__gt=timezone.now() + dt.timedelta(seconds=20)).count() == 6


@override_settings(STRAIT={"ALLOWED_PRIVATE_NETWORKS": ["127.0.0.1/32"]})
def test_a_webhook_url_the_ssrf_guard_refuses__is_refused_at_save():
    job = make_job(webhook_url="http://127.0.0.2:9/hook")  # written around clean()

    with pytest.raises(ValidationError) as caught:
        job.full_clean()

    assert "webhook_url" in caught.value.message_dict
    assert "127.0.0.2" in caught.value.message_dict["webhook_url"][0]


def test_a_webhook_url_refused_when_delivered__fails_without_a_call(burst, settings):
    job = make_job(webhook_url="http://127.0.0.2:9/hook")  # allowed when saved (127.0.0.0/8)
    run = trigger(job.name, {})
    settings.STRAIT = {"ALLOWED_PRIVATE_NETWORKS": ["127.0.0.1/32"]}

    burst()

    delivery = WebhookDelivery.objects.get(run=run)
    assert (delivery.status, delivery.attempt, delivery.last_status_code) == ("failed", 1, None)
    assert "127.0.0.2" in delivery.last_error and "loopback" in delivery.last_error


def test_redeliver__sends_a_failed_delivery_again_with_the_same_id(http_server, burst):
    replies = iter([Reply(400, b"bad")])
    http_server.routes["/hook"] = lambda r: next(replies, Reply(200, b""))
    job = make_job(webhook_url=http_server.url("/hook"))
    trigger(job.name, {})
    burst()
    delivery = WebhookDelivery.objects.get()
    assert delivery.status == "failed"

    assert backend().redeliver([delivery.pk], now=timezone.now()) == 1
    burst()

    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempt) == ("delivered", 1)
    ids = [r.headers["Strait-Delivery-Id"] for r in hooks(http_server)]
    assert ids == [str(delivery.delivery_id)] * 2


def test_metrics__count_undelivered_webhooks_and_the_oldest_due_ones_lag():
    from django_strait.metrics.database import families, read_snapshot

    job = make_job(webhook_url="https://hooks.example.com/x")
    for _ in range(2):
        transitions.cancel(trigger(job.name, {}, delay=3600).pk)
    WebhookDelivery.objects.update(next_attempt_at=timezone.now() - dt.timedelta(seconds=90))

    snap = read_snapshot(backend().alias, timezone.now(), 300)

    assert (snap.webhooks, snap.webhooks_due) == ({"pending": 2}, 2)
    assert 90 <= snap.webhook_lag < 120
    samples = {
        (s.name, tuple(s.labels.items())): s.value
        for family in families(snap)
        for s in family.samples
    }
    assert samples[("strait_webhook_deliveries", (("status", "pending"),))] == 2
    assert samples[("strait_webhook_deliveries", (("status", "failed"),))] == 0


def test_workflow_runs__notify_completed_and_failed_signed_with_the_workflows_secret(
    http_server, burst
):
    from django_strait import define_workflow, trigger_workflow
    from tests.integration.factories import DIAMOND

    hook = http_server.url("/wf-hook")
    define_workflow("hooked-ok", DIAMOND, webhook_url=hook, signing_secret=SECRET)
    define_workflow(
        "hooked-fail", [{"name": "a", "job": "wf-step"}, {"name": "b", "job": "wf-fail"}],
        webhook_url=hook, signing_secret=SECRET,
    )  # fmt: skip
    ok, failed = trigger_workflow("hooked-ok", {}), trigger_workflow("hooked-fail", {})

    burst()

    got = {r.json["run_id"]: r for r in hooks(http_server, "/wf-hook")}
    assert set(got) == {ok.pk, failed.pk} and len(hooks(http_server, "/wf-hook")) == 2
    assert (got[ok.pk].json["event"], got[ok.pk].json["workflow"]) == (
        "workflow.completed", "hooked-ok"
    )  # fmt: skip
    assert got[failed.pk].json["event"] == "workflow.failed"
    assert got[failed.pk].json["error_type"] == "workflow.step_failed"
    assert all(verify(SECRET, r.body, r.headers["Strait-Signature"]) for r in got.values())
    # The steps' jobs have no webhook of their own: only the workflows notified.
    assert WebhookDelivery.objects.filter(run__isnull=False).count() == 0


def test_define_workflow__refuses_an_unknown_webhook_event_naming_the_allowed_ones():
    from django_strait import define_workflow
    from django_strait.workflows.defining import WorkflowError

    with pytest.raises(WorkflowError) as caught:
        define_workflow(
            "hooked", [{"name": "a", "job": "wf-step"}],
            webhook_url="https://hooks.example.com/x", webhook_events=["run.completed"],
        )  # fmt: skip

    assert caught.value.field == "webhook_events"
    assert "workflow.completed, workflow.failed" in str(caught.value)


def test_a_receiver_that_hangs__holds_no_run_and_no_other_receivers_delivery(
    http_server, running_worker
):
    release = threading.Event()

    def hang(request: Received) -> Reply:
        release.wait(60)
        return Reply(204, b"")

    http_server.routes["/hang"] = hang
    hanging = make_job(webhook_url=http_server.url("/hang"))
    fine = make_job(webhook_url=http_server.url("/hook"))
    other = make_job()
    try:
        trigger_many(hanging.name, [{"i": i} for i in range(10)])
        running_worker(poll_interval=0.1, webhook_timeout=60.0)
        wait_for(
            lambda: len(hooks(http_server, "/hang")) == 10,
            lambda: f"{len(hooks(http_server, '/hang'))} deliveries reached the receiver",
        )
        later = trigger_many(other.name, [{"i": i} for i in range(50)])
        notified = trigger_many(fine.name, [{"i": i} for i in range(10)])

        # While ten deliveries wait for an answer, every run completes and the other
        # receiver gets each of its deliveries.
        wait_for(
            lambda: WebhookDelivery.objects.filter(status="delivered").count() == 10,
            lambda: str(Counter(WebhookDelivery.objects.values_list("url", "status"))),
        )
        delivered = WebhookDelivery.objects.filter(status="delivered")
        assert set(delivered.values_list("run_id", flat=True)) == {r.pk for r in notified}
        assert len(hooks(http_server, "/hang")) == 10  # still unanswered
        wait_for(
            lambda: JobRun.objects.filter(status="completed").count() == 70,
            lambda: str(Counter(JobRun.objects.values_list("status", flat=True))),
        )
        assert all(JobRun.objects.get(pk=r.pk).attempt == 1 for r in later)
    finally:
        release.set()
    wait_for(
        lambda: WebhookDelivery.objects.filter(status="delivered").count() == 20,
        lambda: str(Counter(WebhookDelivery.objects.values_list("status", flat=True))),
    )
