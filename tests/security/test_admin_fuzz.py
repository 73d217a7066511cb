"""Fuzz the admin: every page of django-strait's models, as a logged-in superuser with CSRF.

The pages are found from the admin's own URL patterns, each filled with a real
object's id. Every page gets hostile query strings (the names its own links use,
the admin's ``q``/``o``/``p``/``_changelist_filters``, and one made up), and
every form it shows is posted back (its own fields, its CSRF token) with one or
two fields hostile (``tests/hostile.py``: NUL, lone surrogates in JSON text, JSON
2,000+ levels deep, times past what UTC holds, 200,000-character text, empty).
No answer may be a 5xx; a refusal is a 4xx, or the form again (200) with its error.
Requests go through Django's test client against the real admin URLs.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from decimal import Decimal
from html.parser import HTMLParser
from typing import Any
from urllib.parse import quote_from_bytes, unquote

import pytest
from django.contrib import admin
from django.contrib.auth.models import User
from django.test import Client
from django.urls import URLPattern, URLResolver, reverse
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_strait import define_workflow, trigger_workflow
from django_strait.api.auth import issue_key
from django_strait.models import (
    EndpointCircuit,
    EndpointHealth,
    Project,
    WebhookDelivery,
    WorkerProcess,
    Workflow,
    WorkflowRun,
)
from tests.hostile import (
    DEPTHS,
    HOSTILE_TEXT,
    HOSTILE_TIMES,
    URL_TEXT,
    not_dots,
    path_value,
)
from tests.integration.factories import make_job, make_run
from tests.security.fuzzing import Tally, tallied

pytestmark = [
    pytest.mark.slow,
    pytest.mark.layout_free,
    pytest.mark.django_db(transaction=True),
    pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning"),
    # A date filter typed without an offset (?finished_at__lt=2026-01-01) is read in the
    # current time zone with Django's warning; only the suite's warnings-as-errors makes it a 500.
    pytest.mark.filterwarnings("ignore:DateTimeField .* received a naive datetime:RuntimeWarning"),
]

#: Requests per page: a base for its query string, more for each field of its form.
QUERY_EXAMPLES = 12
PER_FIELD = 3
MAX_FORM_EXAMPLES = 120

#: JSON text no field should store, and text a form field reads as something else.
HOSTILE_JSON = st.one_of(
    st.sampled_from(DEPTHS).map(lambda d: "[" * d + "]" * d),
    st.sampled_from(DEPTHS).map(lambda d: '{"a": ' * d + "1" + "}" * d),
    st.sampled_from(['["\\ud800"]', '{"\\udfff": 1}', '"\\ud800"', '{"a": "\\u0000"}',
                     '["\\u0000"]', "[1e999]", "NaN", "-Infinity", "[" + "9" * 400 + "]",
                     "null", "", " ", "{}", "[]", '""', "[{}]", '{"a": [1, 2]}', "1" * 5000]),
)  # fmt: skip
FORM_VALUES = st.one_of(
    HOSTILE_TEXT, HOSTILE_JSON, HOSTILE_JSON, HOSTILE_TIMES,
    st.sampled_from(["", "-1", "0", "9" * 400, "1e308", "nan", "-9223372036854775809", "on"]),
)  # fmt: skip
QUERY_VALUES = st.one_of(
    URL_TEXT, HOSTILE_TIMES,
    st.sampled_from(["\x00", "a\x00", "\ud800", "9" * 400, "-1", "1e308", "x" * 3000, ""]),
)  # fmt: skip
#: Query parameters every admin list reads, and the endpoint page's ``url``.
ADMIN_PARAMETERS = ["q", "o", "p", "e", "_changelist_filters", "_popup", "_to_field", "all", "url"]
FILLERS = {"name": ["replay", "cancel", "discard", "nope"]}


@pytest.fixture
def rows() -> dict[str, Any]:
    """One row of every model the admin shows, so that each page has something to show."""
    project = Project.objects.create(name="fuzz-project", daily_budget=Decimal("10"))
    job = make_job("fuzz-job", project=project, estimated_cost=Decimal("0.25"),
                   non_retryable_errors=["fatal"], webhook_url="https://hooks.example.com/x")  # fmt: skip
    http = make_job("fuzz-http", endpoint_url="https://api.example.com/x", headers={"A": "b"})
    runs = {s: make_run(job, status=s, error_type="http.503") for s in
            ("queued", "dead_letter", "failed", "completed", "executing")}  # fmt: skip
    make_run(http, status="dead_letter", error_type="http.500")
    url = "https://api.example.com/x"
    circuit = EndpointCircuit.objects.create(endpoint_url=url, state="open", failures=5)
    health = EndpointHealth.objects.create(endpoint_url=url, success_rate=0.4, failure_rate=0.6)
    delivery = WebhookDelivery.objects.create(run=runs["completed"], url=job.webhook_url,
                                              event="run.completed")  # fmt: skip
    now = timezone.now()
    worker = WorkerProcess.objects.create(worker_id="fuzz-worker", host="h", pid=1, concurrency=4,
                                          started_at=now, last_seen_at=now)  # fmt: skip
    define_workflow("fuzz-flow", steps=[{"name": "a", "job": "fuzz-job"}])
    trigger_workflow("fuzz-flow", {"n": 1})
    key, _ = issue_key("fuzz", ["*"])
    return {
        "job": job.pk, "jobrun": runs["failed"].pk, "deadletter": runs["dead_letter"].pk,
        "project": project.pk, "endpointcircuit": circuit.pk, "endpointhealth": health.pk,
        "webhookdelivery": delivery.pk, "workerprocess": worker.pk, "apikey": key.pk,
        "workflow": Workflow.objects.get().pk, "workflowrun": WorkflowRun.objects.get().pk,
    }  # fmt: skip


@pytest.fixture
def superuser(settings) -> Client:
    """A logged-in superuser whose posts must carry the CSRF token, as a browser's do."""
    settings.STRAIT = {**settings.STRAIT, "API_THROTTLE_RATE": None}
    user = User.objects.create_superuser("fuzz", "fuzz@example.com", "fuzz-password")
    client = Client(enforce_csrf_checks=True, raise_request_exception=False)
    client.force_login(user)
    client.get(reverse("admin:index"))  # sets the CSRF cookie
    return client


