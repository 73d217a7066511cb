"""Hostile input to the REST API over real HTTP: every refusal a 4xx in the error shape, never a 5xx.

Each case here answered 500 once (issue 9, "Trust boundaries"): control characters
in the Authorization header, JSON nested past the depth limit, lone surrogates,
numbers past their range in the query string, datetimes past what UTC can hold.
"""

from __future__ import annotations

import base64
import json
from typing import Any
from urllib.parse import quote

import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from django_strait.models import Job, JobRun
from django_strait.rules.json_text import MAX_DEPTH
from tests.integration.factories import make_job, make_run

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def job() -> Job:
    return make_job("nightly")


def nested(depth: int) -> str:
    """Return JSON text nesting ``depth`` levels of alternating objects and arrays around 1."""
    opening = "".join('{"a": ' if level % 2 else "[" for level in range(depth))
    closing = "".join("}" if level % 2 else "]" for level in reversed(range(depth)))
    return opening + "1" + closing


def cursor_of(text: str) -> str:
    """Return ``text`` as the API encodes a cursor (base64url of JSON, unpadded)."""
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def assert_refused(answer, status: int, code: str, field: str | None = None) -> dict[str, Any]:
    """Check the status and the error shape; return the error."""
    assert answer.status == status, answer.body[:500]
    error = answer.error
    assert error["code"] == code, error
    if field is not None:
        assert list(error["details"]) == [field], error
        assert error["message"].startswith(f"{field}: "), error
    return error


# 1. The Authorization header


def _token() -> str:
    return Token.objects.create(user=User.objects.create_user("reader")).key


@pytest.mark.parametrize(
    "header",
    [
        b"Api-Key \x00",
        b"Api-Key abc\x00def.secret",
        b"Api-Key {key}\x00",
        b"Api-Key \x00{key}",
        b"Token \x00",
        b"Token {token}\x00",
        b"Token abc\x00def",
        b"Api-Key ab\x01cd.ef",
        b"Api-Key abcd.e\x1ff",
        b"Token abc\x7f",
        b"Token abc\x1b[2J",
        b"Api-Key \xff\xfe.\x80",
        "Api-Key caf\u00e9.cl\u00e9".encode(),
        b"Token \xe9\xe9",
        "Token \u20ac".encode(),
    ],
    ids=repr,
)
def test_authorization__control_characters_and_non_ascii_are_a_401(wire, header):
    raw = header.replace(b"{key}", wire.key.encode()).replace(b"{token}", _token().encode())

    answer = wire.get("/jobs/", headers={"Authorization": raw}, key=False)

    error = assert_refused(answer, 401, "authentication_failed")
    assert "Authorization" in error["message"]
    assert answer.headers["WWW-Authenticate"] == "Token"


@pytest.mark.parametrize("scheme", ["Api-Key", "Token"])
def test_authorization__a_valid_credential_still_passes(wire, scheme):
    credential = wire.key if scheme == "Api-Key" else _token()
    User.objects.filter(username="reader").update(is_superuser=True)

    answer = wire.get("/jobs/", headers={"Authorization": f"{scheme} {credential}"}, key=False)

    assert answer.status == 200, answer.body


# 2. Nesting and lone surrogates in JSON bodies and cursors


def _failed_run(job: Job, status: str = "failed") -> JobRun:
    return make_run(job, status=status)


BODIES = [
    # (path, body with the deep value at DEEP, the field named)
    ("/jobs/nightly/trigger/", '{"payload": DEEP}', "payload"),
    ("/jobs/nightly/trigger/", '{"queue": "q", "retry": {"initial_delay": DEEP}}', "retry"),
    ("/jobs/nightly/bulk-trigger/", '{"payloads": [1, DEEP]}', "payloads"),
    ("/runs/{run}/replay/", '{"payload": DEEP}', "payload"),
    ("/dead-letters/{dead}/replay/", '{"payload": DEEP}', "payload"),
    ("/jobs/", '{"name": "deep", "handler": "x", "headers": DEEP}', "headers"),
    ("/jobs/nightly/", '{"retry_delays_secs": DEEP}', "retry_delays_secs"),
    ("/dead-letters/replay/", '{"job": DEEP}', "job"),
]


def _path(path: str, job: Job) -> str:
    if "{run}" in path:
        return path.format(run=_failed_run(job).pk)
    if "{dead}" in path:
        return path.format(dead=_failed_run(job, "dead_letter").pk)
    return path


