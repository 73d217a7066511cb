"""JSON text from outside, read within bounds: what every surface (REST, OJS, admin) takes.

A document is refused (``JSONRefused``, naming the top-level field at fault and
where in it) when it nests deeper than :data:`MAX_DEPTH`, holds a lone UTF-16
surrogate (``"\\ud800"``: no UTF-8 text or PostgreSQL column can store it), the NUL
character (``"\\u0000"``: PostgreSQL stores it in no text or jsonb), or a number
past a 64-bit float's range (``1e999``, a 400-digit integer, ``NaN``). Pure: no
Django, no database.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Iterator
from itertools import accumulate
from typing import Any

#: The deepest a JSON document may nest arrays and objects; the outermost one is level 1.
#: Deep enough for any payload, shallow enough that nothing that walks a document (the
#: json module, DRF, the database driver) comes near Python's recursion limit.
MAX_DEPTH = 64
#: The largest magnitude of a JSON number (a 64-bit float's); past it is refused.
MAX_NUMBER = sys.float_info.max


class JSONRefused(ValueError):
    """Well-formed JSON that is not taken; ``field`` is the top-level field at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def loads(text: str) -> Any:
    """Parse JSON text; raise ``JSONRefused`` past the depth, for a lone surrogate, NUL or huge number.

    The depth is measured on the text before parsing, so the parser never recurses
    past it. Numbers are checked while parsing when the text has one that may be
    huge; strings are searched when it has a surrogate or NUL escape (JSON text can
    hold neither character otherwise). Only a fault found is looked for again, with
    its path, to name where it is.
    """
    structure = _outside_strings(text)
    _refuse_depth(structure, text)
    numbers = _Numbers()
    hooks = {"parse_int": numbers.read_int, "parse_float": numbers.read_float}
    huge = _HUGE_EXPONENT.search(structure) or _HUGE_DIGITS.search(structure)
    value = json.loads(text, parse_constant=numbers.out_of_range, **(hooks if huge else {}))
    if numbers.found or _has_lone_surrogate(text, value) or _NUL_ESCAPE in text:
        _refuse_faults(value)
    return value


# Depth, from the text: the brackets outside strings, as a running count.

_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
#: A string, or the rest of the text after an unterminated one (possessive: linear time).
_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+"?', re.DOTALL)
_TOKEN = re.compile(rf"{_STRING.pattern}|[\[\]{{}}]", re.DOTALL)


def _refuse_depth(structure: str, text: str) -> None:
    brackets = _NOT_BRACKET.sub("", structure)
    deepest = max(accumulate(map(_STEP.__getitem__, brackets)), default=0)
    if deepest > MAX_DEPTH:
        raise JSONRefused(
            _deep_field(text),
            f"nests arrays and objects {deepest} levels deep; at most {MAX_DEPTH} levels "
            "are allowed (the outermost is level 1)",
        )


def _outside_strings(text: str) -> str:
    """Return the text outside its strings (and after an unterminated one, nothing)."""
    # Escaped backslashes, then escaped quotes, go first: every quote left delimits a string.
    unescaped = text.replace("\\\\", "").replace('\\"', "")
    return "".join(unescaped.split('"')[::2])


def _deep_field(text: str) -> str:
    """Return the top-level field whose value goes past the depth (``body`` if none)."""
    depth, key = 0, None
    for token in _tokens(text):
        if token[0] == '"':
            key = token if depth == 1 else key
            continue
        depth += _STEP[token]
        if depth > MAX_DEPTH:
            break
    if not text.lstrip().startswith("{") or key is None:
        return "body"
    try:
        return _field_name(json.loads(key))
    except ValueError:  # an unterminated string: the text is not JSON either
        return "body"


def _tokens(text: str) -> Iterator[str]:
    return (m.group() for m in _TOKEN.finditer(text))


def _field_name(key: str) -> str:
    """Return ``key`` if it can name a field in an answer, else ``body``."""
    return key if key.isprintable() and not _SURROGATE_CHAR.search(key) else "body"


