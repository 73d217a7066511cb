"""The admin's protection pages: endpoint health, circuits with health, jobs with both, budgets."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import Permission, User
from django.contrib.messages import get_messages
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from django_strait.admin import charts
from django_strait.admin.endpoints import read_sparklines
from django_strait.models import (
    BudgetLedger,
    EndpointCircuit,
    EndpointHealth,
    HealthSample,
    Job,
    JobRun,
    Project,
)
from django_strait.rules.resilience.budgets import BUDGET_ERROR, today
from tests.integration.factories import make_job, make_run
from tests.integration.test_admin import job_form

pytestmark = pytest.mark.django_db

HEALTH = reverse("admin:django_strait_endpointhealth_changelist")
CIRCUITS = reverse("admin:django_strait_endpointcircuit_changelist")
JOBS = reverse("admin:django_strait_job_changelist")
PROJECTS = reverse("admin:django_strait_project_changelist")
OVERVIEW = reverse("admin:django_strait_overview")

#: EWMA columns that give each level (score 100, 55 and 0).
LEVELS = {
    "healthy": {},
    "degraded": {"success_rate": 0.4, "failure_rate": 0.5},
    "unhealthy": {"success_rate": 0.0, "failure_rate": 1.0, "latency_p95_ms": 30_000.0},
}


def endpoint(url: str, level: str = "healthy", **fields) -> EndpointHealth:
    row = EndpointHealth.objects.create(endpoint_url=url, **{**LEVELS[level], **fields})
    row.refresh_from_db()
    assert row.level == level
    return row


def circuit(url: str, state: str = "open", failures: int = 5) -> EndpointCircuit:
    now = timezone.now()
    return EndpointCircuit.objects.create(
        endpoint_url=url, state=state, failures=failures, opened_at=now, last_failure_at=now
    )


def history(url: str, scores: list[float], *, ending_minutes_ago: int = 0) -> None:
    """One sample a minute, the last one ``ending_minutes_ago`` minutes ago."""
    last = timezone.now().replace(second=0, microsecond=0)
    last -= dt.timedelta(minutes=ending_minutes_ago)
    HealthSample.objects.bulk_create(
        HealthSample(endpoint_url=url, at=last - dt.timedelta(minutes=i), score=score)
        for i, score in enumerate(reversed(scores))
    )


def staff(username: str, *codenames: str) -> User:
    user = User.objects.create_user(username, is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return user


def query_count(client, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured)


def reset_action(client, url: str, pks: list[int]):
    data = {"action": "reset_circuits", ACTION_CHECKBOX_NAME: pks, "index": 0}
    return client.post(url, data)


def polyline_points(svg: str) -> list[tuple[float, float]]:
    [points] = re.findall(r'<polyline points="([^"]*)"', svg)
    return [tuple(float(n) for n in p.split(",")) for p in points.split()]


# Endpoint health


def test_health_list__shows_each_endpoint_worst_first_with_its_circuit_and_history(admin_client):
    endpoint("http://127.0.0.1:9/ok")
    endpoint("http://127.0.0.1:9/slow", "degraded", latency_p95_ms=1500.0, samples=40)
    endpoint("http://127.0.0.1:9/down", "unhealthy", samples=12)
    circuit("http://127.0.0.1:9/down", "open")
    history("http://127.0.0.1:9/down", [90, 60, 30, 0])

    response = admin_client.get(HEALTH)

    assert response.status_code == 200
    rows = response.context["cl"].result_list
    assert [r.endpoint_url.rsplit("/", 1)[1] for r in rows] == ["down", "slow", "ok"]
    assert [r.strait_circuit_state for r in rows] == ["open", None, None]
    assert [len(r.strait_history) for r in rows] == [4, 0, 0]
    body = response.content.decode()
    assert body.count('class="strait-sparkline"') == 3
    assert body.count("no samples yet") == 2
    for level in ("healthy", "degraded", "unhealthy"):
        assert f'class="strait-level strait-level-{level}"' in body
    # The degraded row: 100 x (0.5 x 40 % + 0.3 x 50 % + 0.2 x (1 - 1.5 s / 30 s)) = 54
    # (the score links to the endpoint's charts; the failure rate is on the row's page).
    assert ">54</a>" in body and ">40.0%<" in body and ">1500<" in body
    circuits_link = f"{CIRCUITS}?endpoint_url__exact=http%3A%2F%2F127.0.0.1%3A9%2Fdown"
    assert f'href="{circuits_link}"' in body
    assert admin_client.get(circuits_link).context["cl"].result_count == 1


def test_health_list__sparkline_goes_from_the_oldest_to_the_newest_score(admin_client):
    endpoint("http://127.0.0.1:9/a", "unhealthy")
    history("http://127.0.0.1:9/a", [100, 50, 0])
    body = admin_client.get(HEALTH).content.decode()
    points = polyline_points(body)
    # 72 x 24 pixels: 100 is drawn at the top (y 1), 0 at the bottom (y 23).
    assert points == [(0.0, 1.0), (36.0, 12.0), (72.0, 23.0)]
    assert "score over the last 3 minute(s): 0 to 100, now 0" in body


def test_health_sparklines__read_only_the_last_hour_of_the_asked_endpoints():
    history("http://127.0.0.1:9/a", [10, 20], ending_minutes_ago=0)
    history("http://127.0.0.1:9/a", [99], ending_minutes_ago=61)
    history("http://127.0.0.1:9/b", [30])
    with CaptureQueriesContext(connection) as captured:
        found = read_sparklines(["http://127.0.0.1:9/a"], timezone.now())
    assert found == {"http://127.0.0.1:9/a": [10.0, 20.0]}
    assert len(captured) == 1


def test_health_list__queries_do_not_grow_with_20_endpoints(admin_client):
    def add(i: int) -> None:
        url = f"http://127.0.0.1:9/e{i}"
        endpoint(url, ("healthy", "degraded", "unhealthy")[i % 3])
        circuit(url, ("open", "closed", "half_open")[i % 3])
        history(url, [50.0 + i] * 30)

    add(0)
    one = query_count(admin_client, HEALTH)
    for i in range(1, 20):
        add(i)
    assert query_count(admin_client, HEALTH) == one
    body = admin_client.get(HEALTH).content.decode()
    assert body.count("<polyline") == 20


def test_health_list__filters_by_level(admin_client):
    endpoint("http://127.0.0.1:9/ok")
    down = endpoint("http://127.0.0.1:9/down", "unhealthy")
    response = admin_client.get(HEALTH, {"level": "unhealthy"})
    assert [r.pk for r in response.context["cl"].result_list] == [down.pk]


def test_health_admin__is_read_only(admin_client):
    row = endpoint("http://127.0.0.1:9/a")
    assert admin_client.get(reverse("admin:django_strait_endpointhealth_add")).status_code == 403
    change = reverse("admin:django_strait_endpointhealth_change", args=[row.pk])
    page = admin_client.get(change)
    assert page.status_code == 200 and 'name="_save"' not in page.content.decode()
    admin_client.post(change, {"endpoint_url": "http://127.0.0.1:9/b", "success_rate": "0"})
    assert EndpointHealth.objects.get().endpoint_url == "http://127.0.0.1:9/a"


@pytest.mark.parametrize(
    ("page", "model", "make"),
    [
        (HEALTH, EndpointHealth, lambda: endpoint("http://127.0.0.1:9/a", "unhealthy")),
        (CIRCUITS, EndpointCircuit, lambda: circuit("http://127.0.0.1:9/a")),
    ],
)
def test_health_and_circuits__offer_no_delete_and_a_forged_one_changes_nothing(
    admin_client, page, model, make
):
    """Their rows change through storage's verbs (the reset actions), never a generic delete."""
    row = make()
    assert "delete_selected" not in admin_client.get(page).content.decode()
    name = model._meta.model_name
    delete = reverse(f"admin:django_strait_{name}_delete", args=[row.pk])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    admin_client.post(
        page, {"action": "delete_selected", ACTION_CHECKBOX_NAME: [row.pk], "post": "yes"}
    )
    assert model.objects.filter(pk=row.pk).exists()


