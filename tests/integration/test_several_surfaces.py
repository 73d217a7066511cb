"""Over several aliases, django.tasks results, ``strait_replay`` and the testing helpers
find a run on its own alias; ``strait_prune`` and ``strait_partition`` act on every
alias; the metrics view sums every alias's run gauges ("default" and "jobs2", the
``two_aliases`` fixture)."""

from __future__ import annotations

import datetime as dt
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connections
from django.urls import include, path
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from django_strait import define_workflow, trigger, trigger_workflow
from django_strait.models import JobRun, WebhookDelivery, WorkerProcess
from django_strait.services import registry
from django_strait.storage.postgres import LOCK_NAMESPACE, lock_key, move
from django_strait.testing import drain, immediate
from tests.integration.factories import make_job, make_run

pytestmark = pytest.mark.django_db(databases=["default", "jobs2"], transaction=True)

urlpatterns = [path("metrics/", include("django_strait.metrics.urls"))]


def status(run: JobRun) -> str:
    return JobRun.objects.using(run._state.db).get(pk=run.pk).status


# django.tasks


@pytest.mark.skipif(not settings.HAS_TASK_FRAMEWORK, reason="needs Django's task framework")
def test_get_result__finds_a_run_on_the_second_alias_by_its_id(two_aliases):
    from django_strait.tasks.backend import job_name
    from django_strait.tasks.framework import TaskResultDoesNotExist, task_backends
    from tests.testapp import tasks

    name = job_name(tasks.add)
    job = make_job(name, queue="two", using="jobs2", handler=registry.get(name).spec.path)
    run = make_run(job, status="completed", payload={"args": [2, 3], "kwargs": {}})
    JobRun.objects.using("jobs2").filter(pk=run.pk).update(result=5)
    assert run.pk > 2**48

    result = task_backends["default"].get_result(str(run.pk))

    assert (result.id, result.return_value, result.attempts) == (str(run.pk), 5, 1)
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result(str(2 * 2**48 + 1))  # an id of no alias


# strait_replay


def test_strait_replay__replays_runs_by_id_and_by_job_on_their_alias(two_aliases):
    far = make_job("far", queue="two", using="jobs2")
    there, other = make_run(far, status="dead_letter"), make_run(far, status="dead_letter")
    here = make_run(make_job(queue="default"), status="dead_letter")

    out = StringIO()
    call_command("strait_replay", str(there.pk), str(here.pk), stdout=out, stderr=StringIO())
    assert "Replayed 2 of 2" in out.getvalue()
    assert [status(r) for r in (there, other, here)] == ["queued", "dead_letter", "queued"]

    out = StringIO()
    call_command("strait_replay", "--job", "far", stdout=out, stderr=StringIO())
    assert "Replayed 1 of 1" in out.getvalue()
    assert status(other) == "queued"


def test_strait_replay__names_an_id_no_alias_has(two_aliases):
    run = make_run(make_job(queue="two", using="jobs2"), status="dead_letter")
    with pytest.raises(CommandError, match=f"no run has the id {run.pk + 1}"):
        call_command("strait_replay", str(run.pk), str(run.pk + 1))
    assert status(run) == "dead_letter"


# django_strait.testing


def test_drain__runs_the_runs_of_every_alias(two_aliases):
    there = make_run(make_job(queue="two", using="jobs2"))
    here = make_run(make_job(queue="default"))

    drained = drain()

    assert (status(there), status(here)) == ("completed", "completed")
    assert drained.completed == 2
    assert sorted(drained.run_ids) == sorted([here.pk, there.pk])


def test_immediate__a_trigger_on_the_second_alias_has_run_when_it_returns(two_aliases):
    make_job("far", queue="two", using="jobs2")
    with immediate() as ran:
        run = trigger("far", {"x": 1})
    assert run._state.db == "jobs2"
    assert run.status == "completed"
    assert ran.completed == 1


# strait_prune


def finished(job, status: str, days_ago: float) -> JobRun:
    run = make_run(job, status=status)
    ended = timezone.now() - dt.timedelta(days=days_ago)
    JobRun.objects.using(job._state.db).filter(pk=run.pk).update(finished_at=ended)
    return run


def left(*runs: JobRun) -> list[bool]:
    return [JobRun.objects.using(r._state.db).filter(pk=r.pk).exists() for r in runs]


def command(name: str, *args: str) -> list[str]:
    out = StringIO()
    call_command(name, *args, stdout=out)
    return out.getvalue().splitlines()


