"""Fuzz the REST API with schemathesis against a live server on 127.0.0.1.

Cases come from the committed schema's operations; every answer must be below
500 and match the schema (status code, content type, body). Bounded: about
twenty cases per operation, a few hundred in all.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
import schemathesis
from django.core.cache import cache
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from django_strait.api.auth import issue_key
from django_strait.api.schema import generate_schema
from django_strait.models import BudgetLedger, EndpointCircuit, EndpointHealth, Project
from django_strait.resilience.budgets import today
from tests.integration.factories import make_job, make_run

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
UNTHROTTLED = {
    "ALLOWED_PRIVATE_NETWORKS": ["127.0.0.0/8", "::1/128"],
    "API_THROTTLE_RATE": None,
    "API_TRIGGER_THROTTLE_RATE": None,
}


@pytest.fixture
def unthrottled(settings):
    settings.STRAIT = UNTHROTTLED
    cache.clear()


@pytest.fixture
def key(live_server) -> str:
    """A key for everything, and rows for the fuzz to find.

    A job in a project, runs, dead letters, an open circuit with its health, a ledger day.
    """
    project = Project.objects.create(name="fuzz-project", daily_budget=Decimal("10"))
    BudgetLedger.objects.create(project=project, day=today(), spent=Decimal("1.5"))
    job = make_job("fuzz-job", project=project, estimated_cost=Decimal("0.25"))
    for status in ("queued", "dead_letter", "failed", "completed", "executing"):
        make_run(job, status=status)
    url = "http://127.0.0.1:9/fuzz"
    EndpointCircuit.objects.create(endpoint_url=url, state="open", failures=5)
    EndpointHealth.objects.create(endpoint_url=url, success_rate=0.4, failure_rate=0.6)
    return issue_key("fuzz", ["*"])[1]


# schemathesis' own pytest plugin does not run on pytest 9 yet: each operation is one
# test here, its cases drawn by Hypothesis from the operation's strategy.
SCHEMA = generate_schema()
OPERATIONS = [(method.upper(), path) for path, item in SCHEMA["paths"].items() for method in item]


@pytest.mark.usefixtures("unthrottled")
@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_api__fuzzed_requests_never_5xx_and_match_the_schema(method, path, live_server, key):
    operation = schemathesis.openapi.from_dict(SCHEMA)[path][method]
    base_url = f"{live_server.url}/api/strait"
    headers = {"Authorization": f"Api-Key {key}"}

    @given(case=operation.as_strategy())
    @settings(
        max_examples=20, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    def check(case):
        case.validate_response(case.call(base_url=base_url, headers=headers), checks=CHECKS)

    check()