def test_health_reset_action__closes_the_circuits_of_the_selected_endpoints(admin_client):
    down = endpoint("http://127.0.0.1:9/down", "unhealthy")
    other = endpoint("http://127.0.0.1:9/other", "unhealthy")
    circuit(down.endpoint_url, "open")
    circuit(other.endpoint_url, "open")
    response = reset_action(admin_client, HEALTH, [down.pk])
    assert response.status_code == 302
    states = dict(EndpointCircuit.objects.values_list("endpoint_url", "state"))
    assert states == {down.endpoint_url: "closed", other.endpoint_url: "open"}
    assert EndpointCircuit.objects.get(endpoint_url=down.endpoint_url).failures == 0
    said = [str(m) for m in get_messages(response.wsgi_request)]
    assert said[0] == "Reset 1 circuit(s)."
    assert said[1].startswith(f"Still unhealthy: {down.endpoint_url} (")  # health still holds


@pytest.mark.parametrize(
    ("page", "model", "view"),
    [
        (HEALTH, EndpointHealth, "view_endpointhealth"),
        (CIRCUITS, EndpointCircuit, "view_endpointcircuit"),
    ],
)
def test_reset__viewer_without_the_permission_sees_no_action_and_a_forged_post_is_403(
    client, page, model, view
):
    url = "http://127.0.0.1:9/down"
    endpoint(url, "unhealthy")
    circuit(url, "open")
    row = model.objects.get(endpoint_url=url)
    client.force_login(staff("viewer", view))
    listing = client.get(page)
    assert listing.status_code == 200
    assert "reset_circuits" not in listing.content.decode()
    assert reset_action(client, page, [row.pk]).status_code == 403
    assert EndpointCircuit.objects.get().state == "open"

    client.force_login(staff("resetter", view, "reset_endpointcircuit"))
    assert "reset_circuits" in client.get(page).content.decode()
    assert reset_action(client, page, [row.pk]).status_code == 302
    assert EndpointCircuit.objects.get().state == "closed"


