"""Failed authentication is throttled per client address and key prefix; a valid
credential always passes. The schema is throttled per address.

DRF authenticates before it throttles and stops at a failed authentication, so
guessing keys was free: 650 wrong keys from one address never met a 429. Then the
throttle refused an address over the rate before authenticating: 30 bad attempts
from behind a shared NAT locked every valid key there out for 60 s.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from django_strait.api.auth import issue_key

pytestmark = pytest.mark.django_db(transaction=True)

WRONG_KEY = "Api-Key AAAAAAAAAAAA.wrong-secret"
STRAIT = {"ALLOWED_PRIVATE_NETWORKS": ["127.0.0.0/8", "::1/128"]}


@pytest.fixture
def rate(settings):
    """Set ``API_AUTH_FAILURE_THROTTLE_RATE`` (and the other rates) for the test."""

    def set_rate(failures: str | None, **others: str | None) -> None:
        settings.STRAIT = {**STRAIT, "API_AUTH_FAILURE_THROTTLE_RATE": failures, **others}

    return set_rate


def wrong(wire, n: int, authorization: str | bytes = WRONG_KEY, **headers) -> list[int]:
    """Send ``n`` requests with bad credentials; return their statuses."""
    return [
        wire.get("/jobs/", headers={"Authorization": authorization, **headers}, key=False).status
        for _ in range(n)
    ]


def test_failed_authentication__past_the_default_rate_is_a_429_with_retry_after(wire):
    assert wrong(wire, 30) == [401] * 30  # the default: 30/minute

    answer = wire.get("/jobs/", headers={"Authorization": WRONG_KEY}, key=False)

    assert answer.status == 429
    assert answer.error["code"] == "throttled"
    assert "API_AUTH_FAILURE_THROTTLE_RATE" in answer.error["message"]
    assert 1 <= int(answer.headers["Retry-After"]) <= 60


def test_failed_authentication__a_valid_key_passes_from_an_address_over_the_rate(wire, rate):
    # Another client behind the same NAT keeps sending a broken key.
    rate("5/minute")
    assert wrong(wire, 6) == [401] * 5 + [429]

    assert wire.get("/jobs/").status == 200
    assert wire.post("/jobs/x/trigger/", {}).status == 404  # authenticated: the job is unknown
    assert wrong(wire, 1) == [429]  # and the good key reset nothing


def test_failed_authentication__guesses_at_one_key_count_from_every_address(rate):
    rate("3/minute")
    row, key = issue_key("target", ["*"])
    client = APIClient()

    def get(address: str, authorization: str) -> Any:
        return client.get(
            "/api/strait/jobs/", HTTP_AUTHORIZATION=authorization, REMOTE_ADDR=address
        )

    guesses = [get(f"10.0.0.{n}", f"Api-Key {row.prefix}.not-the-secret") for n in range(1, 5)]
    good = get("10.0.0.9", f"Api-Key {key}")
    other_key = get("10.0.0.9", WRONG_KEY)

    # Each address failed once; the key's prefix four times.
    assert [answer.status_code for answer in guesses] == [401, 401, 401, 429]
    assert "with this key" in guesses[-1].json()["error"]["message"]
    assert (good.status_code, other_key.status_code) == (200, 401)


@pytest.mark.parametrize(
    "authorization",
    [WRONG_KEY, "Token 0123456789abcdef0123456789abcdef01234567", b"Api-Key \x00", "Api-Key a b"],
    ids=["key", "token", "nul", "two-parts"],
)
def test_failed_authentication__every_kind_of_failure_counts(wire, rate, authorization):
    rate("3/minute")

    assert wrong(wire, 4, authorization) == [401, 401, 401, 429]


def test_failed_authentication__kinds_of_failure_count_together(wire, rate):
    rate("4/minute")

    statuses = wrong(wire, 2) + wrong(wire, 2, "Token nope") + wrong(wire, 1, b"Token \x01")

    assert statuses == [401, 401, 401, 401, 429]


def test_failed_authentication__a_revoked_key_counts(wire, rate):
    from django_strait.api.auth import revoke_key

    rate("2/minute")
    row, key = issue_key("old", ["*"])
    revoke_key(row.prefix)

    assert wrong(wire, 3, f"Api-Key {key}") == [401, 401, 429]


def test_failed_authentication__no_credentials_and_good_ones_do_not_count(wire, rate):
    rate("2/minute")

    anonymous = [wire.get("/jobs/", key=False).status for _ in range(5)]
    good = [wire.get("/jobs/").status for _ in range(5)]

    assert anonymous == [401] * 5 and good == [200] * 5
    assert wrong(wire, 3) == [401, 401, 429]


def test_failed_authentication__a_forged_forwarded_for_is_still_the_same_address(wire, rate):
    rate("3/minute")

    statuses = [
        wrong(wire, 1, WRONG_KEY, **{"X-Forwarded-For": f"10.0.0.{n}"})[0] for n in range(4)
    ]

    assert statuses == [401, 401, 401, 429]


def test_failed_authentication__is_counted_by_address(rate):
    rate("2/minute")
    _, key = issue_key("good", ["*"])
    client = APIClient()

    def get(address: str, authorization: str) -> int:
        return client.get(
            "/api/strait/jobs/", HTTP_AUTHORIZATION=authorization, REMOTE_ADDR=address
        ).status_code

    # Wrong keys of other prefixes each time: only the address adds them up.
    first = [get("10.0.0.1", f"Api-Key {n:012d}.wrong") for n in range(3)]
    good = get("10.0.0.1", f"Api-Key {key}")
    other = get("10.0.0.2", "Api-Key 999999999999.wrong")

    assert (first, good, other) == ([401, 401, 429], 200, 401)


def test_failed_authentication__behind_trusted_proxies_the_forwarded_address_counts(rate, settings):
    rate("2/minute")
    settings.REST_FRAMEWORK = {"NUM_PROXIES": 1}
    token = Token.objects.create(user=User.objects.create_superuser("admin")).key
    client = APIClient()

    def get(forwarded: str, authorization: str) -> int:
        return client.get(
            "/api/strait/jobs/",
            HTTP_AUTHORIZATION=authorization,
            HTTP_X_FORWARDED_FOR=forwarded,
            REMOTE_ADDR="10.9.9.9",  # the proxy
        ).status_code

    assert [get("203.0.113.7", "Token nope") for _ in range(3)] == [401, 401, 429]
    assert get("203.0.113.8", f"Token {token}") == 200
    # Not an address: counted as the proxy's (and never a cache key of its own).
    assert [get(f"junk {n}\x01", "Token nope") for n in range(3)] == [401, 401, 429]


def test_failed_authentication__none_turns_it_off(wire, rate):
    rate(None)

    assert set(wrong(wire, 40)) == {401}


def test_schema__is_throttled_per_address(wire, rate):
    rate("30/minute", API_THROTTLE_RATE="3/minute")

    statuses = [wire.get("/schema/", key=False).status for _ in range(4)]
    answer = wire.get("/schema/", key=False)

    assert statuses == [200, 200, 200, 429]
    assert answer.error["code"] == "throttled"
    assert int(answer.headers["Retry-After"]) >= 1


def test_failed_authentication__on_the_ojs_binding_a_valid_bearer_key_passes_too(rate):
    rate("2/minute")
    _, key = issue_key("worker", ["*"])
    client = APIClient()

    def health(authorization: str) -> Any:
        return client.get(
            "/ojs/v1/health", HTTP_AUTHORIZATION=authorization, REMOTE_ADDR="10.0.0.1"
        )

    bad = [health(f"Bearer {n:012d}.wrong").status_code for n in range(3)]
    good = health(f"Bearer {key}")
    throttled = health("Bearer 999999999999.wrong")

    assert (bad, good.status_code) == ([401, 401, 429], 200)
    assert throttled.status_code == 429 and throttled.json()["error"]["code"] == "rate_limited"
    assert 1 <= int(throttled["Retry-After"]) <= 60
