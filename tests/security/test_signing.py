"""``verify`` reads a header from anyone: for any text it answers a bool and never raises.

So does the few-line ``verify`` that docs/http-jobs.md gives to endpoints outside Django.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from django_strait.dispatch.signing import MAX_TIMESTAMP_DIGITS, sign, verify

SECRET = "whsec-test"
BODY = b'{"run_id":7}'
NOW = 1_700_000_000
DIGEST = sign(SECRET, BODY, NOW).split("v1=")[1]
DOCS = Path(__file__).resolve().parents[2] / "docs" / "http-jobs.md"


def docs_verify() -> Callable[..., bool]:
    """Return the ``verify`` of docs/http-jobs.md's code block for endpoints outside Django."""
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(), re.DOTALL)
    (code,) = [b for b in blocks if "def verify(" in b]
    namespace: dict = {}
    exec(code, namespace)  # the documentation's own text, run as a reader would
    return namespace["verify"]


#: Headers shaped like a signature, with hostile parts: long or odd timestamps, odd digits.
TIMESTAMPS = (
    st.integers(min_value=0, max_value=10**600).map(str)
    | st.text(alphabet="0123456789\u0661\u00b2\uff15-+. e", max_size=40)
    | st.text(max_size=20)
)
SIGNATURE_SHAPED = st.builds(
    lambda t, v, extra: f"t={t},v1={v}{extra}",
    TIMESTAMPS,
    st.just(DIGEST) | st.text(max_size=70),
    st.text(alphabet=",=tv1 \x00\ud800", max_size=10),
)
HEADERS = st.text() | SIGNATURE_SHAPED


@settings(max_examples=500, deadline=None)
@given(header=HEADERS, now=st.integers(0, 2**40) | st.floats(allow_nan=False))
def test_verify__any_text_is_a_bool_and_never_raises(header, now):
    assert verify(SECRET, BODY, header, now=now) in (True, False)


@settings(max_examples=300, deadline=None)
@given(header=HEADERS)
def test_docs_verify__any_text_is_a_bool_and_never_raises(header):
    assert docs_verify()(SECRET, BODY, header) in (True, False)


@pytest.mark.parametrize("digits", [MAX_TIMESTAMP_DIGITS + 1, 20, 309, 400, 4301, 10_000])
def test_verify__a_timestamp_of_too_many_digits_is_false(digits):
    header = f"t={'9' * digits},v1={DIGEST}"

    assert verify(SECRET, BODY, header, now=NOW) is False
    assert docs_verify()(SECRET, BODY, header) is False


@pytest.mark.parametrize(
    "header",
    [
        f"t={NOW},v1={DIGEST},t={'1' * 400}",
        f"t=0{'0' * 20}{NOW},v1={DIGEST}",
        f"t=\u0661\u0667\u0660\u0660,v1={DIGEST}",
        f"t={NOW}\x00,v1={DIGEST}",
        f"t={NOW},v1={DIGEST}\ud800",
        f"t={NOW},v1=\ud800",
        "t",
        "=,=,=",
        ",,,,",
        "t=,v1=",
        "\ud800",
        "\x00" * 100,
    ],
)
def test_verify__malformed_headers_are_false(header):
    assert verify(SECRET, BODY, header, now=NOW) is False
    assert docs_verify()(SECRET, BODY, header) is False


@pytest.mark.parametrize("header", [None, 5, b"t=1700000000,v1=abc", ["t=1"]])
def test_verify__a_header_that_is_not_text_is_false(header):
    assert verify(SECRET, BODY, header, now=NOW) is False


def test_docs_verify__accepts_what_sign_writes():
    import time

    now = int(time.time())

    assert docs_verify()(SECRET, BODY, sign(SECRET, BODY, now)) is True
    assert docs_verify()(SECRET, BODY + b" ", sign(SECRET, BODY, now)) is False