def test_health_page__needs_the_view_permission(client):
    client.force_login(staff("nobody"))
    assert client.get(HEALTH).status_code == 403


# Circuits with their endpoint's health


def test_circuit_list__shows_the_health_score_and_level_of_each_endpoint(admin_client):
    circuit("http://127.0.0.1:9/down", "open")
    circuit("http://127.0.0.1:9/new", "closed", failures=1)
    endpoint("http://127.0.0.1:9/down", "unhealthy")
    response = admin_client.get(CIRCUITS)
    rows = {r.endpoint_url: r for r in response.context["cl"].result_list}
    assert rows["http://127.0.0.1:9/down"].strait_health_level == "unhealthy"
    assert rows["http://127.0.0.1:9/down"].strait_health_score == pytest.approx(0.0)
    assert rows["http://127.0.0.1:9/new"].strait_health_level is None
    assert 'class="strait-level strait-level-unhealthy"' in response.content.decode()


def test_circuit_list__queries_do_not_grow_with_20_circuits(admin_client):
    def add(i: int) -> None:
        circuit(f"http://127.0.0.1:9/c{i}")
        endpoint(f"http://127.0.0.1:9/c{i}", "degraded")

    add(0)
    one = query_count(admin_client, CIRCUITS)
    for i in range(1, 20):
        add(i)
    assert query_count(admin_client, CIRCUITS) == one


# Jobs with their endpoint's health and circuit; the Budget fieldset


def test_job_list__shows_health_level_and_circuit_state_of_each_job_endpoint(admin_client):
    make_job("hook-degraded", endpoint_url="http://127.0.0.1:9/slow")
    make_job("hook-open", endpoint_url="http://127.0.0.1:9/down")
    make_job("handler-job")
    endpoint("http://127.0.0.1:9/slow", "degraded")
    endpoint("http://127.0.0.1:9/down", "unhealthy")
    circuit("http://127.0.0.1:9/down", "open")

    response = admin_client.get(JOBS)

    rows = {j.name: j for j in response.context["cl"].result_list}
    assert rows["hook-degraded"].strait_health_level == "degraded"
    assert rows["hook-degraded"].strait_circuit_state is None
    assert rows["hook-open"].strait_health_level == "unhealthy"
    assert rows["hook-open"].strait_circuit_state == "open"
    assert rows["handler-job"].strait_health_level is None
    body = response.content.decode()
    assert "degraded (55)" in body and "unhealthy (0)" in body
    assert 'class="strait-circuit strait-circuit-open"' in body