def postgres_or_skip() -> None:
    if connections["jobs2"].vendor != "postgresql":
        pytest.skip("PostgreSQL's")


def session_on(using: str):
    """A psycopg connection of the test's own to the database of ``using``."""
    import psycopg

    params = connections[using].get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    return psycopg.connect(**params, autocommit=True)


def test_strait_prune__prunes_every_alias_each_under_its_name(two_aliases):
    far, near = make_job("far", queue="two", using="jobs2"), make_job("near")
    old_far, old_near = finished(far, "completed", 40), finished(near, "canceled", 40)
    kept = [finished(far, "completed", 1), finished(far, "dead_letter", 400)]

    lines = command("strait_prune")

    assert [line for line in lines if line.startswith("On database")] == [
        "On database 'default':", "On database 'jobs2':",
    ]  # fmt: skip
    said = dict(zip(lines[::2], lines[1::2], strict=True))
    assert said["On database 'jobs2':"].startswith("Deleted 1 run(s)")
    assert said["On database 'default':"].startswith("Deleted 1 run(s)")
    assert left(old_far, old_near, *kept) == [False, False, True, True]


def test_strait_prune__database_picks_one_alias_and_job_finds_a_job_on_any(two_aliases):
    far, near = make_job("far", queue="two", using="jobs2"), make_job("near")
    old_far, old_near = finished(far, "completed", 40), finished(near, "completed", 40)

    dry = command("strait_prune", "--dry-run", "--database", "jobs2")
    assert dry[0] == "On database 'jobs2':" and "default" not in " ".join(dry)
    assert dry[-1].endswith("Dry run: nothing deleted.") and left(old_far) == [True]

    lines = command("strait_prune", "--database", "jobs2", "--job", "far")
    assert lines[0] == "On database 'jobs2':" and lines[1].startswith("Deleted 1 run(s)")
    assert len(lines) == 2
    assert left(old_far, old_near) == [False, True]


def test_strait_prune__an_unknown_alias_is_refused_naming_the_option_and_the_aliases(two_aliases):
    run = finished(make_job("far", queue="two", using="jobs2"), "completed", 40)
    with pytest.raises(CommandError, match=r"--database 'jobs9': not an alias of STRAIT\['DATAB"):
        call_command("strait_prune", "--database", "jobs9")
    with pytest.raises(CommandError, match="allowed: default, jobs2"):
        call_command("strait_prune", "--database", "jobs9")
    with pytest.raises(CommandError, match="--job: no job named 'nobody'; allowed: .*far"):
        call_command("strait_prune", "--job", "nobody")
    assert left(run) == [True]


def test_strait_prune__a_worker_pruning_one_alias_leaves_the_others_pruned(two_aliases):
    postgres_or_skip()
    far, near = make_job("far", queue="two", using="jobs2"), make_job("near")
    old_far, old_near = finished(far, "completed", 40), finished(near, "completed", 40)
    key = [LOCK_NAMESPACE, lock_key("pruner")]
    with session_on("jobs2") as worker:
        worker.execute("SELECT pg_advisory_lock(%s, %s)", key)
        with pytest.raises(CommandError, match="pruning right now on database 'jobs2'"):
            call_command("strait_prune", stdout=StringIO())
        worker.execute("SELECT pg_advisory_unlock(%s, %s)", key)
    assert left(old_far, old_near) == [True, False]


def test_strait_prune__on_one_database_says_what_it_always_said():
    run = finished(make_job("near"), "completed", 40)
    lines = command("strait_prune")
    assert len(lines) == 1 and lines[0].startswith("Deleted 1 run(s)")
    assert left(run) == [False]


# strait_partition


def test_strait_partition__an_unknown_alias_is_refused_naming_the_option(two_aliases):
    with pytest.raises(CommandError, match=r"--database 'jobs9'.*allowed: default, jobs2"):
        call_command("strait_partition", "--database", "jobs9")


def test_strait_partition__names_the_alias_that_is_not_postgresql(two_aliases):
    if connections["jobs2"].vendor == "postgresql":
        pytest.skip("the SQLite pass's test")
    with pytest.raises(CommandError, match="database 'jobs2' is sqlite"):
        call_command("strait_partition", "--database", "jobs2")


