"""The admin of workflows: definitions, workflow runs with their DAG, cancel and replay."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_strait import define_workflow, trigger_workflow
from django_strait.models import JobRun, WorkflowRun

pytestmark = pytest.mark.django_db

DIAMOND = [
    {"name": "a", "job": "wf-step"},
    {"name": "b", "job": "wf-step", "depends_on": ["a"]},
    {"name": "c", "job": "wf-step", "depends_on": ["a"]},
    {"name": "d", "job": "wf-step", "depends_on": ["b", "c"]},
]
RUNS = reverse("admin:django_strait_workflowrun_changelist")
WORKFLOWS = reverse("admin:django_strait_workflow_changelist")


def page(wr: WorkflowRun) -> str:
    return reverse("admin:django_strait_workflowrun_change", args=[wr.pk])


def button(wr: WorkflowRun, name: str) -> str:
    return reverse(f"admin:django_strait_workflowrun_{name}", args=[wr.pk])


def staff_with(*codenames: str) -> User:
    user = User.objects.create_user("staff", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return user


@pytest.fixture
def diamond():
    return define_workflow("diamond", steps=DIAMOND)


def wide(width: int) -> WorkflowRun:
    name = f"wide-{width}"
    steps = [{"name": "root", "job": "wf-step"}]
    steps += [{"name": f"s{i}", "job": "wf-step", "depends_on": ["root"]} for i in range(width)]
    steps.append({"name": "join", "job": "wf-step", "depends_on": [f"s{i}" for i in range(width)]})
    define_workflow(name, steps=steps)
    return trigger_workflow(name)


# Workflows


def test_workflow_list__shows_each_workflow_with_its_step_count(admin_client, diamond):
    response = admin_client.get(WORKFLOWS)
    assert response.status_code == 200
    assert response.context["cl"].result_list[0].step_count == 4


def test_workflow_page__lists_its_steps_read_only(admin_client, diamond):
    response = admin_client.get(reverse("admin:django_strait_workflow_change", args=[diamond.pk]))
    assert response.status_code == 200
    text = response.content.decode()
    assert "wf-step" in text and "<p>b, c</p>" in text
    assert 'name="_save"' not in text


# Workflow runs


def test_run_list__shows_status_badges_and_filters_by_status(admin_client, diamond):
    running = trigger_workflow("diamond")
    canceled = trigger_workflow("diamond")
    admin_client.post(button(canceled, "cancel"))
    response = admin_client.get(RUNS, {"status__exact": "canceled"})
    assert [wr.pk for wr in response.context["cl"].result_list] == [canceled.pk]
    text = admin_client.get(RUNS).content.decode()
    assert f">{running.pk}<" in text and ">running</span>" in text


def test_run_page__draws_the_dag_with_links_to_started_steps(admin_client, diamond):
    wr = trigger_workflow("diamond")
    root = wr.step_runs.get(step__name="a").run
    response = admin_client.get(page(wr))
    assert response.status_code == 200
    svg = str(response.context["strait_dag"])
    assert svg.count('class="strait-step"') == 4
    assert svg.count("<line") == 4
    assert reverse("admin:django_strait_jobrun_change", args=[root.pk]) in svg
    assert svg.count("<a href=") == 1  # only the started root has a run
    assert [b["label"] for b in response.context["strait_workflow_actions"]] == ["Cancel"]


def test_run_page__queries_do_not_grow_with_steps(admin_client):
    small, large = wide(3), wide(60)
    admin_client.get(page(small))  # the session, the content types: cached after this
    counts = []
    for wr in (small, large):
        with CaptureQueriesContext(connection) as queries:
            assert admin_client.get(page(wr)).status_code == 200
        counts.append(len(queries))
    assert counts[0] == counts[1]


def test_run_page__unknown_or_odd_ids_are_not_a_5xx(admin_client):
    for object_id in ("999999", "9" * 40, "abc"):
        url = reverse("admin:django_strait_workflowrun_change", args=[object_id])
        assert admin_client.get(url).status_code in (200, 302, 404)


def test_cancel__cancels_the_workflow_run_and_its_steps(admin_client, diamond):
    wr = trigger_workflow("diamond")
    response = admin_client.post(button(wr, "cancel"))
    assert response.status_code == 302
    wr.refresh_from_db()
    assert wr.status == "canceled"
    assert JobRun.objects.get().status == "canceled"
    assert set(wr.step_runs.values_list("status", flat=True)) == {"canceled"}


def test_cancel_action__cancels_the_selected_runs(admin_client, diamond):
    runs = [trigger_workflow("diamond") for _ in range(2)]
    data = {"action": "cancel_selected", "_selected_action": [r.pk for r in runs], "index": 0}
    admin_client.post(RUNS, data)
    assert set(WorkflowRun.objects.values_list("status", flat=True)) == {"canceled"}


def test_cancel__is_post_only(admin_client, diamond):
    wr = trigger_workflow("diamond")
    assert admin_client.get(button(wr, "cancel")).status_code == 405


def test_without_permission__viewing_is_403_and_acting_is_403(client, diamond):
    wr = trigger_workflow("diamond")
    client.force_login(staff_with())
    assert client.get(page(wr)).status_code == 403
    client.force_login(_viewer())
    assert client.get(page(wr)).status_code == 200
    assert client.post(button(wr, "cancel")).status_code == 403
    assert client.post(button(wr, "replay_failed")).status_code == 403
    wr.refresh_from_db()
    assert wr.status == "running"


def _viewer() -> User:
    user = User.objects.create_user("viewer", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename="view_workflowrun"))
    return user


def test_job_run_page__says_which_workflow_step_it_runs(admin_client, diamond):
    wr = trigger_workflow("diamond")
    root = wr.step_runs.get(step__name="a").run
    text = admin_client.get(reverse("admin:django_strait_jobrun_change", args=[root.pk]))
    assert f'step a of <a href="{page(wr)}">workflow run {wr.pk}</a>' in text.content.decode()


@pytest.mark.django_db(transaction=True)
def test_replay_failed__resumes_the_workflow(admin_client, burst):
    define_workflow(
        "fails",
        steps=[
            {"name": "a", "job": "wf-fail-unless"},
            {"name": "b", "job": "wf-step", "depends_on": ["a"]},
        ],
    )
    wr = trigger_workflow("fails", {})
    burst()
    wr.refresh_from_db()
    assert wr.status == "failed"
    labels = [b["label"] for b in admin_client.get(page(wr)).context["strait_workflow_actions"]]
    assert labels == ["Cancel", "Replay failed step"]

    assert admin_client.post(button(wr, "replay_failed")).status_code == 302
    wr.refresh_from_db()
    assert wr.status == "running"
    assert dict(wr.step_runs.values_list("step__name", "status")) == {
        "a": "started", "b": "waiting",
    }  # fmt: skip


def test_workflow_run_page__is_titled_with_the_workflows_name_not_its_id(admin_client, diamond):
    wr = trigger_workflow("diamond")
    html = admin_client.get(page(wr)).content.decode()
    title = f"workflow run {wr.pk} of diamond (running)"
    assert f"<h2>{title}</h2>" in html or f"<h1>{title}</h1>" in html, html[:3000]
    assert str(wr) == title
