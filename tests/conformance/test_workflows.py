"""The workflow part of the record, and the start of a step, alike on every backend."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import transaction
from django.utils import timezone

from django_strait import define_workflow, trigger_workflow
from django_strait.models import JobRun
from django_strait.states import Transition
from django_strait.storage import Claimed, Record, RecordBatch, Storage
from tests.conformance.conftest import in_threads, needs_postgres, start
from tests.integration.factories import DIAMOND
from tests.integration.factories import step_statuses as steps

pytestmark = pytest.mark.django_db(transaction=True)


def finish(storage: Storage, run: Claimed, transition: Transition, worker: str = "w1") -> None:
    now = timezone.now()
    rec = Record(
        run.id, run.attempt, transition, now, now, 1, "succeeded",
        result={"from": run.workflow["step"]}, job_id=run.job_id, step_run_id=run.step_run_id,
    )  # fmt: skip
    done = storage.record(RecordBatch(worker, [rec]))
    assert run.id in done.moved


def test_start__a_step_knows_its_workflow_and_its_parents_results(storage):
    define_workflow("diamond", steps=DIAMOND)
    wr = trigger_workflow("diamond", {"order": 7})
    [a] = start(storage)
    assert a.workflow == {"run_id": wr.pk, "step": "a", "parents": {}}

    finish(storage, a, Transition.COMPLETE)
    b, c = sorted(start(storage), key=lambda r: r.workflow["step"])

    assert b.workflow["parents"] == {"a": {"from": "a"}} and c.payload == {"order": 7}
    assert b.step_run_id == wr.step_runs.get(step__name="b").pk


def test_record__a_completed_step_starts_its_children_in_the_same_transaction(storage):
    define_workflow("diamond", steps=DIAMOND)
    wr = trigger_workflow("diamond", {})
    [a] = start(storage)

    finish(storage, a, Transition.COMPLETE)

    assert steps(wr) == {"a": "completed", "b": "started", "c": "started", "d": "waiting"}
    assert JobRun.objects.filter(status="queued").count() == 2


def test_record__a_failed_step_skips_its_dependents_and_fails_the_workflow(storage):
    define_workflow("diamond", steps=DIAMOND)
    wr = trigger_workflow("diamond", {})
    [a] = start(storage)

    finish(storage, a, Transition.DEAD_LETTER)

    wr.refresh_from_db()
    assert wr.status == "failed"
    assert steps(wr) == {"a": "failed", "b": "skipped", "c": "skipped", "d": "skipped"}


def test_record__plain_runs_leave_workflows_alone(storage):
    define_workflow("diamond", steps=DIAMOND)
    wr = trigger_workflow("diamond", {})
    JobRun.objects.create(job=JobRun.objects.get().job)  # a plain run of the same job
    claimed = start(storage)
    plain = next(r for r in claimed if r.step_run_id is None)
    assert plain.workflow is None
    now = timezone.now()
    storage.record(RecordBatch("w1", [Record(plain.id, 1, Transition.COMPLETE, now, now, 1,
                                             "succeeded", job_id=plain.job_id)]))  # fmt: skip
    assert steps(wr)["b"] == "waiting"


def test_record__two_parents_recorded_at_once_start_the_join_exactly_once(storage):
    needs_postgres("two connections recording at once")
    # b and c of different jobs: their rollup rows differ, so only the workflow's lock
    # can order the two records.
    define_workflow("diamond", steps=[*DIAMOND[:2], {**DIAMOND[2], "job": "test-noop"}, DIAMOND[3]])
    wr = trigger_workflow("diamond", {})
    [a] = start(storage)
    finish(storage, a, Transition.COMPLETE)
    b, c = sorted(start(storage), key=lambda r: r.workflow["step"])

    recorded = threading.Event()

    def record(i: int) -> None:
        if i == 0:  # b's record stays uncommitted while c's is written
            with transaction.atomic():
                finish(storage, b, Transition.COMPLETE)
                recorded.set()
                time.sleep(0.5)
        else:
            recorded.wait(10)
            finish(storage, c, Transition.COMPLETE)

    in_threads(2, record)

    assert steps(wr)["d"] == "started"
    assert JobRun.objects.filter(workflow_step_run__step__name="d").count() == 1