def test_job_list__queries_do_not_grow_with_20_http_jobs(admin_client):
    def add(i: int) -> None:
        url = f"http://127.0.0.1:9/j{i}"
        make_job(f"hook-{i}", endpoint_url=url)
        endpoint(url, "degraded")
        circuit(url, "half_open")

    add(0)
    one = query_count(admin_client, JOBS)
    for i in range(1, 20):
        add(i)
    assert query_count(admin_client, JOBS) == one


def test_job_form__budget_fieldset_sets_project_and_estimated_cost(admin_client):
    project = Project.objects.create(name="crm", daily_budget=Decimal(10))
    add = reverse("admin:django_strait_job_add")
    page = admin_client.get(add)
    fieldsets = [(name, opts["fields"]) for name, opts in page.context["adminform"].fieldsets]
    assert ("Budget (a project's daily budget; empty = none)", ("project", "estimated_cost")) in (
        fieldsets
    )
    response = admin_client.post(add, job_form(project=project.pk, estimated_cost="0.25"))
    assert response.status_code == 302
    job = Job.objects.get(name="sync-crm")
    assert (job.project, job.estimated_cost) == (project, Decimal("0.25"))


def test_job_form__a_project_without_a_cost_shows_on_the_form(admin_client):
    project = Project.objects.create(name="crm", daily_budget=Decimal(10))
    data = job_form(project=project.pk, estimated_cost="")
    response = admin_client.post(reverse("admin:django_strait_job_add"), data)
    assert response.status_code == 200
    assert list(response.context["adminform"].form.errors) == ["estimated_cost"]
    response = admin_client.post(
        reverse("admin:django_strait_job_add"), job_form(estimated_cost="-1")
    )
    assert response.status_code == 200
    assert "estimated_cost" in response.context["adminform"].form.errors
    assert not Job.objects.exists()


# Projects and budgets


def ledger(project: Project, spent: str, reserved: str = "0", days_ago: int = 0) -> BudgetLedger:
    return BudgetLedger.objects.create(
        project=project,
        day=today() - dt.timedelta(days=days_ago),
        spent=Decimal(spent),
        reserved=Decimal(reserved),
    )


def test_project_list__shows_today_spent_reserved_budget_and_a_bar_coloured_by_state(
    admin_client,
):
    ok = Project.objects.create(name="a-ok", daily_budget=Decimal(10), soft_limit_ratio=0.8)
    soft = Project.objects.create(name="b-soft", daily_budget=Decimal(10), soft_limit_ratio=0.8)
    full = Project.objects.create(name="c-full", daily_budget=Decimal(10), soft_limit_ratio=0.8)
    Project.objects.create(name="d-quiet", daily_budget=Decimal("2.5"), soft_limit_ratio=0.5)
    ledger(ok, "5", "2")
    ledger(ok, "9", days_ago=1)  # yesterday: not today's spend
    ledger(soft, "6", "2")  # 80 %: at the soft limit
    ledger(full, "9.75", "0.25")  # 100 %

    response = admin_client.get(PROJECTS)

    assert response.status_code == 200
    body = response.content.decode()
    states = re.findall(r'class="strait-budget-bar"[^>]*data-state="(\w+)"', body)
    assert states == ["ok", "soft", "exhausted", "ok"]
    assert "5.00 spent + 2.00 reserved of 10.00 (70%)" in body
    assert "9.75 spent + 0.25 reserved of 10.00 (100%)" in body
    assert "0.00 spent + 0.00 reserved of 2.50 (0%)" in body
    # 160 pixels for the budget: 5 spent is 80, 2 reserved 32 more; the soft tick at 128.
    assert '<rect x="0" y="0" width="80.0" height="14" fill="#2e7d32">' in body
    assert '<rect x="80.0" y="0" width="32.0" height="14" fill="#a5d6a7">' in body
    assert '<line x1="128.0"' in body
    assert 'fill="#ef6c00"' in body and 'fill="#c62828"' in body
    assert ">50%<" in body  # d-quiet's soft limit


