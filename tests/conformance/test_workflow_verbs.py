"""The workflow verbs of the Storage Protocol, alike on every backend: each applies a move,
writes the webhook deliveries it owes, returns what changed, and sends no signal."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import IntegrityError
from django.utils import timezone

from django_strait import define_workflow, signals
from django_strait.models import JobRun, WebhookDelivery, Workflow, WorkflowRun
from django_strait.rules import dag
from django_strait.rules.states import Transition
from django_strait.storage import Storage
from tests.conformance.conftest import start
from tests.conformance.test_workflows import finish
from tests.integration.factories import DIAMOND
from tests.integration.factories import step_statuses as steps

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.needs_database]


@pytest.fixture
def heard():
    """What the workflow signals and ``run_enqueued`` said while the test ran."""
    said: list[tuple[str, dict]] = []

    def hearing(name: str):
        return lambda sender, **kw: said.append((name, kw))

    names = ("workflow_started", "workflow_completed", "workflow_failed", "run_enqueued")
    receivers = {name: hearing(name) for name in names}
    for name, receiver in receivers.items():
        getattr(signals, name).connect(receiver, weak=False)
    yield said
    for name, receiver in receivers.items():
        getattr(signals, name).disconnect(receiver)


def begin(storage: Storage, name: str = "diamond", **hook) -> tuple[WorkflowRun, object]:
    define_workflow(name, steps=DIAMOND, **hook)
    workflow = Workflow.objects.get(name=name)
    return storage.begin_workflow_run(workflow, {"n": 1}, None, now=timezone.now())


def test_begin__starts_the_root_steps_and_says_so_without_a_signal(storage, heard):
    wr, advanced = begin(storage)

    assert steps(wr) == {"a": "started", "b": "waiting", "c": "waiting", "d": "waiting"}
    assert [(c.workflow_run_id, c.status) for c in advanced.changes] == [(wr.pk, "running")]
    assert advanced.started == [wr.step_runs.get(step__name="a").pk]
    assert JobRun.objects.get().payload == {"n": 1}
    assert heard == []


def test_begin__a_used_idempotency_key_raises_and_writes_nothing(storage):
    define_workflow("diamond", steps=DIAMOND)
    workflow = Workflow.objects.get(name="diamond")
    storage.begin_workflow_run(workflow, {}, "k1", now=timezone.now())

    with pytest.raises(IntegrityError):
        storage.begin_workflow_run(workflow, {}, "k1", now=timezone.now())
    assert WorkflowRun.objects.count() == 1 and JobRun.objects.count() == 1


def test_record__returns_the_workflow_changes_and_the_started_steps(storage, heard):
    wr, _ = begin(storage, webhook_url="http://127.0.0.1:9/hook")
    [a] = start(storage)
    heard.clear()

    done = finish(storage, a, Transition.DEAD_LETTER)

    change = done.workflows.changes[0]
    assert (change.workflow_run_id, change.status, change.error_type) == (
        wr.pk, "failed", dag.STEP_FAILED_ERROR,
    )  # fmt: skip
    assert change.error.startswith("step 'a' ended dead_letter")
    assert done.workflows_ended == 1
    assert WebhookDelivery.objects.filter(workflow_run=wr, event="workflow.failed").count() == 1
    assert heard == []  # the record's storage sends nothing; transitions.record does


def test_advance_workflows__moves_on_after_a_run_moved_outside_a_record(storage, heard):
    wr, _ = begin(storage)
    [a] = start(storage)
    with storage.atomic():
        JobRun.objects.filter(pk=a.id).update(status="completed", claimed_by="")
        advanced = storage.advance_workflows([a.id], now=timezone.now())

    assert steps(wr) == {"a": "completed", "b": "started", "c": "started", "d": "waiting"}
    assert len(advanced.started) == 2 and advanced.changes == []
    assert heard == []


def test_advance_workflows__plain_runs_change_nothing(storage):
    begin(storage)
    [a] = start(storage)

    advanced = storage.advance_workflows([a.id + 1000], now=timezone.now())

    assert advanced.changes == [] and advanced.started == []


def test_cancel_workflow_run__cancels_waiting_steps_and_returns_the_live_runs(storage, heard):
    wr, _ = begin(storage)
    [a] = start(storage)

    advanced, live = storage.cancel_workflow_run(wr.pk, now=timezone.now())
    again, none = storage.cancel_workflow_run(wr.pk, now=timezone.now())

    assert live == [a.id]
    assert [(c.workflow_run_id, c.status) for c in advanced.changes] == [(wr.pk, "canceled")]
    assert steps(wr) == {"a": "started", "b": "canceled", "c": "canceled", "d": "canceled"}
    assert (again.changes, none) == ([], [])
    assert heard == []


def test_fail_stalled__fails_only_runs_waiting_with_nothing_started(storage, heard):
    stalled, _ = begin(storage, webhook_url="http://127.0.0.1:9/hook")
    moving, _ = begin(storage, name="other")
    long_ago = timezone.now() - dt.timedelta(hours=2)
    WorkflowRun.objects.update(progressed_at=long_ago)
    # The stalled run's started step went back to waiting (as after a lost row).
    stalled.step_runs.filter(step__name="a").update(status="waiting", run=None)

    advanced = storage.fail_stalled_workflow_runs(now=timezone.now(), stale_after=3600)

    assert [(c.workflow_run_id, c.error_type) for c in advanced.changes] == [
        (stalled.pk, dag.STALLED_ERROR)
    ]
    stalled.refresh_from_db()
    moving.refresh_from_db()
    assert (stalled.status, stalled.last_error) == ("failed", dag.stalled_error(3600))
    assert moving.status == "running"
    assert WebhookDelivery.objects.filter(workflow_run=stalled).count() == 1
    assert heard == []


def test_settle_workflow_runs__counts_parents_anew(storage):
    wr, _ = begin(storage)
    wr.step_runs.filter(step__name="d").update(parents_left=7)

    advanced = storage.settle_workflow_runs([wr.pk], now=timezone.now())

    assert advanced.changes == []
    assert wr.step_runs.get(step__name="d").parents_left == 2
