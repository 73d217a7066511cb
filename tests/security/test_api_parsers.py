"""``json_text.loads``: JSON past the depth, with lone surrogates, NUL or huge numbers, is refused naming where."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from django_strait.rules.json_text import MAX_DEPTH, JSONRefused, loads

#: Text heavy in what confuses a scanner: brackets, quotes, backslashes, surrogate escapes.
TRICKY_TEXT = st.text(alphabet=st.sampled_from('[]{}"\\,:u d8a0x\U0001f600'), max_size=12)
VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | TRICKY_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TRICKY_TEXT, inner, max_size=3),
    max_leaves=30,
)


def depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    return 0


def nested(levels: int, leaf: Any = 0) -> Any:
    for level in range(levels):
        leaf = [leaf] if level % 2 else {"k": leaf}
    return leaf


@settings(max_examples=300, deadline=None)
@given(value=VALUES, extra=st.integers(0, 3))
def test_loads__reads_back_what_json_writes_within_the_depth(value, extra):
    deep = nested(MAX_DEPTH - depth(value) - extra, value) if depth(value) <= MAX_DEPTH else value

    assert loads(json.dumps(deep)) == deep
    assert loads(json.dumps(deep, ensure_ascii=False)) == deep


@settings(max_examples=100, deadline=None)
@given(value=VALUES, extra=st.integers(1, 500))
def test_loads__refuses_past_the_depth_whatever_the_strings_hold(value, extra):
    deep = nested(MAX_DEPTH + extra, value)

    with pytest.raises(JSONRefused, match=f"at most {MAX_DEPTH} levels"):
        loads(json.dumps(deep))


@pytest.mark.parametrize(
    ("text", "field", "where"),
    [
        ('{"payload": "\\ud800"}', "payload", "at payload"),
        ('{"payload": {"a b": ["\\udfff"]}}', "payload", 'at payload["a b"][0]'),
        ('{"payload": {"\\ud800": 1}}', "payload", "object key at payload"),
        ('{"\\ud800": 1}', "body", "object key at"),
        ('["\\ud800"]', "body", "at [0]"),
        ('"\\ud800"', "body", "at the top level"),
        ('{"queue": "\\ud800\\ud800"}', "queue", "at queue"),
        ('{"retry": {"jitter": 1e400}}', "retry", "1e400, past the range"),
        ('{"retry": {"jitter": -1e400}}', "retry", "-1e400, past the range"),
        ('{"priority": ' + "9" * 400 + "}", "priority", "past the range"),
        ('{"priority": -' + "9" * 5000 + "}", "priority", "past the range"),
        ('{"payload": [NaN]}', "payload", "NaN, past the range"),
        ('{"payload": -Infinity}', "payload", "-Infinity, past the range"),
        (
            '{"options": {"unique": {"key": ["a\\u0000"]}}}',
            "options",
            "NUL character (\\u0000) in a string at options.unique.key[0]",
        ),
        ('{"meta": {"k\\u0000": 1}}', "meta", "NUL character (\\u0000) in an object key at meta"),
    ],
)
def test_loads__names_the_field_and_where(text, field, where):
    with pytest.raises(JSONRefused) as refused:
        loads(text)

    assert refused.value.field == field
    assert where in refused.value.message
    assert refused.value.message.isascii()


@pytest.mark.parametrize(
    "text",
    [
        '"\\ud83d\\ude00"',
        '"\\\\ud800"',
        '{"hex": "3e456", "n": 1e308, "m": -1.7976931348623157e308}',
        "[" + "9" * 308 + "]",
        '{"s": "' + "[" * 1000 + '"}',
        '{"s": "\\"[[[[\\\\"}',
    ],
)
def test_loads__takes_what_is_within_the_rules(text):
    assert loads(text) == json.loads(text)


@pytest.mark.parametrize(
    "text",
    ["[" * 100_000 + '"', '"' + "[" * 100_000, "[" * 50 + '"\\' + "[" * 100_000, '{"a": "\\'],
)
def test_loads__unterminated_text_never_recurses(text):
    with pytest.raises(ValueError):
        loads(text)


def test_loads__takes_an_escaped_backslash_before_u0000_as_text():
    assert loads('{"a": "\\\\u0000"}') == {"a": "\\u0000"}