def test_project_list__queries_do_not_grow_with_projects(admin_client):
    ledger(Project.objects.create(name="p0", daily_budget=Decimal(5)), "1")
    one = query_count(admin_client, PROJECTS)
    for i in range(1, 20):
        ledger(Project.objects.create(name=f"p{i}", daily_budget=Decimal(5)), "1", "1")
    assert query_count(admin_client, PROJECTS) == one


def test_project_list__sorts_by_spent_today(admin_client):
    for name, spent in (("a", "3"), ("b", "1"), ("c", "2")):
        ledger(Project.objects.create(name=name, daily_budget=Decimal(5)), spent)
    listing = admin_client.get(PROJECTS, {"o": "3"})  # the third column: spent today
    assert [p.name for p in listing.context["cl"].result_list] == ["b", "c", "a"]


def test_project_page__shows_the_last_14_days_of_the_ledger(admin_client):
    project = Project.objects.create(name="crm", daily_budget=Decimal(10))
    ledger(project, "4.5", "1")
    ledger(project, "12", days_ago=13)  # over budget that day: an endpoint reported more
    ledger(project, "777", days_ago=14)  # outside the 14 days
    page = admin_client.get(reverse("admin:django_strait_project_change", args=[project.pk]))
    assert page.status_code == 200
    body = page.content.decode()
    [table] = re.findall(r'<table class="strait-ledger">.*?</table>', body, re.S)
    days = re.findall(r"<tr><td>(\d{4}-\d\d-\d\d)</td><td>([\d.]+)</td><td>([\d.]+)</td>", table)
    first, last = today(), today() - dt.timedelta(days=13)
    assert days == [(f"{first:%Y-%m-%d}", "4.50", "1.00"), (f"{last:%Y-%m-%d}", "12.00", "0.00")]
    assert "777" not in table
    assert table.count('data-state="exhausted"') == 1


def project_form(**overrides) -> dict[str, str]:
    return {"name": "crm", "daily_budget": "10", "soft_limit_ratio": "0.8", **overrides}


def test_project_form__adds_and_edits_a_project(admin_client):
    add = reverse("admin:django_strait_project_add")
    assert admin_client.post(add, project_form()).status_code == 302
    project = Project.objects.get()
    change = reverse("admin:django_strait_project_change", args=[project.pk])
    response = admin_client.post(change, project_form(daily_budget="12.5", soft_limit_ratio="0.9"))
    assert response.status_code == 302
    project.refresh_from_db()
    assert (project.daily_budget, project.soft_limit_ratio) == (Decimal("12.5"), 0.9)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("name", "Not a slug!"),
        ("name", ""),
        ("daily_budget", "-1"),
        ("daily_budget", "1e30"),
        ("daily_budget", "ten"),
        ("daily_budget", "NaN"),
        ("soft_limit_ratio", "1.5"),
        ("soft_limit_ratio", "-0.1"),
        ("soft_limit_ratio", "nan"),
        ("soft_limit_ratio", "inf"),
    ],
)
def test_project_form__a_bad_value_shows_on_its_field(admin_client, field, value):
    add = reverse("admin:django_strait_project_add")
    response = admin_client.post(add, project_form(**{field: value}))
    assert response.status_code == 200
    assert list(response.context["adminform"].form.errors) == [field]
    assert not Project.objects.exists()


def test_project_form__a_taken_name_shows_on_the_form(admin_client):
    Project.objects.create(name="crm", daily_budget=Decimal(1))
    response = admin_client.post(reverse("admin:django_strait_project_add"), project_form())
    assert response.status_code == 200
    assert list(response.context["adminform"].form.errors) == ["name"]


def test_project_form__raising_the_budget_releases_the_runs_waiting_for_it(admin_client):
    project = Project.objects.create(name="crm", daily_budget=Decimal(1))
    job = make_job(project=project, estimated_cost=Decimal(1))
    tomorrow = timezone.now() + dt.timedelta(days=1)
    waiting = make_run(job, status="queued", error_type=BUDGET_ERROR, available_at=tomorrow)
    change = reverse("admin:django_strait_project_change", args=[project.pk])
    assert admin_client.post(change, project_form(daily_budget="5")).status_code == 302
    assert JobRun.objects.get(pk=waiting.pk).available_at <= timezone.now()


# The overview


