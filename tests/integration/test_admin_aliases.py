"""The admin over two aliases: each list reads one database at a time and says which, a
row's page opens by its id on its own database, and what the admin moves is moved there.

``two_aliases`` puts queue "two" on "jobs2" (ids above 2**48); the other jobs are on
"default". Every check of a move reads both databases: the row moved on its own, and
nothing changed on the other.
"""

from __future__ import annotations

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.urls import reverse

from django_strait.models import Job, JobRun
from tests.integration.factories import make_job, make_run

pytestmark = pytest.mark.django_db(databases=["default", "jobs2"])

RUNS = reverse("admin:django_strait_jobrun_changelist")
DEAD_LETTERS = reverse("admin:django_strait_deadletter_changelist")
JOBS = reverse("admin:django_strait_job_changelist")
OVERVIEW = reverse("admin:django_strait_overview")


def listed(response) -> set[int]:
    assert response.status_code == 200
    return {row.pk for row in response.context["cl"].result_list}


def statuses(using: str) -> dict[int, str]:
    return dict(JobRun.objects.using(using).values_list("pk", "status"))


@pytest.fixture
def runs(two_aliases):
    """A dead letter on each alias, and a queued run on jobs2."""
    here = make_job("near-job", queue="default")
    there = make_job("far-job", queue="two", using="jobs2")
    return {
        "dead_here": make_run(here, status="dead_letter"),
        "dead_there": make_run(there, status="dead_letter"),
        "queued_there": make_run(there),
    }


def test_run_list__reads_the_chosen_database_and_says_which(admin_client, runs):
    first = admin_client.get(RUNS)
    assert listed(first) == {runs["dead_here"].pk}
    assert listed(admin_client.get(RUNS, {"database": "default"})) == {runs["dead_here"].pk}
    second = admin_client.get(RUNS, {"database": "jobs2"})
    assert listed(second) == {runs["dead_there"].pk, runs["queued_there"].pk}
    body = second.content.decode()
    assert "By database" in body and "?database=default" in body
    assert '<td class="field-database_name">jobs2</td>' in body
    assert '<td class="field-database_name">default</td>' in first.content.decode()


def test_run_list__the_filters_of_the_chosen_database_offer_its_jobs(admin_client, runs):
    body = admin_client.get(RUNS, {"database": "jobs2"}).content.decode()
    assert "far-job" in body and "near-job" not in body
    queued = admin_client.get(RUNS, {"database": "jobs2", "status__exact": "queued"})
    assert listed(queued) == {runs["queued_there"].pk}


def test_run_list__a_database_that_is_not_one_is_refused_not_a_500(admin_client, runs):
    response = admin_client.get(RUNS, {"database": "nope"})
    assert response.status_code == 302 and "e=1" in response["Location"]


def test_dead_letter_and_job_lists__read_the_chosen_database(admin_client, runs):
    assert listed(admin_client.get(DEAD_LETTERS)) == {runs["dead_here"].pk}
    there = admin_client.get(DEAD_LETTERS, {"database": "jobs2"})
    assert listed(there) == {runs["dead_there"].pk}
    assert [g.job for g in there.context["strait_groups"]] == ["far-job"]
    jobs = listed(admin_client.get(JOBS, {"database": "jobs2"}))
    assert jobs == {Job.objects.using("jobs2").get(name="far-job").pk}


def test_run_page__opens_a_jobs2_run_by_its_id_with_its_attempts(admin_client, runs):
    run = runs["dead_there"]
    assert run.pk > 2**48
    response = admin_client.get(reverse("admin:django_strait_jobrun_change", args=[run.pk]))
    assert response.status_code == 200
    assert response.context["original"].pk == run.pk
    assert response.context["title"] == f"run {run.pk} of far-job (dead_letter)"
    attempts = response.context["inline_admin_formsets"][0].formset.queryset
    assert [a.run_id for a in attempts] == [run.pk]
    assert "strait-timeline" in response.content.decode() or response.context["strait_timeline"]
    # Its buttons: a dead letter may be replayed and discarded.
    labels = {b["label"] for b in response.context["strait_run_actions"]}
    assert {"Replay", "Discard"} <= labels


def test_replay_action__replays_the_jobs2_dead_letter_there_and_nothing_on_default(
    admin_client, runs
):
    before_default = statuses("default")
    data = {
        "action": "replay_selected",
        ACTION_CHECKBOX_NAME: [runs["dead_there"].pk],
        "index": 0,
    }
    response = admin_client.post(f"{DEAD_LETTERS}?database=jobs2", data)
    assert response.status_code == 302
    replayed = JobRun.objects.using("jobs2").get(pk=runs["dead_there"].pk)
    assert replayed.status == "queued" and replayed.replayed_by == "admin"
    assert statuses("default") == before_default


