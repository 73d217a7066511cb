"""Over several aliases, django.tasks results, ``strait_replay`` and the testing helpers
find a run on its own alias ("default" and "jobs2", the ``two_aliases`` fixture)."""

from __future__ import annotations

from io import StringIO

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from django_strait import trigger
from django_strait.models import JobRun
from django_strait.services import registry
from django_strait.testing import drain, immediate
from tests.integration.factories import make_job, make_run

pytestmark = pytest.mark.django_db(databases=["default", "jobs2"], transaction=True)


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
