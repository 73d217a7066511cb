"""Workflows against the real database, with a real in-process worker."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from django_strait import cancel_workflow_run, define_workflow, signals, trigger_workflow
from django_strait.duties.reaper import Reaper
from django_strait.models import Job, JobRun, RunAttempt, Workflow, WorkflowRun, WorkflowStep
from django_strait.transitions import cancel, discard, replay, replay_many
from django_strait.workflows import WorkflowError
from tests.conftest import Reply
from tests.integration.factories import DIAMOND
from tests.integration.factories import step_statuses as steps

pytestmark = pytest.mark.django_db(transaction=True)


def run_of(wr: WorkflowRun, name: str) -> JobRun | None:
    return wr.step_runs.get(step__name=name).run


def make_due() -> None:
    JobRun.objects.filter(status="queued").update(available_at=timezone.now())


def test_define__is_idempotent_and_updates_steps():
    define_workflow("diamond", steps=DIAMOND)
    define_workflow("diamond", steps=[*DIAMOND[:3], {**DIAMOND[3], "max_attempts": 4}])
    assert WorkflowStep.objects.filter(workflow__name="diamond").count() == 4
    assert WorkflowStep.objects.get(name="d").max_attempts == 4
    define_workflow("diamond", steps=DIAMOND[:2])
    assert set(WorkflowStep.objects.values_list("name", flat=True)) == {"a", "b"}


@pytest.mark.parametrize(
    ("bad", "step", "field"),
    [
        ({"name": "x", "job": "no-such-job"}, "x", "job"),
        ({"name": "x", "job": "wf-step", "depends_on": ["nope"]}, "x", "depends_on"),
        ({"name": "x", "job": "wf-step", "retry_backoff": "sideways"}, "x", "retry_backoff"),
        ({"name": "x", "job": "wf-step", "max_attempts": 0}, "x", "max_attempts"),
        ({"name": "x", "job": "wf-step", "retry_initial_delay_secs": -1}, "x",
         "retry_initial_delay_secs"),
        ({"name": "a", "job": "wf-step"}, "a", "name"),
    ],
)  # fmt: skip
def test_define__refuses_a_bad_step_naming_it_and_the_field(bad, step, field):
    with pytest.raises(WorkflowError) as err:
        define_workflow("bad", steps=[DIAMOND[0], bad])
    assert (err.value.step, err.value.field) == (step, field)


def test_define__refuses_a_cycle():
    with pytest.raises(WorkflowError, match="cycle"):
        define_workflow(
            "loop",
            steps=[
                {"name": "a", "job": "wf-step", "depends_on": ["b"]},
                {"name": "b", "job": "wf-step", "depends_on": ["a"]},
            ],
        )


def test_trigger__queues_the_roots_only():
    define_workflow("diamond", steps=DIAMOND)
    wr = trigger_workflow("diamond", {"order": 7})
    assert wr.status == "running"
    assert steps(wr) == {"a": "started", "b": "waiting", "c": "waiting", "d": "waiting"}
    root = run_of(wr, "a")
    assert (root.status, root.payload, root.workflow_step_run_id) == (
        "queued",
        {"order": 7},
        wr.step_runs.get(step__name="a").pk,
    )
    assert run_of(wr, "d") is None
    assert JobRun.objects.count() == 1


def test_trigger__the_same_idempotency_key_returns_the_same_run():
    define_workflow("diamond", steps=DIAMOND)
    first = trigger_workflow("diamond", {}, idempotency_key="order-7")
    again = trigger_workflow("diamond", {}, idempotency_key="order-7")
    assert again.pk == first.pk and again.idempotency_hit and not first.idempotency_hit
    assert WorkflowRun.objects.count() == 1 and JobRun.objects.count() == 1


def test_diamond__children_start_after_their_parents_and_d_sees_b_and_c(burst):
    define_workflow("diamond", steps=DIAMOND)
    seen = []

    def note(sender, **kw):
        seen.append(kw["status"])

    # Only this test's receiver comes and goes: the app's own (the OJS batch
    # callbacks') must stay connected for the tests that run after this one.
    for signal in (signals.workflow_started, signals.workflow_completed):
        signal.connect(note, weak=False)
    try:
        wr = trigger_workflow("diamond", {"order": 7})
        burst()
    finally:
        signals.workflow_started.disconnect(note)
        signals.workflow_completed.disconnect(note)

    wr.refresh_from_db()
    runs = {name: (run_of(wr, name) and run_of(wr, name).status) for name in "abcd"}
    assert wr.status == "completed", f"steps {steps(wr)}, their runs {runs}"
    assert wr.finished_at is not None
    assert set(steps(wr).values()) == {"completed"}
    attempts = {name: RunAttempt.objects.get(run=run_of(wr, name)) for name in "abcd"}
    for child, parents in (("b", "a"), ("c", "a"), ("d", "bc")):
        for parent in parents:
            assert attempts[child].started_at >= attempts[parent].finished_at
    d = run_of(wr, "d").result
    assert d == {
        "step": "d",
        "parents": {"b": {"step": "b", "parents": {"a": {"step": "a", "parents": {}}}},
                    "c": {"step": "c", "parents": {"a": {"step": "a", "parents": {}}}}},
    }  # fmt: skip
    assert seen == ["running", "completed"]


def test_step_retry_override__retries_with_the_steps_delays(burst):
    define_workflow(
        "flaky",
        steps=[
            {"name": "s", "job": "wf-flaky", "max_attempts": 3, "retry_backoff": "linear",
             "retry_initial_delay_secs": 1, "retry_max_delay_secs": 60},
        ],
    )  # fmt: skip
    wr = trigger_workflow("flaky", {})
    run = run_of(wr, "s")
    gaps = []
    for _ in range(3):
        burst()
        run.refresh_from_db()
        last = RunAttempt.objects.filter(run=run).order_by("-number").first()
        if run.status == "queued":
            gaps.append((run.available_at - last.finished_at).total_seconds())
            make_due()
    assert run.status == "dead_letter" and run.attempt == 3  # the job alone says 1 attempt
    assert [round(g) for g in gaps] == [1, 2]  # linear from 1 s, not the job's 30 s
    wr.refresh_from_db()
    assert wr.status == "failed" and wr.error_type == "workflow.step_failed"


def test_failure__fails_the_workflow_and_skips_dependents_that_never_run(burst):
    define_workflow(
        "failing",
        steps=[
            {"name": "a", "job": "wf-fail"},
            {"name": "b", "job": "wf-step", "depends_on": ["a"]},
            {"name": "c", "job": "wf-step", "depends_on": ["b"]},
        ],
    )
    failed = []

    def note(sender, **kw):
        failed.append(kw)

    signals.workflow_failed.connect(note, weak=False)
    try:
        wr = trigger_workflow("failing", {})
        burst()
    finally:
        signals.workflow_failed.disconnect(note)

    wr.refresh_from_db()
    assert wr.status == "failed" and wr.error_type == "workflow.step_failed"
    assert "'a'" in wr.last_error
    assert steps(wr) == {"a": "failed", "b": "skipped", "c": "skipped"}
    assert JobRun.objects.count() == 1
    assert [f["error_type"] for f in failed] == ["workflow.step_failed"]


def test_continue_on_failure__children_run_and_the_workflow_completes(burst):
    define_workflow(
        "lenient",
        steps=[
            {"name": "a", "job": "wf-step"},
            {"name": "notify", "job": "wf-fail", "depends_on": ["a"], "continue_on_failure": True},
            {"name": "after", "job": "wf-step", "depends_on": ["notify"]},
        ],
    )
    wr = trigger_workflow("lenient", {})
    burst()
    wr.refresh_from_db()
    assert steps(wr) == {"a": "completed", "notify": "failed", "after": "completed"}
    assert wr.status == "completed"


def test_replay__of_the_failed_step_resumes_and_completes_the_workflow(burst):
    define_workflow(
        "resumable",
        steps=[
            {"name": "a", "job": "wf-fail-unless"},
            {"name": "b", "job": "wf-step", "depends_on": ["a"]},
        ],
    )
    wr = trigger_workflow("resumable", {})
    burst()
    wr.refresh_from_db()
    assert wr.status == "failed" and steps(wr) == {"a": "failed", "b": "skipped"}

    replay(run_of(wr, "a").pk, payload={"ok": True})
    wr.refresh_from_db()
    assert wr.status == "running" and steps(wr) == {"a": "started", "b": "waiting"}
    assert wr.error_type == "" and wr.finished_at is None

    burst()
    wr.refresh_from_db()
    assert wr.status == "completed" and steps(wr) == {"a": "completed", "b": "completed"}


def test_cancel__cancels_started_and_waiting_steps():
    define_workflow("diamond", steps=DIAMOND)
    wr = trigger_workflow("diamond", {})

    cancel_workflow_run(wr)

    wr.refresh_from_db()
    assert wr.status == "canceled" and wr.finished_at is not None
    assert set(steps(wr).values()) == {"canceled"}
    assert run_of(wr, "a").status == "canceled"


def test_cancel__of_one_steps_run_fails_the_workflow_and_skips_dependents():
    define_workflow("diamond", steps=DIAMOND)
    wr = trigger_workflow("diamond", {})

    cancel(run_of(wr, "a").pk)

    wr.refresh_from_db()
    assert wr.status == "failed"
    assert steps(wr) == {"a": "canceled", "b": "skipped", "c": "skipped", "d": "skipped"}


def test_reaper__fails_a_stalled_workflow_but_not_a_slow_one():
    define_workflow("diamond", steps=DIAMOND)
    stuck = trigger_workflow("diamond", {})
    slow = trigger_workflow("diamond", {})
    # Stuck: a waiting step and nothing started (its root's run was deleted by hand).
    stuck.step_runs.filter(step__name="a").update(status="completed")
    later = timezone.now() + dt.timedelta(hours=2)

    result = Reaper.from_settings().run_once(later)

    assert result.counts["workflows_stalled"] == 1
    stuck.refresh_from_db()
    slow.refresh_from_db()
    assert (stuck.status, stuck.error_type) == ("failed", "workflow.stalled")
    assert slow.status == "running"  # its root is queued: a slow step, not a stall


def test_reaper__a_recent_workflow_is_not_stalled():
    define_workflow("diamond", steps=DIAMOND)
    wr = trigger_workflow("diamond", {})
    wr.step_runs.filter(step__name="a").update(status="completed")

    Reaper.from_settings().run_once(timezone.now() + dt.timedelta(minutes=30))

    wr.refresh_from_db()
    assert wr.status == "running"


def test_http_step__gets_a_workflow_member_with_its_parents_results(burst, http_server):
    http_server.routes["/ship"] = lambda r: Reply(200, b'{"tracking": "XY"}')
    Job.objects.create(name="ship-hook", endpoint_url=http_server.url("/ship"))
    define_workflow(
        "shipping",
        steps=[
            {"name": "charge", "job": "wf-step"},
            {"name": "ship", "job": "ship-hook", "depends_on": ["charge"]},
        ],
    )
    wr = trigger_workflow("shipping", {"order": 7})

    burst()

    [got] = http_server.requests
    assert got.json["payload"] == {"order": 7}
    assert got.json["workflow"] == {
        "run_id": wr.pk,
        "step": "ship",
        "parents": {"charge": {"step": "charge", "parents": {}}},
    }
    wr.refresh_from_db()
    assert wr.status == "completed"
    assert run_of(wr, "ship").result == {"tracking": "XY"}


def test_discard__of_a_queued_step_fails_the_workflow():
    define_workflow("diamond", steps=DIAMOND)
    wr = trigger_workflow("diamond", {})

    discard(run_of(wr, "a").pk, by="test")

    wr.refresh_from_db()
    assert wr.status == "failed"
    assert steps(wr) == {"a": "failed", "b": "skipped", "c": "skipped", "d": "skipped"}


def test_reaper__a_lost_step_is_retried_and_its_workflow_goes_on(burst):
    define_workflow("diamond", steps=DIAMOND)
    wr = trigger_workflow("diamond", {})
    long_ago = timezone.now() - dt.timedelta(hours=1)
    # The root's worker died mid-attempt: executing, heartbeat long silent.
    JobRun.objects.filter(pk=run_of(wr, "a").pk).update(
        status="executing", attempt=1, claimed_by="gone", heartbeat_at=long_ago,
        dequeued_at=long_ago, started_at=long_ago,
    )  # fmt: skip

    Reaper.from_settings().run_once(timezone.now())
    make_due()
    burst()

    wr.refresh_from_db()
    assert wr.status == "completed" and set(steps(wr).values()) == {"completed"}


def test_replay_many__resumes_the_workflow_too(burst):
    define_workflow(
        "resumable",
        steps=[
            {"name": "a", "job": "wf-fail"},
            {"name": "b", "job": "wf-step", "depends_on": ["a"]},
        ],
    )
    wr = trigger_workflow("resumable", {})
    burst()

    assert replay_many([run_of(wr, "a").pk], by="test") == 1

    wr.refresh_from_db()
    assert wr.status == "running" and steps(wr) == {"a": "started", "b": "waiting"}


def test_redefine__a_step_added_later_does_not_hold_up_runs_in_flight(burst):
    define_workflow("growing", steps=DIAMOND[:2])
    wr = trigger_workflow("growing", {})
    define_workflow(
        "growing",
        steps=[DIAMOND[0], {"name": "new", "job": "wf-step"},
               {"name": "b", "job": "wf-step", "depends_on": ["a", "new"]}],
    )  # fmt: skip

    burst()

    wr.refresh_from_db()
    assert wr.status == "completed" and steps(wr) == {"a": "completed", "b": "completed"}


def test_migration__counts_parents_left_for_runs_under_way():
    # 0015 adds parents_left: step runs already waiting must get the count the DAG uses.
    from importlib import import_module

    from django.apps import apps
    from django.db import connection

    from django_strait.models import WorkflowStepRun

    migration = import_module("django_strait.migrations.0015_step_run_parents_left")
    define_workflow("diamond", steps=DIAMOND)
    wr = trigger_workflow("diamond", {})
    a = run_of(wr, "a")
    a.status = "completed"
    a.save()
    WorkflowStepRun.objects.filter(workflow_run=wr, step__name="a").update(status="completed")
    WorkflowStepRun.objects.update(parents_left=0)  # as the column is added

    with connection.schema_editor() as editor:
        migration.count_parents_left(apps, editor)

    left = dict(wr.step_runs.values_list("step__name", "parents_left"))
    assert left == {"a": 0, "b": 0, "c": 0, "d": 2}


@pytest.mark.parametrize("use_tz", [True, False])
def test_members__read_the_definitions_time_as_the_orm_does(settings, use_tz):
    """The claim reads a workflow's updated_at as text; it must equal the ORM's value,
    or every batch would miss the cached definition and read all its steps again."""
    from django.db import connection

    from django_strait.storage import backend
    from django_strait.storage.workflows import Db, Ids
    from django_strait.storage.workflows.sql import as_datetime

    settings.USE_TZ, settings.TIME_ZONE = use_tz, "America/New_York"
    define_workflow("timed", steps=DIAMOND)
    workflow = Workflow.objects.get(name="timed")
    db = Db(connection.alias, backend().workflow_statements)
    (text,) = db.rows(
        "SELECT CAST(updated_at AS TEXT) FROM {workflow} WHERE id {in}", [Ids([workflow.pk])]
    )[0]

    assert as_datetime(text) == workflow.updated_at