def test_run_buttons__cancel_and_discard_move_the_jobs2_run_there(admin_client, runs):
    before_default = statuses("default")
    queued = runs["queued_there"]
    move = reverse("admin:django_strait_jobrun_move", args=[queued.pk, "cancel"])
    assert admin_client.post(move).status_code == 302
    assert JobRun.objects.using("jobs2").get(pk=queued.pk).status == "canceled"
    dead = runs["dead_there"]
    move = reverse("admin:django_strait_deadletter_move", args=[dead.pk, "discard"])
    assert admin_client.post(move).status_code == 302
    assert JobRun.objects.using("jobs2").get(pk=dead.pk).status == "discarded"
    assert statuses("default") == before_default


def test_replay_with_payload__replays_the_jobs2_run_there(admin_client, runs):
    dead = runs["dead_there"]
    url = reverse("admin:django_strait_jobrun_replay_payload", args=[dead.pk])
    assert admin_client.get(url).status_code == 200
    assert admin_client.post(url, {"payload": '{"n": 2}'}).status_code == 302
    replayed = JobRun.objects.using("jobs2").get(pk=dead.pk)
    assert (replayed.status, replayed.payload) == ("queued", {"n": 2})
    assert JobRun.objects.using("default").get(pk=runs["dead_here"].pk).status == "dead_letter"


def test_replay_matching__replays_the_chosen_databases_dead_letters_only(admin_client, runs):
    url = reverse("admin:django_strait_deadletter_replay_matching")
    confirm = admin_client.get(url, {"database": "jobs2"})
    assert confirm.context["count"] == 1
    up_to = confirm.context["up_to_id"]
    assert admin_client.post(f"{url}?database=jobs2", {"up_to_id": up_to}).status_code == 302
    assert JobRun.objects.using("jobs2").get(pk=runs["dead_there"].pk).status == "queued"
    assert JobRun.objects.using("default").get(pk=runs["dead_here"].pk).status == "dead_letter"


def test_job_actions__pause_the_jobs2_job_there(admin_client, runs):
    there = Job.objects.using("jobs2").get(name="far-job")
    data = {"action": "pause_selected", ACTION_CHECKBOX_NAME: [there.pk], "index": 0}
    assert admin_client.post(f"{JOBS}?database=jobs2", data).status_code == 302
    assert Job.objects.using("jobs2").get(pk=there.pk).enabled is False
    assert Job.objects.using("default").get(name="near-job").enabled is True
    page = admin_client.get(reverse("admin:django_strait_job_change", args=[there.pk]))
    assert page.status_code == 200 and page.context["original"].name == "far-job"


def test_an_id_of_no_database_is_a_404(admin_client, runs):
    beyond = 5 * 2**48 + 1
    page = admin_client.get(reverse("admin:django_strait_jobrun_change", args=[beyond]))
    assert page.status_code == 302  # the admin's "no such object" redirect, as for any id
    move = reverse("admin:django_strait_jobrun_move", args=[beyond, "cancel"])
    assert admin_client.post(move).status_code == 404


def test_with_one_database__no_database_filter_nor_column(admin_client):
    make_run(make_job(), status="dead_letter")
    body = admin_client.get(RUNS).content.decode()
    assert "By database" not in body and "field-database_name" not in body


def test_overview__counts_every_database_and_shows_each(admin_client, runs):
    make_run(Job.objects.using("default").get(name="near-job"), status="executing")
    response = admin_client.get(OVERVIEW)
    assert response.status_code == 200
    data = response.context["overview"]
    # Dead letters by job, of both databases.
    assert dict(data.dead_letters) == {"near-job": 1, "far-job": 1}
    # Queue "two" lives on jobs2: its queued run is counted there.
    assert {q.queue: q.depth for q in data.queues}["two"] == 1
    rows = {row.alias: row for row in response.context["per_database"]}
    assert set(rows) == {"default", "jobs2"}
    assert (rows["default"].dead_letters, rows["default"].queued, rows["default"].executing) == (
        1,
        0,
        1,
    )
    assert (rows["jobs2"].dead_letters, rows["jobs2"].queued, rows["jobs2"].executing) == (1, 1, 0)
    body = response.content.decode()
    assert 'id="strait-databases"' in body and "?database=jobs2" in body