def test_strait_partition__acts_on_every_alias_each_under_its_name(two_aliases):
    """What an unfinished move left on jobs2 only is dropped there; default has none."""
    postgres_or_skip()
    with session_on("jobs2") as jobs2:
        jobs2.execute(f"CREATE SCHEMA {move.OLD}")
    try:
        lines = command("strait_partition", "--abandon")
        assert lines == [
            "On database 'default':", "Nothing was left to drop.",
            "On database 'jobs2':", f"Dropped {move.OLD}.",
        ]  # fmt: skip
        with connections["jobs2"].cursor() as cursor:
            assert move.leftovers(cursor) == []
        assert command("strait_partition", "--abandon", "--database", "jobs2") == [
            "On database 'jobs2':", "Nothing was left to drop.",
        ]  # fmt: skip
    finally:
        move.abandon("jobs2")


# The metrics view


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def worker(using: str, worker_id: str, in_flight: int) -> None:
    now = timezone.now()
    WorkerProcess.objects.using(using).create(
        worker_id=worker_id, host="h", pid=1, concurrency=5, started_at=now, last_seen_at=now,
        in_flight=in_flight,
    )  # fmt: skip


@pytest.mark.urls(__name__)
def test_metrics_view__sums_the_run_gauges_of_every_alias(admin_client, two_aliases):
    far, near = make_job("far", queue="two", using="jobs2"), make_job("near")
    for _ in range(3):
        make_run(far, available_at=timezone.now() - dt.timedelta(minutes=2))
    make_run(near)
    make_run(far, status="executing")
    make_run(near, status="executing")
    make_run(far, status="dead_letter")
    dead = make_run(near, status="dead_letter")
    WebhookDelivery.objects.using("jobs2").create(
        run=make_run(far, status="completed"), event="run.completed", url="http://127.0.0.1:9/w"
    )
    WebhookDelivery.objects.create(run=dead, event="run.dead_letter", url="http://127.0.0.1:9/w")
    define_workflow("far-flow", steps=[{"name": "a", "job": "far"}])
    trigger_workflow("far-flow", {})  # a running workflow run on jobs2, its step's run queued
    worker("default", "fleet-1", 1)  # one process serving both aliases: once
    worker("jobs2", "fleet-1", 2)
    worker("jobs2", "only-jobs2", 4)
    for using in ("default", "jobs2"):
        if connections[using].vendor == "postgresql":
            with connections[using].cursor() as cursor:
                cursor.execute(f"ANALYZE {JobRun._meta.db_table}")

    response = admin_client.get("/metrics/")

    assert response.status_code == 200
    got = samples(response.content.decode())
    assert got[("strait_queue_depth", (("queue", "two"),))] == 4
    assert got[("strait_queue_due", (("queue", "two"),))] == 4
    assert got[("strait_queue_lag_seconds", (("queue", "two"),))] >= 120
    assert got[("strait_queue_depth", (("queue", "default"),))] == 1
    assert got[("strait_runs_in_flight", (("job", "far"), ("status", "executing")))] == 1
    assert got[("strait_runs_in_flight", (("job", "near"), ("status", "executing")))] == 1
    assert got[("strait_dead_letters", (("job", "far"),))] == 1
    assert got[("strait_dead_letters", (("job", "near"),))] == 1
    assert got[("strait_workflow_runs_running", (("workflow", "far-flow"),))] == 1
    assert got[("strait_webhook_deliveries", (("status", "pending"),))] == 2
    assert got[("strait_workers_alive", ())] == 2
    assert got[("strait_workers_in_flight", ())] == 7
    total = JobRun.objects.using("default").count() + JobRun.objects.using("jobs2").count()
    assert got[("strait_runs_estimate", ())] == total == 10
    # No label was added: each sample's labels are one alias's.
    labels = {name for _, pairs in got for name, _ in pairs}
    assert "database" not in labels and "alias" not in labels


@pytest.mark.urls(__name__)
def test_metrics_view__on_one_database_reads_it_as_it_always_did(admin_client):
    near = make_job("near")
    make_run(near)
    make_run(near, status="dequeued")
    worker("default", "w-1", 1)
    worker("default", "w-2", 2)

    got = samples(admin_client.get("/metrics/").content.decode())

    assert got[("strait_queue_depth", (("queue", "default"),))] == 1
    assert got[("strait_runs_in_flight", (("job", "near"), ("status", "dequeued")))] == 1
    assert (got[("strait_workers_alive", ())], got[("strait_workers_in_flight", ())]) == (2, 3)
    assert not any(name.startswith("strait_read_replica") for name, _ in got)
