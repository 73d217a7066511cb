"""The REST API's circuits (list, reset), endpoint health and budgets: scopes, contents, errors."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.contrib.auth.models import Permission, User
from django.core.cache import cache
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from django_strait.api.auth import issue_key
from django_strait.models import BudgetLedger, EndpointCircuit, EndpointHealth, Project
from django_strait.rules.resilience.budgets import today

pytestmark = pytest.mark.django_db

OPEN_URL = "http://127.0.0.1:9/flaky"
CLOSED_URL = "http://127.0.0.1:9/fine"


@pytest.fixture(autouse=True)
def fresh_throttles():
    cache.clear()


def key_client(*scopes: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {issue_key('test key', scopes)[1]}")
    return client


def user_client(*codenames: str) -> APIClient:
    user = User.objects.create_user(f"user-{'-'.join(codenames) or 'none'}")
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return client


def error_of(response) -> dict:
    return response.json()["error"]


@pytest.fixture
def open_circuit() -> EndpointCircuit:
    now = timezone.now()
    return EndpointCircuit.objects.create(
        endpoint_url=OPEN_URL, state="open", failures=7, opened_at=now, last_failure_at=now
    )


@pytest.fixture
def project() -> Project:
    return Project.objects.create(name="billing", daily_budget=Decimal("100"))


# Scopes and permissions

READS = ["/api/strait/circuits/", "/api/strait/health/", "/api/strait/budgets/"]
READ_PERMISSION = {
    "/api/strait/circuits/": "view_endpointcircuit",
    "/api/strait/health/": "view_endpointhealth",
    "/api/strait/budgets/": "view_project",
    "/api/strait/budgets/billing/": "view_project",
}


@pytest.mark.parametrize("url", [*READS, "/api/strait/budgets/billing/"])
def test_reads__without_credentials_are_a_401(url, project):
    response = APIClient().get(url)
    assert response.status_code == 401
    assert error_of(response)["code"] == "not_authenticated"


@pytest.mark.parametrize("url", [*READS, "/api/strait/budgets/billing/"])
def test_reads__need_the_jobs_read_scope(url, project):
    refused = key_client("runs:read", "dlq:read", "circuits:reset").get(url)
    assert refused.status_code == 403
    assert "jobs:read" in error_of(refused)["message"]
    assert key_client("jobs:read").get(url).status_code == 200


@pytest.mark.parametrize("url", [*READS, "/api/strait/budgets/billing/"])
def test_reads__by_a_user_need_the_view_permission(url, project):
    permission = READ_PERMISSION[url]
    refused = user_client("view_job").get(url)
    assert refused.status_code == 403
    assert f"django_strait.{permission}" in error_of(refused)["message"]
    assert user_client(permission).get(url).status_code == 200


def reset(client: APIClient, url: str = OPEN_URL, **body):
    return client.post("/api/strait/circuits/reset/", {"endpoint_url": url, **body}, format="json")


def test_reset__without_credentials_is_a_401_and_changes_nothing(open_circuit):
    assert reset(APIClient()).status_code == 401
    open_circuit.refresh_from_db()
    assert (open_circuit.state, open_circuit.failures) == ("open", 7)


def test_reset__needs_the_circuits_reset_scope(open_circuit):
    refused = reset(key_client("jobs:read", "jobs:write", "runs:write"))
    assert refused.status_code == 403
    assert "circuits:reset" in error_of(refused)["message"]
    open_circuit.refresh_from_db()
    assert (open_circuit.state, open_circuit.failures) == ("open", 7)
    assert reset(key_client("circuits:reset")).status_code == 200


def test_reset__by_a_user_needs_the_reset_permission(open_circuit):
    refused = reset(user_client("view_endpointcircuit", "change_endpointcircuit"))
    assert refused.status_code == 403
    assert "django_strait.reset_endpointcircuit" in error_of(refused)["message"]
    assert reset(user_client("reset_endpointcircuit")).status_code == 200


# Circuits


def test_circuits__list_each_circuit_with_the_health_of_its_url(open_circuit):
    EndpointCircuit.objects.create(endpoint_url=CLOSED_URL)
    # 100 x (0.5 x 0.2 + 0.3 x 0.2 + 0.2 x 1) = 36: degraded.
    EndpointHealth.objects.create(endpoint_url=OPEN_URL, success_rate=0.2, failure_rate=0.8)
    body = key_client("jobs:read").get("/api/strait/circuits/").json()
    assert body["next"] is None
    flaky, fine = body["results"]
    assert flaky["endpoint_url"] == OPEN_URL
    assert (flaky["state"], flaky["failures"]) == ("open", 7)
    assert flaky["opened_at"] is not None and flaky["last_failure_at"] is not None
    assert flaky["health_score"] == pytest.approx(36.0)
    assert flaky["health_level"] == "degraded"
    assert (fine["endpoint_url"], fine["state"], fine["failures"]) == (CLOSED_URL, "closed", 0)
    assert (fine["health_score"], fine["health_level"]) == (None, None)


def test_circuits__page_with_a_next_link():
    for n in range(3):
        EndpointCircuit.objects.create(endpoint_url=f"http://127.0.0.1:9/e{n}")
    client = key_client("jobs:read")
    first = client.get("/api/strait/circuits/?limit=2").json()
    assert [c["endpoint_url"][-2:] for c in first["results"]] == ["e0", "e1"]
    second = client.get(first["next"]).json()
    assert [c["endpoint_url"][-2:] for c in second["results"]] == ["e2"]
    assert second["next"] is None


def test_circuits__unknown_parameter_is_a_400_naming_it():
    response = key_client("jobs:read").get("/api/strait/circuits/?state=open")
    assert response.status_code == 400
    assert error_of(response)["details"] == {"state": ["unknown parameter; allowed: cursor, limit"]}


def test_reset__closes_the_circuit_and_forgets_its_failures(open_circuit):
    response = reset(key_client("circuits:reset"))
    assert response.status_code == 200
    body = response.json()
    assert (body["endpoint_url"], body["state"], body["failures"]) == (OPEN_URL, "closed", 0)
    open_circuit.refresh_from_db()
    assert (open_circuit.state, open_circuit.failures) == ("closed", 0)


def test_reset__of_a_closed_circuit_answers_it_unchanged():
    EndpointCircuit.objects.create(endpoint_url=CLOSED_URL)
    response = reset(key_client("circuits:reset"), CLOSED_URL)
    assert response.status_code == 200
    assert (response.json()["state"], response.json()["failures"]) == ("closed", 0)


def test_reset__of_an_url_without_a_circuit_is_a_404_naming_it(open_circuit):
    response = reset(key_client("circuits:reset"), "http://127.0.0.1:9/never")
    assert response.status_code == 404
    error = error_of(response)
    assert error["code"] == "not_found"
    assert "'http://127.0.0.1:9/never'" in error["message"]
    open_circuit.refresh_from_db()
    assert open_circuit.state == "open"


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [({}, "endpoint_url", "required"),
     ({"endpoint_url": ""}, "endpoint_url", "blank"),
     ({"endpoint_url": OPEN_URL, "force": True}, "force", "unknown field; allowed: endpoint_url")],
)  # fmt: skip
def test_reset__bad_body_is_a_400_naming_the_field(open_circuit, body, field, message):
    response = key_client("circuits:reset").post("/api/strait/circuits/reset/", body, format="json")
    assert response.status_code == 400
    assert message in error_of(response)["details"][field][0]
    open_circuit.refresh_from_db()
    assert open_circuit.state == "open"


# Health


@pytest.fixture
def endpoints() -> None:
    EndpointHealth.objects.create(
        endpoint_url="http://127.0.0.1:9/good", latency_p95_ms=3000, samples=40
    )  # 100 x (0.5 + 0.3 + 0.2 x 0.9) = 98
    EndpointHealth.objects.create(
        endpoint_url="http://127.0.0.1:9/slow", success_rate=0.2, failure_rate=0.8
    )  # 36
    EndpointHealth.objects.create(
        endpoint_url="http://127.0.0.1:9/down", success_rate=0.0, failure_rate=1.0,
        latency_p95_ms=30_000,
    )  # fmt: skip


def test_health__lists_every_endpoint_with_score_level_and_rates(endpoints):
    body = key_client("jobs:read").get("/api/strait/health/").json()
    by_url = {row["endpoint_url"].rsplit("/", 1)[1]: row for row in body["results"]}
    assert list(by_url) == ["good", "slow", "down"]
    good = by_url["good"]
    assert good["score"] == pytest.approx(98.0)
    assert good["level"] == "healthy"
    assert (good["success_rate"], good["failure_rate"]) == (1.0, 0.0)
    assert (good["latency_p95_ms"], good["samples"]) == (3000.0, 40)
    assert good["updated_at"] is not None
    assert (by_url["slow"]["level"], by_url["down"]["level"]) == ("degraded", "unhealthy")
    assert by_url["down"]["score"] == pytest.approx(0.0)


@pytest.mark.parametrize(
    ("query", "expected"),
    [("degraded", ["slow"]), ("healthy,unhealthy", ["good", "down"]), (" unhealthy ", ["down"])],
)
def test_health__level_filter(endpoints, query, expected):
    body = key_client("jobs:read").get("/api/strait/health/", {"level": query}).json()
    assert [row["endpoint_url"].rsplit("/", 1)[1] for row in body["results"]] == expected


@pytest.mark.parametrize(
    ("query", "field", "message"),
    [("level=sick", "level",
      "unknown level 'sick'; allowed: healthy, degraded, unhealthy"),
     ("level=", "level", "must name at least one value"),
     ("score=10", "score", "unknown parameter; allowed: level, cursor, limit")],
)  # fmt: skip
def test_health__bad_parameter_is_a_400_naming_it(endpoints, query, field, message):
    response = key_client("jobs:read").get(f"/api/strait/health/?{query}")
    assert response.status_code == 400
    assert message in error_of(response)["details"][field][0]


# Budgets


def test_budgets__each_project_with_today_spent_reserved_and_remaining(project):
    BudgetLedger.objects.create(
        project=project, day=today(), spent=Decimal("30.5"), reserved=Decimal("4.5")
    )
    BudgetLedger.objects.create(
        project=project, day=today() - dt.timedelta(days=1), spent=Decimal("99")
    )
    Project.objects.create(name="idle", daily_budget=Decimal("20"), soft_limit_ratio=0.5)
    over = Project.objects.create(name="over", daily_budget=Decimal("10"))
    BudgetLedger.objects.create(project=over, day=today(), spent=Decimal("12"))
    body = key_client("jobs:read").get("/api/strait/budgets/").json()
    rows = {row["name"]: row for row in body["results"]}
    assert list(rows) == ["billing", "idle", "over"]
    billing = rows["billing"]
    assert billing["day"] == today().isoformat()
    assert Decimal(billing["daily_budget"]) == 100
    assert billing["soft_limit_ratio"] == 0.8
    assert (Decimal(billing["spent"]), Decimal(billing["reserved"])) == (Decimal("30.5"), 4.5)
    assert Decimal(billing["remaining"]) == 65
    idle = rows["idle"]
    assert (Decimal(idle["spent"]), Decimal(idle["reserved"]), Decimal(idle["remaining"])) == (
        0, 0, 20,
    )  # fmt: skip
    assert idle["soft_limit_ratio"] == 0.5
    assert Decimal(rows["over"]["remaining"]) == 0


def test_budget__the_last_days_newest_first_with_zeros_where_nothing_ran(project):
    day = today()
    warned = timezone.now()
    BudgetLedger.objects.create(project=project, day=day, spent=Decimal(1), reserved=Decimal(2))
    BudgetLedger.objects.create(
        project=project, day=day - dt.timedelta(days=2), spent=Decimal(85),
        soft_warning_sent_at=warned,
    )  # fmt: skip
    BudgetLedger.objects.create(project=project, day=day - dt.timedelta(days=3), spent=Decimal(7))
    body = key_client("jobs:read").get("/api/strait/budgets/billing/?days=3").json()
    assert (body["name"], Decimal(body["daily_budget"]), body["soft_limit_ratio"]) == (
        "billing", 100, 0.8,
    )  # fmt: skip
    days = body["days"]
    assert [d["day"] for d in days] == [(day - dt.timedelta(days=n)).isoformat() for n in range(3)]
    assert [(Decimal(d["spent"]), Decimal(d["reserved"])) for d in days] == [
        (1, 2), (0, 0), (85, 0),
    ]  # fmt: skip
    assert [d["soft_warning_sent_at"] is not None for d in days] == [False, False, True]


def test_budget__defaults_to_seven_days(project):
    body = key_client("jobs:read").get("/api/strait/budgets/billing/").json()
    assert len(body["days"]) == 7


@pytest.mark.parametrize("days", ["0", "91", "x", "-1", "2.5"])
def test_budget__days_out_of_bounds_is_a_400_naming_it(project, days):
    response = key_client("jobs:read").get(f"/api/strait/budgets/billing/?days={days}")
    assert response.status_code == 400
    assert error_of(response)["details"] == {
        "days": [f"must be an integer from 1 to 90 in ASCII digits (0-9), got {days!r}"]
    }


def test_budget__unknown_project_is_a_404_naming_it(project):
    response = key_client("jobs:read").get("/api/strait/budgets/payroll/")
    assert response.status_code == 404
    assert error_of(response)["message"] == "no project named 'payroll'"


def test_budgets__unknown_parameter_is_a_400_naming_it(project):
    response = key_client("jobs:read").get("/api/strait/budgets/?day=2030-01-01")
    assert response.status_code == 400
    assert "day" in error_of(response)["details"]
