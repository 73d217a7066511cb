"""The rules for a job's own HTTP headers: which names are ours, and what may be sent.

Pure: ``Job.clean`` (every write path), the worker's check of a stored row and
the dispatcher's last check before a call all apply these, and none of them
needs the HTTP client to do so.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["header_problems", "is_reserved_header", "unsendable_header"]

#: Names a job's own headers may not set: Strait's own, and the ones that frame the
#: body (a wrong Content-Length or Transfer-Encoding would corrupt the request).
_RESERVED_HEADERS = frozenset(
    {"content-type", "content-length", "transfer-encoding", "accept-encoding", "idempotency-key"}
)
_RESERVED_PREFIX = "strait-"


def is_reserved_header(name: str) -> bool:
    """Tell whether a job may not set header ``name`` (django-strait sets it)."""
    lowered = name.lower()
    return lowered in _RESERVED_HEADERS or lowered.startswith(_RESERVED_PREFIX)


#: Bounds of a job's own headers (docs/http-jobs.md): what endpoints and proxies accept.
MAX_HEADERS = 50
MAX_HEADER_NAME_CHARS = 100
MAX_HEADER_VALUE_BYTES = 8192

#: RFC 9110 §5.6.2: a field name is a token.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_NAME_RULE = f"1-{MAX_HEADER_NAME_CHARS} letters, digits and !#$%&'*+-.^_`|~ (an RFC 9110 token)"
_VALUE_RULE = (
    f"text without control characters (a tab is allowed), at most {MAX_HEADER_VALUE_BYTES} bytes"
)
#: Control characters (Unicode's Cc: C0, DEL, C1) but tab, and lone surrogates, which no
#: UTF-8 request can carry.
_FORBIDDEN_IN_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\ud800-\udfff]")
_CONTROL_NAMES = {0: "NUL", 10: "LF", 13: "CR"}
_JSON_TYPES = {bool: "true or false", int: "a number", float: "a number", list: "a list"}


def header_problems(headers: object) -> list[str]:
    """Return what is wrong with a job's ``headers``, each naming the header and what is allowed."""
    problems = _header_form_problems(headers)
    if problems or not isinstance(headers, Mapping):
        return problems
    reserved = sorted(name for name in headers if is_reserved_header(name))
    if not reserved:
        return []
    return [
        f"{', '.join(reserved)}: set by django-strait on every request (Content-Type, "
        "Content-Length, Transfer-Encoding, Accept-Encoding, Idempotency-Key and Strait-*); "
        "remove them."
    ]


def unsendable_header(headers: object) -> str | None:
    """Return why a job's ``headers`` cannot be sent, or None; reserved names are left out."""
    problems = _header_form_problems(headers)
    return problems[0] if problems else None


def _header_form_problems(headers: object) -> list[str]:
    if not isinstance(headers, Mapping):
        return [f"an object of header name -> string value; got {_json_type(headers)}"]
    problems = [
        problem
        for name, value in headers.items()
        if (problem := _name_problem(name) or _value_problem(name, value))
    ]
    if len(headers) > MAX_HEADERS:
        problems.append(f"{len(headers)} headers; allowed: at most {MAX_HEADERS}")
    return problems + _repeated_names(headers)


def _shown(name: object) -> str:
    text = str(name)
    return repr(text[:60]) + ("..." if len(text) > 60 else "")


def _name_problem(name: object) -> str | None:
    if isinstance(name, str) and len(name) <= MAX_HEADER_NAME_CHARS and _TOKEN.fullmatch(name):
        return None
    return f"header {_shown(name)}: not a header name; allowed: {_NAME_RULE}"


def _value_problem(name: str, value: object) -> str | None:
    if not isinstance(value, str):
        return f"header {_shown(name)}: the value is {_json_type(value)}; allowed: a string"
    if bad := _FORBIDDEN_IN_VALUE.search(value):
        where = f"{_character_name(bad.group())} at character {bad.start() + 1}"
        return f"header {_shown(name)}: the value has {where}; allowed: {_VALUE_RULE}"
    size = len(value.encode("utf-8"))
    if size > MAX_HEADER_VALUE_BYTES:
        return (
            f"header {_shown(name)}: the value is {size} bytes; "
            f"allowed: at most {MAX_HEADER_VALUE_BYTES} bytes"
        )
    return None


def _character_name(char: str) -> str:
    code = ord(char)
    if 0xD800 <= code <= 0xDFFF:
        return f"a lone surrogate (U+{code:04X})"
    named = _CONTROL_NAMES.get(code)
    return f"{named} (U+{code:04X})" if named else f"U+{code:04X}"


def _repeated_names(headers: Mapping[object, object]) -> list[str]:
    seen: dict[str, str] = {}
    problems = []
    for name in headers:
        if not isinstance(name, str):
            continue
        first = seen.setdefault(name.lower(), name)
        if first != name:
            problems.append(
                f"headers {_shown(first)} and {_shown(name)} are one header "
                "(names ignore case); allowed: one of them"
            )
    return problems


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    return _JSON_TYPES.get(type(value), f"a {type(value).__name__}")
