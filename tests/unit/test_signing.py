"""Strait-Signature: what the dispatcher sends and what endpoint authors check."""

from __future__ import annotations

import hashlib
import hmac

from django_strait.dispatch.signing import sign, verify

SECRET = "whsec-test"
BODY = b'{"run_id":7,"job":"mail","attempt":1,"payload":{"to":"a@example.com"}}'
NOW = 1_700_000_000


def test_sign__is_hmac_sha256_of_timestamp_dot_body():
    expected = hmac.new(SECRET.encode(), b"1700000000." + BODY, hashlib.sha256).hexdigest()

    assert sign(SECRET, BODY, NOW) == f"t=1700000000,v1={expected}"


def test_verify__accepts_own_signature():
    assert verify(SECRET, BODY, sign(SECRET, BODY, NOW), now=NOW)


def test_verify__accepts_within_tolerance_either_side():
    header = sign(SECRET, BODY, NOW)

    assert verify(SECRET, BODY, header, now=NOW + 300)
    assert verify(SECRET, BODY, header, now=NOW - 300)


def test_verify__rejects_outside_tolerance():
    header = sign(SECRET, BODY, NOW)

    assert not verify(SECRET, BODY, header, now=NOW + 301)
    assert not verify(SECRET, BODY, header, tolerance=10, now=NOW + 11)


def test_verify__rejects_changed_body():
    header = sign(SECRET, BODY, NOW)

    assert not verify(SECRET, BODY + b" ", header, now=NOW)


def test_verify__rejects_other_secret():
    header = sign("another-secret", BODY, NOW)

    assert not verify(SECRET, BODY, header, now=NOW)


def test_verify__rejects_replayed_signature_with_fresh_timestamp():
    signature = sign(SECRET, BODY, NOW).split(",")[1]

    assert not verify(SECRET, BODY, f"t={NOW + 100},{signature}", now=NOW + 100)


def test_verify__accepts_any_matching_v1_during_secret_rotation():
    old = sign("old-secret", BODY, NOW).split(",")[1]
    new = sign(SECRET, BODY, NOW).split(",")[1]

    assert verify(SECRET, BODY, f"t={NOW},{old},{new}", now=NOW)


def test_verify__rejects_malformed_headers():
    good = sign(SECRET, BODY, NOW)
    digest = good.split("v1=")[1]
    malformed = [
        "",
        "garbage",
        f"v1={digest}",
        f"t={NOW}",
        f"t=abc,v1={digest}",
        f"t=-{NOW},v1={digest}",
        f"t=\u00b2,v1={digest}",
        f"t={NOW},v1=\u00e9\u00e9",
        f"t={NOW},v2={digest}",
    ]

    for header in malformed:
        assert not verify(SECRET, BODY, header, now=NOW), header


def test_verify__rejects_when_secret_is_empty():
    assert not verify("", BODY, sign("", BODY, NOW), now=NOW)


def test_verify__tolerates_spaces_after_commas():
    header = sign(SECRET, BODY, NOW).replace(",", ", ")

    assert verify(SECRET, BODY, header, now=NOW)