def _routes(patterns: list, prefix: str = "") -> Iterator[tuple[str, str]]:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _routes(pattern.url_patterns, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern) and pattern.name:
            yield prefix + str(pattern.pattern), pattern.name


#: Every named admin page of django-strait's models.
PAGES = sorted(
    (route, name) for route, name in _routes(admin.site.get_urls())
    if route.startswith("django_strait/") and not name.endswith("_delete")
)  # fmt: skip


def page_url(route: str, rows: dict[str, Any], **given: str) -> str:
    """The page's URL, its parameters filled with a real object's id (or ``given`` text)."""
    model = route.split("/")[1]

    def fill(match: re.Match[str]) -> str:
        name = match.group(2)
        if name in given:
            return given[name]
        if name == "job_id":
            return str(rows["job"])
        if name in FILLERS:
            return FILLERS[name][0]
        return str(rows.get(model, rows["job"]))

    return "/admin/" + re.sub(r"<(?:(\w+):)?(\w+)>", fill, route)


class Page(HTMLParser):
    """What a page offers: the query parameters of its links, and its POST forms' fields."""

    def __init__(self) -> None:
        super().__init__()
        self.parameters: set[str] = set()
        self.forms: list[dict[str, list[str]]] = []
        self._field: tuple[str, str] | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "a" and "?" in a.get("href", ""):
            query = a["href"].split("?", 1)[1]
            self.parameters |= {unquote(p.split("=")[0]) for p in query.split("&") if p}
        elif tag == "form" and a.get("method", "").lower() == "post":
            self.forms.append({})
        elif self.forms and tag == "input" and a.get("name"):
            if a.get("type") not in ("checkbox", "radio") or "checked" in a or a.get("value"):
                self.forms[-1].setdefault(a["name"], []).append(a.get("value", ""))
        elif self.forms and tag in ("textarea", "select") and a.get("name"):
            self._field, self._text = (tag, a["name"]), []
        elif self.forms and tag == "option" and self._field:
            self.forms[-1].setdefault(self._field[1], []).append(a.get("value", ""))

    def handle_data(self, data: str) -> None:
        if self._field and self._field[0] == "textarea":
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if self._field and tag == self._field[0]:
            if tag == "textarea":
                self.forms[-1][self._field[1]] = ["".join(self._text).lstrip("\n")]
            self._field = None