@pytest.mark.parametrize("depth", [MAX_DEPTH, 320, 1000, 100_000])  # the body adds a level
@pytest.mark.parametrize(("path", "body", "field"), BODIES, ids=[b[0] + b[2] for b in BODIES])
def test_json_body__nested_past_the_limit_is_a_400_naming_the_field(
    wire, job, path, body, field, depth
):
    method = "PATCH" if path == "/jobs/nightly/" else "POST"

    answer = wire.send(method, _path(path, job), body=body.replace("DEEP", nested(depth)))

    error = assert_refused(answer, 400, "invalid", field)
    assert f"at most {MAX_DEPTH} levels" in error["message"]
    assert not JobRun.objects.filter(status="queued").exists()


def test_json_body__nested_as_deep_as_the_limit_is_accepted(wire, job):
    payload = nested(MAX_DEPTH - 1)  # the body object is the first level

    answer = wire.post("/jobs/nightly/trigger/", f'{{"payload": {payload}}}')

    assert answer.status == 202, answer.body
    assert JobRun.objects.get().payload == json.loads(payload)


def test_json_body__a_body_that_is_only_brackets_is_a_400_naming_the_body(wire, job):
    answer = wire.post("/jobs/nightly/trigger/", "[" * 2_000_000)

    error = assert_refused(answer, 400, "invalid", "body")
    assert f"at most {MAX_DEPTH} levels" in error["message"]


def test_json_body__brackets_inside_strings_do_not_count(wire, job):
    payload = {"text": "[{" * 5000, "quote": 'say "[[[" \\ [[['}

    answer = wire.post("/jobs/nightly/trigger/", {"payload": payload})

    assert answer.status == 202, answer.body
    assert JobRun.objects.get().payload == payload


SURROGATES = [
    ("/jobs/nightly/trigger/", '{"payload": "\\ud800"}', "payload"),
    ("/jobs/nightly/trigger/", '{"payload": {"a": ["x", "y\\ud800"]}}', "payload"),
    ("/jobs/nightly/trigger/", '{"payload": {"\\ud800": 1}}', "payload"),
    ("/jobs/nightly/trigger/", '{"payload": "\\udc00\\ud800"}', "payload"),
    ("/jobs/nightly/trigger/", '{"idempotency_key": "k\\ud800"}', "idempotency_key"),
    ("/jobs/nightly/trigger/", '{"queue": "\\ud800"}', "queue"),
    ("/jobs/nightly/trigger/", '{"\\ud800": 1}', "body"),
    ("/jobs/nightly/bulk-trigger/", '{"payloads": [1, "\\ud800"]}', "payloads"),
    ("/jobs/nightly/bulk-trigger/", '{"payloads": [1], "idempotency_keys": ["\\ud800"]}', "idempotency_keys"),
    ("/jobs/", '{"name": "s", "handler": "x", "headers": {"X-A": "\\ud800"}}', "headers"),
    ("/jobs/", '{"name": "\\ud800", "handler": "x"}', "name"),
    ("/runs/{run}/replay/", '{"payload": ["\\ud800"]}', "payload"),
    ("/dead-letters/replay/", '{"queue": ["\\ud800"]}', "queue"),
    ("/dead-letters/{dead}/discard/", '{"reason": "\\ud800"}', "reason"),
    ("/circuits/reset/", '{"endpoint_url": "http://a/\\ud800"}', "endpoint_url"),
]  # fmt: skip


@pytest.mark.parametrize(("path", "body", "field"), SURROGATES, ids=[s[1] for s in SURROGATES])
def test_json_body__a_lone_surrogate_is_a_400_naming_the_field(wire, job, path, body, field):
    answer = wire.post(_path(path, job), body)

    error = assert_refused(answer, 400, "invalid", field)
    assert "surrogate" in error["message"]
    assert not JobRun.objects.filter(status="queued").exists()
    assert list(Job.objects.values_list("name", flat=True)) == ["nightly"]


def test_json_body__a_surrogate_pair_is_one_character_and_accepted(wire, job):
    answer = wire.post(
        "/jobs/nightly/trigger/", '{"payload": {"\\ud83d\\ude00": "\\ud83d\\ude00"}}'
    )

    assert answer.status == 202, answer.body
    assert JobRun.objects.get().payload == {"\U0001f600": "\U0001f600"}


@pytest.mark.parametrize(
    "text",
    [
        '"\\ud800"',
        '"a\\udfff"',
        "[" * 5000 + "]" * 5000,
        "[" * 100 + "1" + "]" * 100,
        '{"a": ' * 400 + "1" + "}" * 400,
        "1" * 5000,
        "-" + "9" * 5000,
        "1e999",
    ],
    ids=lambda t: t[:20],
)
@pytest.mark.parametrize("path", ["/jobs/", "/runs/", "/dead-letters/", "/circuits/", "/budgets/"])
def test_cursor__nested_surrogate_or_out_of_range_is_a_400_naming_cursor(wire, job, path, text):
    answer = wire.get(f"{path}?cursor={cursor_of(text)}")

    assert_refused(answer, 400, "invalid", "cursor")


