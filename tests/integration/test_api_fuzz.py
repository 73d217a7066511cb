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
import json
from decimal import Decimal
from typing import Any
from urllib.parse import quote, urlsplit

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


# Hostile values


class Raw(str):
    """JSON text sent as it is: what Python's json cannot write (1e999, NaN, deep nesting)."""


def encode(value: Any, *, ascii_only: bool) -> str:
    """Return ``value`` as JSON text, ``Raw`` parts verbatim, surrogates kept as they are."""
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, dict):
        items = (f"{encode(k, ascii_only=ascii_only)}: {encode(v, ascii_only=ascii_only)}"
                 for k, v in value.items())  # fmt: skip
        return "{" + ", ".join(items) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(encode(v, ascii_only=ascii_only) for v in value) + "]"
    return json.dumps(value, ensure_ascii=ascii_only)


SPECIALS = ["\x00", "\ud800", "\udbff", "\udc00", "\udfff", "\r\n", "\r", "\n", "\x1b", "\x7f",
            "\u2028", "\ufeff", "\U0010ffff", "\u0661", "\uff15", "%00", "\\u0000", '"', "\\"]  # fmt: skip


def hostile_text(longest: int) -> st.SearchStrategy[str]:
    """Text of special characters, or one of them repeated a quarter of ``longest`` times or more."""
    return st.one_of(
        st.lists(st.sampled_from(SPECIALS) | st.text(max_size=3), min_size=1, max_size=8).map(
            "".join
        ),
        st.tuples(st.sampled_from(SPECIALS + ["a", "9"]), st.integers(longest // 4, longest)).map(
            lambda pair: pair[0] * pair[1]
        ),
    )


HOSTILE_TEXT = hostile_text(200_000)
#: In a URL, shorter: the server refuses a request line past 64 KiB (414) before the API
#: sees it, and runs/ has eight parameters of up to 12 characters per one sent.
URL_TEXT = hostile_text(400)
HOSTILE_NUMBERS = st.sampled_from(
    [1e308, -1e308, 1.7976931348623157e308, 5e-324, -0.0, 10**400, -(10**400), 2**63,
     -(2**63) - 1, 2**64, 2**31, 10**308, Raw("1e999"), Raw("-1e999"), Raw("1E400"),
     Raw("NaN"), Raw("Infinity"), Raw("-Infinity"), Raw("1" * 5000), Raw("-" + "9" * 400)]
)  # fmt: skip
DEEP = st.sampled_from([65, 320, 1000, 20_000]).flatmap(
    lambda depth: st.sampled_from(
        [Raw("[" * depth + "]" * depth), Raw('{"a": ' * depth + "1" + "}" * depth)]
    )
)
HOSTILE = st.one_of(HOSTILE_TEXT, HOSTILE_NUMBERS, DEEP, st.lists(HOSTILE_TEXT, max_size=3))


def hostile_tree(value: Any) -> st.SearchStrategy[Any]:
    """Return ``value`` with some of its parts (or all of it) swapped for hostile values."""
    if isinstance(value, dict):
        children = st.fixed_dictionaries({k: hostile_tree(v) for k, v in value.items()})
        extra = st.dictionaries(HOSTILE_TEXT, HOSTILE, max_size=1)
        mutated = st.tuples(children, extra).map(lambda pair: {**pair[0], **pair[1]})
    elif isinstance(value, list):
        mutated = st.tuples(*(hostile_tree(v) for v in value)).map(list)
    else:
        mutated = st.just(value)
    return st.one_of(mutated, HOSTILE)


def _cursor(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


#: Numbers past every range, other scripts' digits, and cursors holding hostile JSON.
QUERY_SPECIALS = st.sampled_from(
    ["1e308", "-1e308", "1" * 5000, "9" * 19, "-1", "0", "NaN", "Infinity", "\u0661", "\uff15", ""]
    + [_cursor(t) for t in ['"\\ud800"', "[" * 5000, '{"a":' * 400 + "1" + "}" * 400, "1e999"]]
    + [_cursor("9" * 400), "%%%", "\x00"]
)


def query_value(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def path_value(text: str) -> str:
    return quote(text, safe="", errors="surrogatepass")


def _not_dots(text: str) -> bool:
    # An empty, "." or ".." segment is resolved away by the client before it is sent.
    return bool(text.strip("."))


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
        name: path_value(draw(st.one_of(st.just(value), URL_TEXT.filter(_not_dots))))
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
