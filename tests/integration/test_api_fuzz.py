"""Fuzz the REST API with schemathesis against a live server on 127.0.0.1.

Cases come from the committed schema's operations; every answer must be below
500 and match the schema (status code, content type, body). Bounded: about
twenty cases per operation, a few hundred in all.

A second pass swaps hostile values into those cases: body fields, query
parameters and text path parameters become text with NULs, lone surrogates,
CR/LF or hundreds of thousands of characters, numbers past every range (1e308,
10**400, 1e999, NaN, Infinity), or JSON nested hundreds of levels deep. The same
checks hold: no 5xx, and every refusal documented and in the error shape. About
fifteen cases per operation.
"""

from __future__ import annotations

import base64
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

import pytest
import schemathesis
from django.core.cache import cache
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from django_strait import define_workflow, trigger_workflow
from django_strait.api.auth import issue_key
from django_strait.api.schema import generate_schema
from django_strait.models import BudgetLedger, EndpointCircuit, EndpointHealth, Project
from django_strait.rules.resilience.budgets import today
from tests.hostile import (
    URL_TEXT,
    encode,
    hostile_tree,
    not_dots,
    path_value,
    query_value,
)
from tests.integration.factories import make_job, make_run

pytestmark = [pytest.mark.slow, pytest.mark.layout_free, pytest.mark.django_db(transaction=True)]

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

    A job in a project, runs, dead letters, an open circuit with its health, a ledger day,
    a workflow with a run.
    """
    project = Project.objects.create(name="fuzz-project", daily_budget=Decimal("10"))
    BudgetLedger.objects.create(project=project, day=today(), spent=Decimal("1.5"))
    job = make_job("fuzz-job", project=project, estimated_cost=Decimal("0.25"))
    for status in ("queued", "dead_letter", "failed", "completed", "executing"):
        make_run(job, status=status)
    url = "http://127.0.0.1:9/fuzz"
    EndpointCircuit.objects.create(endpoint_url=url, state="open", failures=5)
    EndpointHealth.objects.create(endpoint_url=url, success_rate=0.4, failure_rate=0.6)
    define_workflow("fuzz-flow", steps=[{"name": "a", "job": "fuzz-job"}])
    trigger_workflow("fuzz-flow", {"n": 1})
    return issue_key("fuzz", ["*"])[1]


def api_url(live_server) -> str:
    """Return the API's URL on the live server, by address: 127.0.0.1, never a name."""
    return f"http://127.0.0.1:{urlsplit(live_server.url).port}/api/strait"


# schemathesis' own pytest plugin does not run on pytest 9 yet: each operation is one
# test here, its cases drawn by Hypothesis from the operation's strategy.
SCHEMA = generate_schema()
OPERATIONS = [(method.upper(), path) for path, item in SCHEMA["paths"].items() for method in item]


@pytest.mark.usefixtures("unthrottled")
@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_api__fuzzed_requests_never_5xx_and_match_the_schema(method, path, live_server, key):
    operation = schemathesis.openapi.from_dict(SCHEMA)[path][method]
    base_url = api_url(live_server)
    headers = {"Authorization": f"Api-Key {key}"}

    @given(case=operation.as_strategy())
    @settings(
        max_examples=20, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    def check(case):
        case.validate_response(case.call(base_url=base_url, headers=headers), checks=CHECKS)

    check()


# Hostile values (tests/hostile.py), and the cursors and query values of this API


def _cursor(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


#: Numbers past every range, other scripts' digits, and cursors holding hostile JSON.
QUERY_SPECIALS = st.sampled_from(
    ["1e308", "-1e308", "1" * 5000, "9" * 19, "-1", "0", "NaN", "Infinity", "\u0661", "\uff15", ""]
    + [_cursor(t) for t in ['"\\ud800"', "[" * 5000, '{"a":' * 400 + "1" + "}" * 400, "1e999"]]
    + [_cursor("9" * 400), "%%%", "\x00"]
)


@st.composite
def hostile_cases(draw: st.DrawFn, operation: Any) -> tuple[Any, dict[str, bytes]]:
    """Draw a case of ``operation`` with hostile body and path values, and hostile query values.

    The query goes apart, as bytes: schemathesis checks a case's own query as text,
    and a lone surrogate is not text it can send.
    """
    case = draw(operation.as_strategy())
    if isinstance(case.body, dict | list):
        body = draw(hostile_tree(case.body))
        case.body = encode(body, ascii_only=draw(st.booleans())).encode("utf-8", "surrogatepass")
    case.path_parameters = {
        name: path_value(draw(st.one_of(st.just(value), URL_TEXT.filter(not_dots))))
        if isinstance(value, str) else value
        for name, value in case.path_parameters.items()
    }  # fmt: skip
    query = {
        name: query_value(draw(st.one_of(st.just(str(value)), URL_TEXT, QUERY_SPECIALS)))
        for name, value in case.query.items()
    }
    case.query = {}
    return case, query


@pytest.mark.usefixtures("unthrottled")
@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_api__hostile_values_never_5xx_and_refusals_match_the_schema(
    method, path, live_server, key
):
    operation = schemathesis.openapi.from_dict(SCHEMA)[path][method]
    base_url = api_url(live_server)
    headers = {"Authorization": f"Api-Key {key}"}

    @given(drawn=hostile_cases(operation))
    @settings(
        max_examples=15, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    def check(drawn):
        case, query = drawn
        response = case.call(base_url=base_url, headers=headers, params=query)
        case.validate_response(response, checks=CHECKS)

    check()