def test_overview__sums_each_databases_throughput(admin_client, two_aliases):
    from django.utils import timezone

    from django_strait.models import RunRollup

    minute = timezone.now().replace(second=0, microsecond=0)
    near = make_job("near-job", queue="default")
    far = make_job("far-job", queue="two", using="jobs2")
    RunRollup.objects.using("default").create(job=near, minute=minute, status="completed", count=3)
    RunRollup.objects.using("jobs2").create(job=far, minute=minute, status="completed", count=4)
    RunRollup.objects.using("jobs2").create(job=far, minute=minute, status="failed", count=2)
    response = admin_client.get(OVERVIEW)
    data = response.context["overview"]
    assert data.finished_in_window == 9
    assert data.throughput[-1].counts == {"completed": 7, "failed": 2}
    assert [(name, n) for _, name, n in data.busy_jobs] == [("far-job", 6), ("near-job", 3)]
    rows = {row.alias: row.finished_in_window for row in response.context["per_database"]}
    assert rows == {"default": 3, "jobs2": 6}
    # The busiest job's charts: on its own database.
    far_charts = admin_client.get(reverse("admin:django_strait_job_stats", args=[far.pk]))
    assert far_charts.status_code == 200
    assert dict(far_charts.context["summary"])["attempts"] == 6


def test_circuits__listed_and_reset_on_the_control_database(admin_client, two_aliases, settings):
    from django_strait.models import EndpointCircuit, EndpointHealth

    settings.STRAIT = {**settings.STRAIT, "CONTROL_DATABASE": "jobs2"}
    url = "http://127.0.0.1:9/hook"
    circuit = EndpointCircuit.objects.using("jobs2").create(
        endpoint_url=url, state="open", failures=5
    )
    circuits = reverse("admin:django_strait_endpointcircuit_changelist")
    assert listed(admin_client.get(circuits)) == {circuit.pk}
    data = {"action": "reset_circuits", ACTION_CHECKBOX_NAME: [circuit.pk], "index": 0}
    assert admin_client.post(circuits, data).status_code == 302
    assert EndpointCircuit.objects.using("jobs2").get(pk=circuit.pk).state == "closed"
    assert not EndpointCircuit.objects.using("default").exists()
    # The overview reads endpoint health there too, once.
    EndpointHealth.objects.using("jobs2").create(endpoint_url=url, success_rate=0.4)
    overview = admin_client.get(OVERVIEW).context["overview"]
    assert [row.endpoint_url for row in overview.endpoints] == [url]
    assert overview.endpoint_count == 1


def test_deliveries__listed_and_redelivered_on_jobs2(admin_client, runs):
    from django_strait.models import WebhookDelivery

    deliveries = reverse("admin:django_strait_webhookdelivery_changelist")
    there = WebhookDelivery.objects.using("jobs2").create(
        run=runs["dead_there"], url="http://127.0.0.1:9/w", event="run.dead_letter",
        status="failed", attempt=5,
    )  # fmt: skip
    assert listed(admin_client.get(deliveries)) == set()
    assert listed(admin_client.get(deliveries, {"database": "jobs2"})) == {there.pk}
    page = admin_client.get(reverse("admin:django_strait_webhookdelivery_change", args=[there.pk]))
    assert page.status_code == 200 and page.context["original"].pk == there.pk
    run_page = admin_client.get(
        reverse("admin:django_strait_jobrun_change", args=[runs["dead_there"].pk])
    )
    shown = [f.formset.queryset for f in run_page.context["inline_admin_formsets"]]
    assert [d.pk for d in shown[1]] == [there.pk]  # the run's deliveries, read on jobs2
    data = {"action": "redeliver_selected", ACTION_CHECKBOX_NAME: [there.pk], "index": 0}
    assert admin_client.post(f"{deliveries}?database=jobs2", data).status_code == 302
    again = WebhookDelivery.objects.using("jobs2").get(pk=there.pk)
    assert (again.status, again.attempt) == ("pending", 0)


def test_job_page__offers_the_control_databases_projects(admin_client, runs):
    from django_strait.models import Project

    # Budgets are the fleet's: projects live on the control database (here "default").
    Project.objects.using("default").create(name="fleet-project", daily_budget=10)
    Project.objects.using("jobs2").create(name="stray-project", daily_budget=10)
    there = Job.objects.using("jobs2").get(name="far-job")
    page = admin_client.get(reverse("admin:django_strait_job_change", args=[there.pk]))
    choices = [str(p) for p in page.context["adminform"].form.fields["project"].queryset]
    assert choices == ["fleet-project"]


def test_projects__listed_from_the_control_database_with_no_database_filter(
    admin_client, two_aliases
):
    from django_strait.models import Project

    fleet = Project.objects.using("default").create(name="fleet-project", daily_budget=10)
    Project.objects.using("jobs2").create(name="stray-project", daily_budget=10)
    projects = reverse("admin:django_strait_project_changelist")
    page = admin_client.get(projects)
    assert listed(page) == {fleet.pk}
    assert "database" not in [spec.title for spec in page.context["cl"].filter_specs]
    opened = admin_client.get(reverse("admin:django_strait_project_change", args=[fleet.pk]))
    assert opened.status_code == 200 and opened.context["original"].name == "fleet-project"