def read(client: Client, url: str) -> Page:
    response = client.get(url)
    page = Page()
    if response.status_code == 200:
        page.feed(response.content.decode())
    return page


def encoded(fields: dict[str, list[str]]) -> bytes:
    """The form as a browser posts it (a lone surrogate sent as its bytes, as some send it)."""
    return b"&".join(
        quote_from_bytes(name.encode()).encode() + b"="
        + quote_from_bytes(value.encode("utf-8", "surrogatepass")).encode()
        for name, values in fields.items() for value in values
    )  # fmt: skip


@st.composite
def queries(draw: st.DrawFn, names: list[str]) -> str:
    chosen = draw(st.lists(st.sampled_from(names), min_size=1, max_size=3, unique=True))
    chosen += draw(st.lists(URL_TEXT.filter(not_dots), max_size=1))
    return "&".join(f"{path_value(name)}={path_value(draw(QUERY_VALUES))}" for name in chosen)


@st.composite
def posts(draw: st.DrawFn, form: dict[str, list[str]]) -> dict[str, list[str]]:
    """The form's own values (the first of a select's options), one or two fields hostile."""
    sent = {name: values[:1] for name, values in form.items()}
    for name in draw(st.lists(st.sampled_from(sorted(form)), min_size=1, max_size=2)):
        if name == "csrfmiddlewaretoken":
            continue
        choices = form[name] if len(form[name]) > 1 else []
        sent[name] = [
            draw(st.one_of(FORM_VALUES, *([st.sampled_from(choices)] if choices else [])))
        ]
    return sent


@pytest.fixture
def tally() -> Iterator[Tally]:
    with tallied() as found:
        yield found


def fuzz(client: Client, tally: Tally, route: str, url: str, page: Page) -> None:
    names = sorted(page.parameters | set(ADMIN_PARAMETERS))

    @given(query=queries(names))
    @settings(max_examples=QUERY_EXAMPLES, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    def get(query: str) -> None:
        response = client.generic("GET", url, QUERY_STRING=query)
        tally.record(route, "GET", f"{url}?{query}", None, response.status_code)

    get()
    for form in page.forms:
        token = client.cookies["csrftoken"].value
        fuzz_form(client, tally, route, url, {**form, "csrfmiddlewaretoken": [token]})


def fuzz_form(
    client: Client, tally: Tally, route: str, url: str, form: dict[str, list[str]]
) -> None:
    @given(fields=posts(form))
    @settings(max_examples=min(MAX_FORM_EXAMPLES, PER_FIELD * len(form)), deadline=None,
              database=None, suppress_health_check=list(HealthCheck))  # fmt: skip
    def post(fields: dict[str, list[str]]) -> None:
        body = encoded(fields)
        response = client.generic(
            "POST", url, body, content_type="application/x-www-form-urlencoded"
        )
        hostile = {k: v[0][:200] for k, v in fields.items() if v != form[k][:1]}
        tally.record(route, "POST", url, hostile, response.status_code)

    post()


def test_admin__hostile_requests_never_answer_5xx(superuser, rows, tally, capsys):
    # One test for every page: one database to set up and flush, not one per page.
    for route, _ in PAGES:
        url = page_url(route, rows)
        fuzz(superuser, tally, route, url, read(superuser, url))
        for value in ("\x00", "\ud800", "9" * 400, "-1", "x" * 3000):  # the object's id, hostile
            if "<" in route:
                bad = page_url(route, rows, object_id=path_value(value), job_id=path_value(value))
                tally.record(route, "GET", bad, None, superuser.get(bad).status_code)
    with capsys.disabled():
        print(f"\nadmin fuzz, {len(PAGES)} pages: {tally.report().splitlines()[0]}")
    assert not tally.failures, tally.report()
