"""Over several aliases, a workflow lives with its steps' jobs, and runs there.

Its runs move in the transactions that record its steps' runs, so the
workflow, its runs and its steps' jobs share one database: the one its steps'
jobs live on (their queues'). Steps whose jobs live on two databases are refused.
"""

from __future__ import annotations

import dataclasses

import pytest

from django_strait import cancel_workflow_run, database, define_workflow, trigger_workflow
from django_strait.management.commands.run_strait_worker import build_config
from django_strait.models import JobRun, Workflow, WorkflowRun
from django_strait.worker.engine import Worker
from django_strait.workflows import WorkflowError
from tests.integration.factories import make_job

pytestmark = pytest.mark.django_db(databases=["default", "jobs2"], transaction=True)

TWO_STEPS = [
    {"name": "a", "job": "two-step"},
    {"name": "b", "job": "two-step", "depends_on": ["a"]},
]


def drain(using: str) -> None:
    """Run what is due on ``using`` with an in-process worker of that alias."""
    config = build_config({"burst": True, "worker_id": f"test-{using}"})
    Worker(dataclasses.replace(config, using=using, listen_alias=None)).run()


def test_a_workflow_of_jobs_on_jobs2_lives_and_runs_on_jobs2(two_aliases):
    make_job("two-step", queue="two", using="jobs2")

    workflow = define_workflow("on-two", steps=TWO_STEPS)
    wr = trigger_workflow("on-two", {"n": 1})

    assert workflow._state.db == "jobs2"
    assert not Workflow.objects.using("default").filter(name="on-two").exists()
    assert wr._state.db == "jobs2" and database.alias_for_id(wr.pk) == "jobs2"
    drain("jobs2")
    wr.refresh_from_db(using="jobs2")
    assert wr.status == "completed"
    runs = JobRun.objects.using("jobs2").filter(job__name="two-step")
    assert sorted(runs.values_list("status", flat=True)) == ["completed", "completed"]
    assert not JobRun.objects.using("default").exists()
    assert not WorkflowRun.objects.using("default").exists()


def test_steps_whose_jobs_live_on_two_databases_are_refused_naming_the_step(two_aliases):
    make_job("one-step", queue="default")
    make_job("two-step", queue="two", using="jobs2")
    mixed = [{"name": "a", "job": "one-step"}, {"name": "b", "job": "two-step"}]

    with pytest.raises(WorkflowError) as refused:
        define_workflow("mixed", steps=mixed)

    assert (refused.value.step, refused.value.field) == ("b", "job")
    assert "'jobs2'" in refused.value.message and "jobs of one database" in refused.value.message
    assert not Workflow.objects.using("default").exists()
    assert not Workflow.objects.using("jobs2").exists()


def test_a_workflow_whose_jobs_moved_database_is_refused_rather_than_duplicated(two_aliases):
    make_job("one-step", queue="default")
    make_job("two-step", queue="two", using="jobs2")
    define_workflow("moving", steps=[{"name": "a", "job": "one-step"}])

    with pytest.raises(WorkflowError) as refused:
        define_workflow("moving", steps=[{"name": "a", "job": "two-step"}])

    assert refused.value.field == "name" and "lives on database 'default'" in str(refused.value)
    assert not Workflow.objects.using("jobs2").exists()


def test_a_workflow_run_on_jobs2_is_canceled_by_its_id(two_aliases):
    make_job("two-step", queue="two", using="jobs2")
    define_workflow("on-two", steps=TWO_STEPS)
    wr = trigger_workflow("on-two", {})

    canceled = cancel_workflow_run(wr.pk)

    assert canceled._state.db == "jobs2" and canceled.status == "canceled"
    root = JobRun.objects.using("jobs2").get(job__name="two-step")
    assert root.status == "canceled"
