"""A job's own headers are checked where they are written and again before they are sent.

Finding 3 of the trust-boundaries issue: ``{"X-A": "a\\r\\nX-Injected: 1"}`` was
saved, and then every attempt failed inside the HTTP client (a retryable
``dispatch.internal``, retried until the attempts ran out). Names must now be
RFC 9110 tokens, values free of control characters and bounded, and a row that
went around the checks (raw SQL) fails its attempt once with the non-retryable
``http.invalid_header``, naming the header and never its value.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.db import connection
from django.test import override_settings
from django.urls import reverse
from rest_framework.test import APIClient

from django_strait import trigger
from django_strait.api.auth import issue_key
from django_strait.dispatch.http import HttpDispatcher, HttpRequest
from django_strait.models import Job, JobRun
from django_strait.rules.outcome import Kind

STRAIT = {"ALLOWED_PRIVATE_NETWORKS": ["127.0.0.1/32"], "API_THROTTLE_RATE": None}
URL = "https://hooks.example.invalid/x"  # .invalid never resolves, and is never looked up here


def header_errors(headers) -> list[str]:
    """Return the errors Job.clean gives on ``headers`` (none when they are accepted)."""
    try:
        Job(name="hook", endpoint_url=URL, headers=headers).clean()
    except ValidationError as exc:
        return exc.message_dict.get("headers", [])
    return []


def test_job_clean__crlf_in_a_value__refused_naming_the_header_not_the_value():
    (message,) = header_errors({"X-A": "a\r\nX-Injected: 1"})

    assert message.startswith("header 'X-A': the value has CR (U+000D) at character 2; allowed:")
    assert "control characters" in message
    assert "X-Injected" not in message


@pytest.mark.parametrize(
    ("value", "found"),
    [
        ("a\nb", "LF (U+000A) at character 2"),
        ("nul\x00", "NUL (U+0000) at character 4"),
        ("\x01", "U+0001 at character 1"),
        ("del\x7f", "U+007F at character 4"),
        ("next\x85line", "U+0085 at character 5"),
        ("lone \ud800", "a lone surrogate (U+D800) at character 6"),
    ],
)
def test_job_clean__control_character_in_a_value__refused_naming_it(value, found):
    (message,) = header_errors({"X-A": value})

    assert message.startswith(f"header 'X-A': the value has {found}; allowed:")


def test_job_clean__value_past_8192_bytes__refused():
    (message,) = header_errors({"X-Big": "é" * 4097})  # 8194 bytes in UTF-8

    assert message == "header 'X-Big': the value is 8194 bytes; allowed: at most 8192 bytes"


@pytest.mark.parametrize(
    "value", ["", "Bearer abc.def", "a\tb", "héllo wörld ✓", "x" * 8192, " padded "]
)
def test_job_clean__text_values__accepted(value):
    assert header_errors({"X-A": value}) == []


@pytest.mark.parametrize(
    "name", ["", "X A", "X:A", "X-A\r\n", "Äpfel", "X(A)", '"X"', "x/y", "x" * 101, "X-A\x00"]
)
def test_job_clean__name_not_a_token__refused_saying_what_is_allowed(name):
    (message,) = header_errors({name: "v"})

    assert message.startswith(f"header {name[:60]!r}")  # a long name is cut short
    assert ": not a header name; allowed: 1-100 letters, digits and " in message
    assert message.endswith("(an RFC 9110 token)")


@pytest.mark.parametrize("name", ["X-A", "x_a", "!#$%&'*+-.^_`|~09azAZ", "x" * 100])
def test_job_clean__token_names__accepted(name):
    assert header_errors({name: "v"}) == []


def test_job_clean__more_than_50_headers__refused():
    assert header_errors({f"X-{n}": "v" for n in range(50)}) == []
    assert header_errors({f"X-{n}": "v" for n in range(51)}) == ["51 headers; allowed: at most 50"]


def test_job_clean__one_name_twice_in_two_cases__refused():
    assert header_errors({"X-Team": "a", "x-team": "b"}) == [
        "headers 'X-Team' and 'x-team' are one header (names ignore case); allowed: one of them"
    ]


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        (["X-A: 1"], "an object of header name -> string value; got a list"),
        ({"X-A": 1}, "header 'X-A': the value is a number; allowed: a string"),
        ({"X-A": None}, "header 'X-A': the value is null; allowed: a string"),
    ],
)
def test_job_clean__not_an_object_of_strings__refused(headers, message):
    assert header_errors(headers) == [message]


def test_job_clean__reserved_headers__still_refused():
    (message,) = header_errors({"Strait-Run-Id": "1", "Content-Length": "3", "X-Team": "a"})

    assert message.startswith("Content-Length, Strait-Run-Id: set by django-strait")


# Every write path calls Job.clean


@pytest.mark.django_db
@override_settings(STRAIT=STRAIT)
def test_api__crlf_in_a_header__is_a_400_naming_the_header():
    cache.clear()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {issue_key('ops', ['jobs:write'])[1]}")
    body = {"name": "hook", "endpoint_url": URL, "headers": {"X-A": "a\r\nX-Injected: 1"}}

    response = client.post("/api/strait/jobs/", body, format="json")

    assert response.status_code == 400
    (message,) = response.json()["error"]["details"]["headers"]
    assert message.startswith("header 'X-A': the value has CR (U+000D)")
    assert "X-Injected" not in response.content.decode()
    assert not Job.objects.exists()


@pytest.mark.django_db
@override_settings(STRAIT=STRAIT)
def test_admin__crlf_in_a_header__shows_on_the_form(client):
    client.force_login(User.objects.create_superuser("root", password="pw"))
    form = {
        "name": "hook", "queue": "default", "priority": 0, "enabled": "on",
        "endpoint_url": URL, "fallback_endpoint_urls": "[]", "http_method": "POST",
        "headers": json.dumps({"X-A": "a\r\nX-Injected: 1"}), "timeout_secs": 30,
        "retry_delays_secs": "null", "non_retryable_errors": "[]", "timezone": "UTC",
        "schedule_missed": "run_once", "schedule_overlap": "allow",
    }  # fmt: skip

    response = client.post(reverse("admin:django_strait_job_add"), form)

    assert response.status_code == 200
    (message,) = response.context["adminform"].form.errors["headers"]
    assert message.startswith("header 'X-A': the value has CR (U+000D)")
    assert not Job.objects.exists()


# A row written around the checks: the attempt fails once, naming the header


def dispatch_with(headers, url: str):
    async def scenario():
        allowed = (ipaddress.ip_network("127.0.0.1/32"),)
        async with HttpDispatcher(allowed_networks=allowed) as dispatcher:
            req = HttpRequest(
                run_id=1, job="hook", attempt=1, payload={}, url=url, headers=headers, timeout=5
            )
            return await dispatcher.dispatch(req)

    return asyncio.run(scenario())


@pytest.mark.parametrize(
    ("headers", "named"),
    [
        ({"X-A": "a\r\nX-Injected: 1"}, "header 'X-A': the value has CR"),
        ({"X A": "v"}, "header 'X A': not a header name"),
        ({"X-A": "\x00"}, "header 'X-A': the value has NUL"),
        (["X-A: 1"], "an object of header name -> string value"),
    ],
)
def test_dispatch__unsendable_header__fails_without_retry_or_request(http_server, headers, named):
    outcome = dispatch_with(headers, http_server.url("/hook"))

    assert (outcome.kind, outcome.error_type) == (Kind.NON_RETRYABLE, "http.invalid_header")
    assert outcome.error.startswith(f"Cannot send the job's headers: {named}")
    assert "X-Injected" not in outcome.error
    assert http_server.requests == []


def test_dispatch__reserved_header_in_a_row__is_left_out_not_refused(http_server):
    outcome = dispatch_with({"Strait-Run-Id": "999", "X-Team": "a"}, http_server.url("/hook"))

    assert outcome.kind is Kind.SUCCEEDED
    (received,) = http_server.requests
    assert (received.headers["Strait-Run-Id"], received.headers["X-Team"]) == ("1", "a")


@pytest.mark.django_db(transaction=True)
@override_settings(STRAIT=STRAIT)
@pytest.mark.parametrize(
    ("stored", "named"),
    [
        ({"X-A": "a\r\nX-Injected: 1"}, "header 'X-A': the value has CR (U+000D) at character 2"),
        (["X-A: 1"], "an object of header name -> string value; got a list"),
    ],
)
def test_worker__row_with_a_bad_header__holds_its_runs_and_others_run(
    burst, http_server, stored, named
):
    Job.objects.create(name="bad", endpoint_url=http_server.url("/bad"), max_attempts=5)
    Job.objects.create(name="good", endpoint_url=http_server.url("/good"), headers={"X-A": "a"})
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Job._meta.db_table} SET headers = %s WHERE name = 'bad'", [json.dumps(stored)]
        )
    bad, good = trigger("bad", {}), trigger("good", {})

    burst()

    # The worker checks each job row as the write paths do: a bad definition holds its
    # own runs (job.invalid, no attempt spent) until the row is fixed (docs/security.md).
    bad, good = JobRun.objects.get(pk=bad.pk), JobRun.objects.get(pk=good.pk)
    assert (bad.status, bad.error_type, bad.attempt) == ("queued", "job.invalid", 0)
    assert f"headers: {named}" in bad.last_error
    assert "X-Injected" not in bad.last_error
    assert good.status == "completed"
    assert [r.path for r in http_server.requests] == ["/good"]