def test_workflow_runs__listed_opened_and_canceled_on_their_own_database(admin_client, runs):
    from django_strait import define_workflow, trigger_workflow
    from django_strait.models import WorkflowRun

    define_workflow("far-flow", steps=[{"name": "a", "job": "far-job"}])
    wr = trigger_workflow("far-flow", {})
    assert wr._state.db == "jobs2"
    flows = reverse("admin:django_strait_workflowrun_changelist")
    assert listed(admin_client.get(flows)) == set()
    assert listed(admin_client.get(flows, {"database": "jobs2"})) == {wr.pk}
    page = admin_client.get(reverse("admin:django_strait_workflowrun_change", args=[wr.pk]))
    assert page.status_code == 200 and page.context["original"].pk == wr.pk
    assert [row["name"] for row in page.context["strait_steps"]] == ["a"]

    cancel = reverse("admin:django_strait_workflowrun_cancel", args=[wr.pk])
    assert admin_client.post(cancel).status_code == 302

    assert WorkflowRun.objects.using("jobs2").get(pk=wr.pk).status == "canceled"


def test_overview__a_queue_on_two_databases_is_one_row_summed(admin_client, two_aliases):
    # Jobs of one queue may live on two aliases: the overview's queue table is per queue.
    here = make_job("near-shared", queue="shared")
    there = make_job("far-shared", queue="shared", using="jobs2")
    make_run(here)
    make_run(there)
    make_run(there)
    data = admin_client.get(OVERVIEW).context["overview"]
    shared = [q for q in data.queues if q.queue == "shared"]
    assert [(q.depth, q.due) for q in shared] == [(3, 3)]


def health_cell(url: str, using: str) -> str:
    """The job list's health cell text for ``url``, from its health row on ``using``."""
    from django_strait.models import EndpointHealth

    row = EndpointHealth.objects.using(using).get(endpoint_url=url)
    return f"{row.level} ({row.score:.0f})"


@pytest.mark.parametrize("control", ["default", "jobs2"])
def test_job_list__health_and_circuit_of_jobs_off_the_control_database_are_read_there(
    admin_client, two_aliases, settings, control
):
    """Circuits and health live on the control database: a job of the other alias shows
    them too (it showed "-"), and sorting by them does not fail."""
    from django_strait.models import EndpointCircuit, EndpointHealth

    settings.STRAIT = {**settings.STRAIT, "CONTROL_DATABASE": control}
    other = "jobs2" if control == "default" else "default"
    url = "http://127.0.0.1:9/charge"
    job = make_job("http-job", queue="two" if other == "jobs2" else "default", using=other,
                   endpoint_url=url)  # fmt: skip
    make_job("python-job", queue=job.queue, using=other)  # no endpoint: "-"
    EndpointHealth.objects.using(control).create(
        endpoint_url=url, success_rate=0.2, failure_rate=0.7, samples=20
    )
    EndpointCircuit.objects.using(control).create(endpoint_url=url, state="open", failures=5)

    response = admin_client.get(JOBS, {"database": other})

    assert listed(response) == set(Job.objects.using(other).values_list("pk", flat=True))
    body = response.content.decode()
    assert health_cell(url, control) in body
    assert "strait-circuit-open" in body
    assert '<td class="field-health">-</td>' in body  # the Python job's
    for order in ("6", "-7"):
        assert listed(admin_client.get(JOBS, {"database": other, "o": order})) == listed(response)
    # On the control database's own list the columns read as they always did.
    make_job("near-http", queue="default" if control == "default" else "two", using=control,
             endpoint_url=url)  # fmt: skip
    near = admin_client.get(JOBS, {"database": control}).content.decode()
    assert health_cell(url, control) in near and "strait-circuit-open" in near


def test_overview__a_process_serving_two_databases_is_one_worker(admin_client, two_aliases):
    from django.utils import timezone

    from django_strait.models import WorkerProcess

    now = timezone.now()

    def beat(worker_id: str, using: str) -> None:
        WorkerProcess.objects.using(using).create(
            worker_id=worker_id, host="h", pid=1, concurrency=10, started_at=now, last_seen_at=now
        )

    beat("fleet-1", "default")
    beat("fleet-1", "jobs2")  # the same process, registered on each alias it serves
    beat("only-two", "jobs2")
    response = admin_client.get(OVERVIEW)
    data = response.context["overview"]
    assert data.workers_alive == 2
    assert sorted(w.worker_id for w in data.workers) == ["fleet-1", "only-two"]
    rows = {row.alias: row.workers_alive for row in response.context["per_database"]}
    assert rows == {"default": 1, "jobs2": 2}