def test_overview__shows_endpoint_health_worst_first_and_budgets_today(admin_client):
    endpoint("http://127.0.0.1:9/ok")
    endpoint("http://127.0.0.1:9/down", "unhealthy")
    circuit("http://127.0.0.1:9/down", "open")
    history("http://127.0.0.1:9/down", [80, 40, 0])
    ledger(Project.objects.create(name="crm", daily_budget=Decimal(4)), "1", "2")

    response = admin_client.get(OVERVIEW)

    data = response.context["overview"]
    assert [(e.endpoint_url, e.level, e.circuit, e.history) for e in data.endpoints] == [
        ("http://127.0.0.1:9/down", "unhealthy", "open", (80.0, 40.0, 0.0)),
        ("http://127.0.0.1:9/ok", "healthy", None, ()),
    ]
    [crm] = data.budgets
    assert (crm.name, crm.today.spent, crm.today.reserved, crm.today.state) == (
        "crm", Decimal(1), Decimal(2), "ok",
    )  # fmt: skip
    body = response.content.decode()
    [health] = re.findall(r'<section id="strait-endpoint-health">.*?</section>', body, re.S)
    assert health.count("<polyline") == 1 and "unhealthy (0)" in health and "Open" in health
    [budgets] = re.findall(r'<section id="strait-budgets">.*?</section>', body, re.S)
    assert "1.00 spent + 2.00 reserved of 4.00 (75%)" in budgets and ">75%<" not in budgets
    assert "<td>crm</td><td>1.00</td><td>2.00</td>" in budgets and " 75%</td>" in budgets


def test_overview__health_and_budgets_cost_the_same_with_20_endpoints_and_projects(
    admin_client,
):
    def add(i: int) -> None:
        url = f"http://127.0.0.1:9/o{i}"
        endpoint(url, "degraded")
        circuit(url)
        history(url, [55.0] * 10)
        ledger(Project.objects.create(name=f"p{i}", daily_budget=Decimal(5)), "1")

    add(0)
    one = query_count(admin_client, OVERVIEW)
    for i in range(1, 20):
        add(i)
    assert query_count(admin_client, OVERVIEW) == one
    body = admin_client.get(OVERVIEW).content.decode()
    assert body.count("<polyline") == 20 and body.count('class="strait-budget-bar"') == 20


def test_overview__shows_at_most_20_endpoints_the_least_healthy(admin_client):
    for i in range(25):
        EndpointHealth.objects.create(
            endpoint_url=f"http://127.0.0.1:9/n{i:02}", success_rate=i / 25
        )
    data = admin_client.get(OVERVIEW).context["overview"]
    assert data.endpoint_count == 25
    assert [e.endpoint_url[-3:] for e in data.endpoints] == [f"n{i:02}" for i in range(20)]
    assert "the 20 least healthy of 25" in admin_client.get(OVERVIEW).content.decode()


# Charts


def test_budget_bar__states_follow_the_worker_thresholds():
    def state(spent: str, reserved: str, budget: str, ratio: float = 0.8) -> str:
        return charts.BudgetDay(Decimal(spent), Decimal(reserved), Decimal(budget), ratio).state

    assert state("7.99", "0", "10") == "ok"
    assert state("7", "1", "10") == "soft"  # reserved counts: committed reaches 80 %
    assert state("10", "0", "10") == "exhausted"
    assert state("0", "0", "0") == "exhausted"  # no budget: nothing with a cost fits


def test_budget_bar__over_budget_fills_the_bar_and_moves_the_soft_tick():
    day = charts.BudgetDay(Decimal(15), Decimal(5), Decimal(10), 0.5)
    svg = str(charts.budget_bar(day, width=100))
    # The bar is 20 long (what is committed): spent 75, reserved 25, the soft limit at 5 -> 25.
    assert 'width="75.0" height="14" fill="#c62828"' in svg
    assert '<rect x="75.0" y="0" width="25.0"' in svg
    assert '<line x1="25.0"' in svg
    assert "(200%)" in svg


def test_amount__keeps_two_decimals_and_drops_trailing_zeros():
    assert [charts.amount(Decimal(v)) for v in ("12.500000", "0.002500", "3", "1E+1")] == [
        "12.50", "0.0025", "3.00", "10.00",
    ]  # fmt: skip
