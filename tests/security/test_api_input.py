"""Hostile input to the REST API over real HTTP: every refusal a 4xx in the error shape, never a 5xx.

Each case here answered 500 once (issue 9, "Trust boundaries"): control characters
in the Authorization header, JSON nested past the depth limit, lone surrogates,
numbers past their range in the query string, datetimes past what UTC can hold.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from django_strait.models import Job
from tests.integration.factories import make_job

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