# 3. Numbers in the query string


@pytest.mark.parametrize(
    ("path", "name", "allowed"),
    [
        ("/jobs/", "limit", "from 1 to 500"),
        ("/runs/", "limit", "from 1 to 500"),
        ("/health/", "limit", "from 1 to 500"),
        ("/budgets/", "limit", "from 1 to 500"),
        ("/budgets/billing/", "days", "from 1 to 90"),
    ],
)
@pytest.mark.parametrize(
    "value",
    [
        "1" * 5000,
        "9" * 19,
        "%D9%A1",  # ARABIC-INDIC DIGIT ONE
        "%EF%BC%95",  # FULLWIDTH DIGIT FIVE
        "%C2%B2",  # SUPERSCRIPT TWO
        "0",
        "-1",
        "+5",
        "5.0",
        "1e2",
        "%205",
        "",
    ],
)
def test_integer_parameter__only_ascii_digits_in_range(wire, job, path, name, allowed, value):
    from django_strait.models import Project

    Project.objects.create(name="billing", daily_budget=10)

    answer = wire.get(f"{path}?{name}={value}")

    error = assert_refused(answer, 400, "invalid", name)
    assert allowed in error["message"] and "ASCII digits" in error["message"]
    assert len(error["message"]) < 300


@pytest.mark.parametrize(("path", "name"), [("/jobs/", "limit"), ("/budgets/billing/", "days")])
def test_integer_parameter__leading_zeros_are_digits(wire, job, path, name):
    from django_strait.models import Project

    Project.objects.create(name="billing", daily_budget=10)

    assert wire.get(f"{path}?{name}=0005").status == 200


def test_content_length__of_thousands_of_digits_is_a_413(wire, job):
    answer = wire.send(
        "POST",
        "/jobs/nightly/trigger/",
        headers={"Content-Type": "application/json", "Content-Length": "9" * 5000},
    )

    assert_refused(answer, 413, "payload_too_large")


# 4. Datetimes past what UTC (or the API's range) holds

EXTREMES = [
    "9999-12-31T23:59:59-14:00",
    "0001-01-01T00:00:00+14:00",
    "9999-12-31T23:59:59Z",
    "0001-01-01T00:00:00Z",
    "1999-12-31T23:59:59Z",
    "2\uff10\uff13\uff10-01-01T00:00:00Z",  # fullwidth digits
]


@pytest.mark.parametrize("value", EXTREMES)
@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/jobs/nightly/trigger/", lambda v: {"run_at": v}),
        ("/jobs/nightly/bulk-trigger/", lambda v: {"payloads": [1, 2], "run_at": v}),
    ],
    ids=["trigger", "bulk-trigger"],
)
def test_run_at__out_of_range_is_a_400_naming_run_at(wire, job, path, body, value):
    answer = wire.post(path, body(value))

    error = assert_refused(answer, 400, "invalid", "run_at")
    assert "from 2000-01-01T00:00:00Z" in error["message"]
    assert "3650 days" in error["message"]
    assert not JobRun.objects.exists()


def test_run_at__the_edges_of_the_range_are_accepted(wire, job):
    import datetime as dt

    from django.utils import timezone

    latest = (timezone.now() + dt.timedelta(days=3649)).isoformat()
    for value in ("2000-01-01T00:00:00Z", "2000-01-01T01:00:00+01:00", latest):
        answer = wire.post("/jobs/nightly/trigger/", {"run_at": value})
        assert answer.status == 202, (value, answer.body)


@pytest.mark.parametrize("value", EXTREMES[:2] + EXTREMES[-1:])
@pytest.mark.parametrize("field", ["created_after", "created_before"])
def test_bulk_replay__datetimes_past_utc_are_a_400_naming_them(wire, job, field, value):
    _failed_run(job, "dead_letter")

    answer = wire.post("/dead-letters/replay/", {field: value})

    error = assert_refused(answer, 400, "invalid", field)
    assert "ISO 8601" in error["message"]
    assert not JobRun.objects.filter(status="queued").exists()


@pytest.mark.parametrize("value", EXTREMES[:2] + EXTREMES[-1:])
@pytest.mark.parametrize("field", ["created_after", "created_before"])
def test_run_filters__datetimes_past_utc_are_a_400_naming_them(wire, job, field, value):
    answer = wire.get(f"/runs/?{field}={quote(value, safe='')}")

    assert_refused(answer, 400, "invalid", field)


# Paths


@pytest.mark.parametrize(
    "path", ["/jobs/a%0A/b/", "/%0A", "/nope%0D%0A/", "/jobs/%2F%0A/trigger/x/"]
)
def test_unknown_path__with_a_newline_is_a_json_404(wire, path):
    answer = wire.get(path)

    assert_refused(answer, 404, "not_found")
