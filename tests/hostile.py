"""Hostile values for the fuzzers: text, numbers, nesting and times no surface may answer 5xx to.

Shared by the REST API's fuzz (``tests/integration/test_api_fuzz.py``) and the OJS
binding's and the admin's (``tests/security/``): NUL, lone surrogates, CR/LF and
other control characters, text of hundreds of thousands of characters, numbers
past every range, JSON nested thousands of levels deep, times past what a
datetime or UTC can hold.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from hypothesis import strategies as st


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
#: In a URL, shorter: the server refuses a request line past 64 KiB (414) before the
#: application sees it, and a path may carry several parameters.
URL_TEXT = hostile_text(400)
HOSTILE_NUMBERS = st.sampled_from(
    [1e308, -1e308, 1.7976931348623157e308, 5e-324, -0.0, 10**400, -(10**400), 2**63,
     -(2**63) - 1, 2**64, 2**31, 10**308, Raw("1e999"), Raw("-1e999"), Raw("1E400"),
     Raw("NaN"), Raw("Infinity"), Raw("-Infinity"), Raw("1" * 5000), Raw("-" + "9" * 400)]
)  # fmt: skip
DEPTHS = [65, 320, 1000, 2000, 5000, 20_000]
DEEP = st.sampled_from(DEPTHS).flatmap(
    lambda depth: st.sampled_from(
        [Raw("[" * depth + "]" * depth), Raw('{"a": ' * depth + "1" + "}" * depth)]
    )
)
#: Times a datetime, UTC or the database cannot hold, in forms a time field reads.
HOSTILE_TIMES = st.sampled_from(
    ["9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59", "9999-12-31T23:59:59.999999-01:00",
     "0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "1969-12-31T23:59:59Z", "infinity",
     "-infinity", "+P99999999Y", "+PT99999999999999999999S", "+PT1e999S", "-PT1S", "PT1S",
     "P99999999D", "2026-02-30T00:00:00Z", "2026-01-01T00:00:00+99:99", "2026-01-01"]
)  # fmt: skip
HOSTILE = st.one_of(
    HOSTILE_TEXT, HOSTILE_NUMBERS, DEEP, HOSTILE_TIMES, st.lists(HOSTILE_TEXT, max_size=3)
)


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


def looks_like_time(value: Any) -> bool:
    """Whether a template's value is a time or a duration (its hostile twins are times)."""
    return isinstance(value, str) and (value[:4].isdigit() or value.lstrip("+").startswith("P"))


def hostile_for(value: Any) -> st.SearchStrategy[Any]:
    """Return hostile values for a part shaped like ``value``: times for a time, and anything."""
    if looks_like_time(value):
        return st.one_of(HOSTILE_TIMES, HOSTILE_TIMES, HOSTILE)
    return HOSTILE


def parts(value: Any, at: tuple = ()) -> list[tuple]:
    """Return the path of every part of ``value`` (objects and arrays too), the whole first."""
    found = [at]
    if isinstance(value, dict):
        for key, child in value.items():
            found += parts(child, (*at, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += parts(child, (*at, index))
    return found


def part(value: Any, at: tuple) -> Any:
    """Return the part of ``value`` at path ``at``."""
    for key in at:
        value = value[key]
    return value


def swapped(value: Any, at: tuple, new: Any) -> Any:
    """Return ``value`` with the part at path ``at`` replaced by ``new``."""
    if not at:
        return new
    head, rest = at[0], at[1:]
    if isinstance(value, dict):
        return {**value, head: swapped(value[head], rest, new)}
    return [swapped(v, rest, new) if i == head else v for i, v in enumerate(value)]


@st.composite
def one_part_hostile(draw: st.DrawFn, value: Any) -> Any:
    """``value`` with one or two of its parts, at any depth, hostile: what reaches deep checks."""
    for _ in range(draw(st.integers(1, 2))):
        at = draw(st.sampled_from(parts(value)))
        value = swapped(value, at, draw(hostile_for(part(value, at))))
    return value


def query_value(text: str) -> bytes:
    """Return ``text`` as the bytes of a query value (a lone surrogate kept as its bytes)."""
    return text.encode("utf-8", "surrogatepass")


def path_value(text: str) -> str:
    """Return ``text`` percent-encoded for a path segment (a lone surrogate kept as its bytes)."""
    return quote(text, safe="", errors="surrogatepass")


def not_dots(text: str) -> bool:
    """Whether ``text`` survives as a path segment: an empty, "." or ".." one is resolved away."""
    return bool(text.strip("."))