# Numbers past a float's range and lone surrogates: marked while parsing, then found.

#: An exponent of 3+ digits or a 309+ digit run: a number that may be past a float's range.
_HUGE_EXPONENT = re.compile(r"[eE][+-]?[0-9]{3}")
_HUGE_DIGITS = re.compile(r"(?<![0-9])[0-9]{309}")
#: The escape of a UTF-16 surrogate, paired or not.
_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE_CHAR = re.compile("[\ud800-\udfff]")
_NUL = "\x00"
_NUL_ESCAPE = "\\u0000"
_INT_DIGITS = len(str(int(MAX_NUMBER)))


class _OutOfRange(str):
    """A number (or NaN, Infinity) the API does not take, kept as its text until found."""


class _Numbers:
    """Parse hooks that mark the numbers past a float's range instead of reading them."""

    def __init__(self) -> None:
        self.found = False

    def out_of_range(self, text: str) -> _OutOfRange:
        self.found = True
        return _OutOfRange(text)

    def read_int(self, text: str) -> int | _OutOfRange:
        if len(text.lstrip("-")) > _INT_DIGITS:  # before int(), which is slow on long text
            return self.out_of_range(text)
        value = int(text)
        return value if abs(value) <= MAX_NUMBER else self.out_of_range(text)

    def read_float(self, text: str) -> float | _OutOfRange:
        value = float(text)
        return value if math.isfinite(value) else self.out_of_range(text)


def _has_lone_surrogate(text: str, value: Any) -> bool:
    # A pair is parsed into one character; any surrogate left in the value is lone.
    return bool(_SURROGATE.search(text)) and bool(
        _SURROGATE_CHAR.search(json.dumps(value, ensure_ascii=False))
    )


def _refuse_faults(value: Any) -> None:
    """Raise ``JSONRefused`` for the first out-of-range number or lone surrogate in ``value``."""
    for path, item in _walk(value):
        fault = _fault(item)
        if fault is not None:
            field = _field_name(path[0]) if path and isinstance(path[0], str) else "body"
            what, allowed = fault
            raise JSONRefused(field, f"{what} at {_location(path)}; allowed: {allowed}")


def _walk(value: Any) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """Yield every value and object key with its path, without recursing."""
    stack: list[tuple[tuple[Any, ...], Any]] = [((), value)]
    while stack:
        path, item = stack.pop()
        yield path, item
        if isinstance(item, dict):
            for key, child in reversed(item.items()):
                yield (*path, key), _Key(key)
                stack.append(((*path, key), child))
        elif isinstance(item, list):
            stack.extend(((*path, i), child) for i, child in reversed(list(enumerate(item))))


class _Key(str):
    """An object key, checked as the strings are."""


def _fault(item: Any) -> tuple[str, str] | None:
    """Return what is wrong with ``item`` and what is allowed, or None."""
    if isinstance(item, _OutOfRange):
        shown = item if len(item) <= 30 else f"{item[:30]}..."
        return (
            f"has the number {shown}, past the range",
            f"numbers from -{MAX_NUMBER:.6g} to {MAX_NUMBER:.6g} (not NaN or Infinity)",
        )
    if isinstance(item, str) and (found := _SURROGATE_CHAR.search(item)):
        return (
            f"has a lone surrogate ({ascii(found.group())[1:-1]}) "
            + ("in an object key" if isinstance(item, _Key) else "in a string"),
            "Unicode text, where a surrogate escape comes only as half of a pair",
        )
    if isinstance(item, str) and _NUL in item:
        return (
            "has the NUL character (\\u0000) "
            + ("in an object key" if isinstance(item, _Key) else "in a string"),
            "text without NUL (no PostgreSQL text or jsonb holds it)",
        )
    return None


def _location(path: tuple[Any, ...]) -> str:
    """Return ``path`` as ``payload.items[2]["odd key"]``."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", part):
            text += f".{part}" if text else part
        else:
            text += f"[{json.dumps(part)}]"
    return text or "the top level"
