"""The workflow part of the record, and the start of a step, alike on every backend."""

from __future__ import annotations

import random
import threading
import time

import pytest
from django.db import transaction
from django.utils import timezone

from django_strait import define_workflow, trigger_workflow
from django_strait.models import JobRun
from django_strait.rules import dag
from django_strait.rules.states import Transition
from django_strait.storage import Claimed, Record, RecordBatch, Recorded, Storage
from tests.conformance.conftest import in_threads, needs_postgres, start
from tests.integration.factories import DIAMOND
from tests.integration.factories import step_statuses as steps
from tests.integration.factories import step_statuses as steps_of

# Tables read and written through the models: a backend that keeps runs elsewhere skips them.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.needs_database]


def finish(storage: Storage, run: Claimed, transition: Transition, worker: str = "w1") -> Recorded:
    return finish_many(storage, [(run, transition)], worker)


def finish_many(
    storage: Storage,
    ended: list[tuple[Claimed, Transition]],
    worker: str = "w1",
    *,
    known: bool = True,
) -> Recorded:
    """Record the attempts of ``ended`` in one batch, as a worker's record does (with the steps'
    workflow run and step as their start loaded them; ``known=False``: without, as a record
    written again by other means)."""
    now = timezone.now()
    records = [
        Record(
            run.id,
            run.attempt,
            transition,
            now,
            now,
            1,
            "succeeded",
            available_at=now if transition == Transition.RETRY else None,
            result={"from": run.workflow["step"]},
            job_id=run.job_id,
            step_run_id=run.step_run_id,
            step=run.step if known else None,
        )  # fmt: skip
        for run, transition in ended
    ]
    done = storage.record(RecordBatch(worker, records))
    assert {run.id for run, _ in ended} <= set(done.moved)
    return done


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


def test_record__counts_the_workflow_runs_its_steps_ended(storage):
    """What wakes the worker's webhook deliverer: only a batch that ended a workflow run."""
    define_workflow("diamond", steps=DIAMOND)
    trigger_workflow("diamond", {})
    trigger_workflow("diamond", {})
    first, second = start(storage)

    assert finish(storage, first, Transition.COMPLETE).workflows_ended == 0
    assert finish(storage, second, Transition.DEAD_LETTER).workflows_ended == 1  # failed
    middle = start(storage)
    assert finish_many(storage, [(r, Transition.COMPLETE) for r in middle]).workflows_ended == 0
    [last] = start(storage)
    assert finish(storage, last, Transition.COMPLETE).workflows_ended == 1  # completed


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


def random_dag(rng: random.Random, size: int) -> list[dict]:
    """Steps s0..s{size-1}, each depending on a few earlier ones; some continue on failure."""
    steps = []
    for i in range(size):
        parents = rng.sample([f"s{j}" for j in range(i)], k=min(i, rng.randint(0, 3)))
        lenient = rng.random() < 0.3
        steps.append({"name": f"s{i}", "job": "wf-step", "depends_on": parents,
                      "continue_on_failure": lenient})  # fmt: skip
    return steps


def expected(steps: list[dict], wr) -> tuple[dict[str, str], str]:
    """What dag.settle says the step runs should be, from their runs' statuses (the oracle)."""
    parents = {s["name"]: s["depends_on"] for s in steps}
    lenient = {s["name"] for s in steps if s["continue_on_failure"]}
    synced = {}
    for sr in wr.step_runs.select_related("step", "run"):
        run = sr.run
        synced[sr.step.name] = sr.status if run is None else dag.step_status(run.status)
    new, status = dag.settle(parents, synced, lenient)
    return new, status


@pytest.mark.parametrize("seed", range(12))
def test_record__any_dag_any_batching_moves_as_the_dag_says(storage, seed):
    # The record takes a short way for steps that end well (counting parents off) and
    # reads the whole run otherwise; after every batch both must agree with
    # dag.settle, and every waiting step's parents_left with its parents' statuses.
    rng = random.Random(seed)
    steps = random_dag(rng, rng.randint(2, 9))
    define_workflow(f"random-{seed}", steps=steps)
    wr = trigger_workflow(f"random-{seed}", {})
    lenient = {s["name"] for s in steps if s["continue_on_failure"]}
    parents = {s["name"]: s["depends_on"] for s in steps}
    for _ in range(30):
        due = start(storage)
        if not due:
            break
        rng.shuffle(due)
        while due:
            k = rng.randint(1, len(due))
            batch, due = due[:k], due[k:]
            # Mostly success; a lenient step fails now and then (the short way), a
            # strict one rarely (the long way: the workflow fails); some retry first.
            # Half the batches come as a worker records them (steps known from their
            # start), half as other paths do (steps read again).
            odds = {run.id: 0.4 if run.workflow["step"] in lenient else 0.05 for run in batch}
            finish_many(
                storage,
                [(run, Transition.RETRY if rng.random() < 0.1 else
                       Transition.DEAD_LETTER if rng.random() < odds[run.id] else Transition.COMPLETE)
                 for run in batch],
                known=rng.random() < 0.5,
            )  # fmt: skip
            want, want_status = expected(steps, wr)
            wr.refresh_from_db()
            assert steps_of(wr) == want
            assert wr.status == want_status
            done = {
                n for n, s in want.items() if s == "completed" or (s == "failed" and n in lenient)
            }
            for name, left in wr.step_runs.filter(status="waiting").values_list(
                "step__name", "parents_left"
            ):
                assert left == sum(1 for p in parents[name] if p not in done), name
    wr.refresh_from_db()
    assert wr.status in ("completed", "failed")
    assert not JobRun.objects.filter(status__in=["queued", "executing"]).exists()


def test_redefine__a_dependency_added_while_a_run_is_under_way_holds_its_step_back(storage):
    define_workflow("grow", steps=[{"name": "a", "job": "wf-step"}, {"name": "b", "job": "wf-step"},
                                   {"name": "c", "job": "wf-step", "depends_on": ["a"]}])  # fmt: skip
    wr = trigger_workflow("grow", {})
    a, b = sorted(start(storage), key=lambda r: r.workflow["step"])
    define_workflow("grow", steps=[{"name": "a", "job": "wf-step"}, {"name": "b", "job": "wf-step"},
                                   {"name": "c", "job": "wf-step", "depends_on": ["a", "b"]}])  # fmt: skip

    finish(storage, a, Transition.COMPLETE)
    assert steps(wr)["c"] == "waiting"
    finish(storage, b, Transition.COMPLETE)
    assert steps(wr)["c"] == "started"


def test_redefine__a_dependency_removed_starts_a_waiting_step_at_once(storage):
    define_workflow("shrink", steps=[{"name": "a", "job": "wf-step"}, {"name": "b", "job": "wf-step"},
                                     {"name": "c", "job": "wf-step", "depends_on": ["a", "b"]}])  # fmt: skip
    wr = trigger_workflow("shrink", {})
    a, _ = sorted(start(storage), key=lambda r: r.workflow["step"])
    finish(storage, a, Transition.COMPLETE)
    assert steps(wr)["c"] == "waiting"

    define_workflow("shrink", steps=[{"name": "a", "job": "wf-step"}, {"name": "b", "job": "wf-step"},
                                     {"name": "c", "job": "wf-step", "depends_on": ["a"]}])  # fmt: skip

    assert steps(wr)["c"] == "started"
    assert [r.workflow["step"] for r in start(storage)] == ["c"]
