"""trigger() and trigger_many(): runs made right, bad input refused by field."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.db import connections
from django.utils import timezone

from django_strait import trigger, trigger_many
from django_strait.models import Job, JobRun
from django_strait.services.triggering import TriggerError

pytestmark = pytest.mark.django_db


def test_trigger__queues_a_run_with_the_jobs_defaults():
    run = trigger("test-noop", {"a": 1})

    run = JobRun.objects.get(pk=run.pk)
    job = Job.objects.get(name="test-noop")
    assert (run.status, run.payload, run.queue, run.priority, run.attempt) == (
        "queued",
        {"a": 1},
        job.queue,
        job.priority,
        0,
    )
    assert run.available_at <= timezone.now()


@pytest.mark.parametrize(
    "options",
    [{}, {"queue": "emails", "priority": -3, "delay": "1m", "idempotency_key": "k-1"}],
    ids=["job defaults", "options"],
)
def test_trigger__returns_the_run_as_it_was_stored(options):
    # On PostgreSQL the run is built from the INSERT's constants and what it returned
    # (once the @job's row is synced: the first trigger in a process takes the ORM's way).
    trigger("test-noop", {})
    run = trigger("test-noop", {"a": [1, "x"]}, **options)

    stored = JobRun.objects.get(pk=run.pk)
    for field in JobRun._meta.concrete_fields:
        assert getattr(run, field.attname) == getattr(stored, field.attname), field.name
    assert run.idempotency_hit is False
    assert run._state.adding is False and run._state.db == "default"


def test_trigger__options_land_on_the_run():
    run = trigger(
        "test-noop",
        [1],
        delay="5m",
        priority=7,
        queue="emails",
        max_attempts=9,
        retry={"strategy": "linear", "initial_delay": "2s"},
    )

    run = JobRun.objects.get(pk=run.pk)
    assert (run.priority, run.queue, run.max_attempts) == (7, "emails", 9)
    assert run.retry_overrides == {"strategy": "linear", "initial_delay": 2.0}
    wait = (run.available_at - timezone.now()).total_seconds()
    assert 290 < wait <= 300


def test_trigger__run_at_schedules_for_that_instant():
    when = timezone.now() + dt.timedelta(days=1)

    assert JobRun.objects.get(pk=trigger("test-noop", {}, run_at=when).pk).available_at == when


def test_trigger__same_idempotency_key_returns_the_existing_run():
    first = trigger("test-noop", {"v": 1}, idempotency_key="order-42")
    again = trigger("test-noop", {"v": 2}, idempotency_key="order-42")

    assert again.pk == first.pk and again.idempotency_hit and not first.idempotency_hit
    assert JobRun.objects.filter(idempotency_key="order-42").count() == 1
    assert JobRun.objects.get(pk=first.pk).payload == {"v": 1}


def test_trigger__the_same_key_on_another_job_is_another_run():
    a = trigger("test-noop", {}, idempotency_key="k")
    b = trigger("test-echo", {}, idempotency_key="k")

    assert a.pk != b.pk


@pytest.mark.django_db(transaction=True)
def test_trigger__racing_triggers_with_one_key_make_one_run():
    trigger("test-noop", {})  # sync the job row first
    results, barrier = [], threading.Barrier(8)

    def fire():
        barrier.wait()
        try:
            results.append(trigger("test-noop", {}, idempotency_key="once").pk)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=fire) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert len(results) == 8 and len(set(results)) == 1
    assert JobRun.objects.filter(idempotency_key="once").count() == 1


FAR_WEST = dt.timezone(dt.timedelta(hours=-14))
FAR_EAST = dt.timezone(dt.timedelta(hours=14))


@pytest.mark.parametrize(
    ("kwargs", "field", "words"),
    [
        ({"name": "nope"}, "name", "unknown job 'nope'"),
        ({"name": ""}, "name", "non-empty string"),
        ({"payload": {"when": dt.date(2026, 1, 1)}}, "payload", "JSON-serialisable"),
        ({"payload": {"x": float("nan")}}, "payload", "JSON-serialisable"),
        ({"delay": "-3s"}, "delay", ""),
        ({"delay": "soon"}, "delay", ""),
        ({"delay": "1s", "run_at": timezone.now()}, "delay", "not both"),
        ({"run_at": dt.datetime(2026, 1, 1)}, "run_at", "timezone-aware"),
        ({"run_at": dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=FAR_WEST)}, "run_at", "ten years"),
        ({"run_at": dt.datetime(1, 1, 1, tzinfo=FAR_EAST)}, "run_at", "from 1970-01-01"),
        ({"run_at": dt.datetime(2090, 1, 1, tzinfo=dt.UTC)}, "run_at", "ten years"),
        ({"priority": 500}, "priority", "-100 to 100"),
        ({"priority": "high"}, "priority", "-100 to 100"),
        ({"queue": ""}, "queue", "non-empty"),
        ({"idempotency_key": "x" * 300}, "idempotency_key", "255"),
        ({"max_attempts": 0}, "max_attempts", ">= 1"),
        ({"retry": {"strategy": "zigzag"}}, "retry.strategy", ""),
        ({"retry": {"backoff_coefficient": 0.5}}, "retry.backoff_coefficient", "from 1 to 100"),
        ({"retry": {"strategy": "custom", "delays": []}}, "retry.delays", ""),
        ({"retry": {"speed": 3}}, "retry.speed", ""),
        ({"retry": ["exponential"]}, "retry", "object"),
    ],
)
def test_trigger__refuses_bad_input_naming_the_field(kwargs, field, words):
    args = {"name": "test-noop", "payload": {}, **kwargs}
    name, payload = args.pop("name"), args.pop("payload")

    with pytest.raises(TriggerError) as info:
        trigger(name, payload, **args)

    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ") and words in str(info.value)
    assert not JobRun.objects.exists()


def test_trigger_many__makes_one_run_per_payload_in_order():
    runs = trigger_many("test-noop", [{"i": i} for i in range(50)], priority=3)

    assert [r.payload for r in runs] == [{"i": i} for i in range(50)]
    stored = dict(JobRun.objects.values_list("pk", "payload"))
    assert [stored[r.pk] for r in runs] == [{"i": i} for i in range(50)]
    assert set(JobRun.objects.values_list("priority", "status")) == {(3, "queued")}


def test_trigger_many__a_bad_payload_refuses_the_whole_call():
    with pytest.raises(TriggerError, match=r"payloads\[1\]"):
        trigger_many("test-noop", [{}, {"x": object()}, {}])

    assert not JobRun.objects.exists()


def test_trigger_many__known_keys_return_the_existing_runs():
    existing = trigger("test-noop", {"old": True}, idempotency_key="b")

    runs = trigger_many(
        "test-noop", [{"n": 1}, {"n": 2}, {"n": 3}], idempotency_keys=["a", "b", "c"]
    )

    assert [r.idempotency_key for r in runs] == ["a", "b", "c"]
    assert runs[1].pk == existing.pk and runs[1].payload == {"old": True}
    assert JobRun.objects.count() == 3


def test_trigger_many__refuses_repeated_or_missing_keys():
    with pytest.raises(TriggerError, match="idempotency_keys"):
        trigger_many("test-noop", [{}, {}], idempotency_keys=["a", "a"])
    with pytest.raises(TriggerError, match="one key per payload"):
        trigger_many("test-noop", [{}, {}], idempotency_keys=["a"])


def test_trigger_many__runs_in_batches():
    runs = trigger_many("test-noop", [{"i": i} for i in range(25)], batch_size=10)

    assert len({r.pk for r in runs}) == 25 and JobRun.objects.count() == 25


def test_handler_trigger__is_the_same_as_trigger_by_name():
    from tests.testapp.jobs import echo

    run = echo.trigger({"x": 1}, priority=2)

    assert JobRun.objects.get(pk=run.pk).job.name == "test-echo" and run.priority == 2
    assert echo({"x": 1}, type("C", (), {"attempt": 1, "run_id": 0})())["payload"] == {"x": 1}


def test_trigger__refuses_a_payload_over_the_size_limit(settings):
    settings.STRAIT = {**settings.STRAIT, "TRIGGER_MAX_PAYLOAD_BYTES": 100}

    with pytest.raises(TriggerError, match=r"payload: is \d+ bytes as JSON; at most 100"):
        trigger("test-noop", {"text": "x" * 200})
    assert trigger("test-noop", {"text": "x" * 50}).pk


def test_trigger__priority_queue_and_delay_without_a_retry_override_land_on_the_run():
    run = trigger(
        "test-noop", {"a": [1]}, priority=-7, queue="bulk", delay=60, idempotency_key="k1"
    )

    stored = JobRun.objects.get(pk=run.pk)
    assert (stored.priority, stored.queue, stored.payload, stored.idempotency_key) == (
        -7,
        "bulk",
        {"a": [1]},
        "k1",
    )
    assert (run.priority, run.queue, run.payload, run.status) == (-7, "bulk", {"a": [1]}, "queued")
    assert 50 < (stored.available_at - timezone.now()).total_seconds() <= 60
    assert trigger("test-noop", {}, idempotency_key="k1").idempotency_hit


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"queue": "a\x00b"}, "queue"), ({"idempotency_key": "k\x00"}, "idempotency_key")],
)
def test_trigger__refuses_a_nul_in_queue_or_key(kwargs, field):
    with pytest.raises(TriggerError) as info:
        trigger("test-noop", {}, **kwargs)
    assert info.value.field == field and "NUL" in str(info.value)


def test_trigger_many__says_which_runs_were_already_there():
    trigger("test-noop", {}, idempotency_key="old")

    runs = trigger_many("test-noop", [{}, {}], idempotency_keys=["old", "new"])

    assert [r.idempotency_hit for r in runs] == [True, False]
    assert not any(r.idempotency_hit for r in trigger_many("test-noop", [{}, {}]))
