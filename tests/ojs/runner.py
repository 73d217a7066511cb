"""A runner for the OJS conformance suite's JSON cases (the suite's own test-case-reference.md).

The suite's own runner is in Go; this one reads the same cases and speaks plain
HTTP to a live server with ``urllib``: steps with their delays, templates
(``{{steps.<id>.response.body.<path>}}``, and names a step's ``capture`` gave), the status forms, JSONPath bodies
with the suite's matchers, ``body_absent``, headers, and the ``ASSERT`` steps.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SUITE = Path(__file__).parent / "suite"
#: The Go runner's default tolerance for ``~value`` and ``approximate``: 50 %, at least 100 ms.
TOLERANCE_PCT = 50
MIN_TOLERANCE = 100
_TEMPLATE = re.compile(r"\{\{steps\.([^.}]+)\.response\.body(?:\.([^}]+))?\}\}")
_MISSING = object()


def cases(*levels: str) -> list[Path]:
    """Return the case files under the given suite directories, sorted."""
    return sorted(p for level in levels for p in (SUITE / level).rglob("*.json"))


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    raw: bytes
    body: Any


@dataclass
class Outcome:
    """What running one case found: each failed assertion, with its step."""

    failures: list[str] = field(default_factory=list)

    def fail(self, step: str, message: str) -> None:
        self.failures.append(f"{step}: {message}")


class Runner:
    """Runs cases against ``base_url`` (``http://127.0.0.1:<port>``)."""

    def __init__(self, base_url: str, sleep: Callable[[float], None] = time.sleep) -> None:
        self.base_url = base_url.rstrip("/")
        self.sleep = sleep

    def run(self, case: dict[str, Any]) -> Outcome:
        outcome = Outcome()
        results: dict[str, Reply] = {}
        captured: dict[str, str] = {}
        for step in case["steps"]:
            self._step(with_captures(step, captured), results, outcome)
            for name, path in (step.get("capture") or {}).items():
                captured[name] = f"steps.{step['id']}.response.body.{path.removeprefix('$.')}"
        return outcome

    def _step(self, step: dict[str, Any], results: dict[str, Reply], outcome: Outcome) -> None:
        action = step["action"]
        wait = step.get("delay_ms") or 0
        if action == "WAIT":
            self.sleep((step.get("duration_ms") or wait) / 1000)
            return
        if wait:
            self.sleep(wait / 1000)
        assertions = resolve(step.get("assertions") or {}, results)
        if action == "ASSERT":
            check_cross(step["id"], assertions, results, outcome)
            return
        path = resolve(step["path"], results)
        body = resolve(step["body"], results) if "body" in step else None
        reply = self.request(action, path, step.get("headers") or {}, body)
        results[step["id"]] = reply
        check(step["id"], assertions, reply, outcome)

    def request(self, method: str, path: str, headers: dict[str, str], body: Any) -> Reply:
        data = None if body is None else json.dumps(body).encode()
        sent = {"Content-Type": "application/openjobspec+json", **headers}
        req = urllib.request.Request(self.base_url + path, data=data, method=method, headers=sent)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return _reply(resp.status, resp.headers, resp.read())
        except urllib.error.HTTPError as err:
            return _reply(err.code, err.headers, err.read())


def _reply(status: int, headers: Any, raw: bytes) -> Reply:
    try:
        body = json.loads(raw) if raw.strip() else None
    except ValueError:
        body = None
    return Reply(status, {k.lower(): v for k, v in headers.items()}, raw, body)


# Templates.


def with_captures(step: dict[str, Any], captured: dict[str, str]) -> dict[str, Any]:
    """``step`` with each ``{{name}}`` an earlier step's ``capture`` named spelled out in full.

    Three cases name a value with ``"capture": {"job_id": "$.job.id"}`` and use it
    as ``{{job_id}}``; the suite's own runner ignores ``capture`` and sends the text
    as it is, which no server can answer as the cases expect. Ours reads them as
    written: ``{{job_id}}`` becomes ``{{steps.<id>.response.body.job.id}}``.
    """
    if not captured:
        return step
    text = json.dumps(step)
    for name, target in captured.items():
        text = text.replace("{{" + name + "}}", "{{" + target + "}}")
    return json.loads(text)


def resolve(value: Any, results: dict[str, Reply]) -> Any:
    """Replace template references: a whole-string one by the value, an embedded one as text."""
    if isinstance(value, dict):
        return {resolve(k, results): resolve(v, results) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, results) for v in value]
    if not isinstance(value, str) or "{{steps." not in value:
        return value
    whole = _TEMPLATE.fullmatch(value)
    if whole:
        found = _lookup(whole, results)
        return value if found is _MISSING else found
    return _TEMPLATE.sub(lambda m: _as_text(_lookup(m, results), m.group(0)), value)


def _lookup(match: re.Match, results: dict[str, Reply]) -> Any:
    reply = results.get(match.group(1))
    if reply is None or reply.body is None:
        return _MISSING
    path = match.group(2)
    found = jsonpath("$." + path, reply.body) if path else reply.body
    return _MISSING if found is None else found


def _as_text(value: Any, original: str) -> str:
    if value is _MISSING:
        return original
    if isinstance(value, str):
        return value
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return json.dumps(value)


# JSONPath: dots, [n], [*], and [?(@.field=='value')].

_PART = re.compile(r"\.([^.\[]+)|\[(\d+)\]|\[\*\]|\[\?\(@\.([^=]+)==([^)]*)\)\]")


def jsonpath(path: str, data: Any) -> Any:
    """Resolve ``path`` in ``data``; None when it does not resolve (or is null)."""
    found = locate(path, data)
    return None if found is _MISSING else found


def locate(path: str, data: Any) -> Any:
    """Resolve ``path`` in ``data``; ``_MISSING`` when it does not resolve."""
    if path == "$":
        return data
    values = [data]
    wild = False
    for m in _PART.finditer(path[1:]):
        key, index, fkey, fval = m.groups()
        nxt = []
        for v in values:
            if key is not None:
                if isinstance(v, dict) and key in v:
                    nxt.append(v[key])
            elif index is not None:
                if isinstance(v, list) and int(index) < len(v):
                    nxt.append(v[int(index)])
            elif fkey is not None:
                nxt.extend(_first_where(v, fkey, fval.strip("'\"")))
            else:
                wild = True
                if isinstance(v, list):
                    nxt.extend(v)
        values = nxt
        if not values:
            return [] if wild else _MISSING
    return values if wild else values[0]


def _first_where(value: Any, key: str, want: str) -> list[Any]:
    if not isinstance(value, list):
        return []
    hit = [e for e in value if isinstance(e, dict) and _text(e.get(key)) == want]
    return hit[:1]


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return value if isinstance(value, str) else json.dumps(value)


# Assertions.


def check(step: str, a: dict[str, Any], reply: Reply, outcome: Outcome) -> None:
    if "status" in a and not status_matches(a["status"], reply.status):
        outcome.fail(step, f"status {reply.status}, expected {a['status']} ({reply.raw[:300]!r})")
    if "status_in" in a and reply.status not in a["status_in"]:
        outcome.fail(step, f"status {reply.status}, expected one of {a['status_in']}")
    for name, want in (a.get("headers") or {}).items():
        got = reply.headers.get(name.lower())
        if not matches(want, got, got is not None):
            outcome.fail(step, f"header {name}: {got!r}, expected {want!r}")
    body = a.get("body") or {}
    for problem in body_problems(body, reply.body):
        outcome.fail(step, f"{problem} (body {reply.raw[:400]!r})")
    for path in a.get("body_absent") or []:
        if jsonpath(path, reply.body) is not None:
            outcome.fail(step, f"{path} should be absent")
    for text in a.get("body_contains") or []:
        if text.encode() not in reply.raw:
            outcome.fail(step, f"body does not contain {text!r}")


def body_problems(body: dict[str, Any], data: Any) -> list[str]:
    problems: list[str] = []
    for path, want in body.items():
        if path == "$or":
            if not any(not body_problems(alt, data) for alt in want):
                problems.append(f"no alternative of $or matched: {want}")
            continue
        got = jsonpath(path, data)
        exists = _exists(path, data)
        if not matches(want, got, exists):
            problems.append(f"{path}: {got!r} does not match {want!r}")
    return problems


def _exists(path: str, data: Any) -> bool:
    """Whether the path resolves (also to a null)."""
    return locate(path, data) is not _MISSING


def status_matches(want: Any, status: int) -> bool:
    if isinstance(want, int):
        return status == want
    if isinstance(want, dict) and "$in" in want:
        return status in want["$in"]
    if isinstance(want, str) and want.startswith("one_of:"):
        return str(status) in want[7:].split(",")
    return matches(want, status, True)


_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_UUID7 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
_DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
_RANGE = re.compile(r"^number:range\(([-\d.]+),([-\d.]+)\)$")
_LENGTH = re.compile(r"^array:length[:(](\d+)\)?$")
_MIN_LENGTH = re.compile(r"^array:min(?:_length)?:(\d+)$")


def matches(want: Any, got: Any, exists: bool = True) -> bool:
    """Whether ``got`` matches the matcher ``want`` (see the suite's reference)."""
    if isinstance(want, dict):
        return _operators(want, got, exists)
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(map(matches, want, got))
    if want is None:
        return exists and got is None
    if isinstance(want, bool) or isinstance(got, bool):
        return want is got
    if isinstance(want, int | float):
        return isinstance(got, int | float) and float(got) == float(want)
    return _string_matcher(want, got, exists)


def _string_matcher(want: str, got: Any, exists: bool) -> bool:
    simple: dict[str, Callable[[], bool]] = {
        "any": lambda: got is not None,
        "absent": lambda: not exists,
        "exists": lambda: exists,
        "string:nonempty": lambda: isinstance(got, str) and got != "",
        "string:non_empty": lambda: isinstance(got, str) and got != "",
        "string:uuid": lambda: isinstance(got, str) and bool(_UUID.match(got)),
        "string:uuidv7": lambda: isinstance(got, str) and bool(_UUID7.match(got)),
        "string:datetime": lambda: isinstance(got, str) and bool(_DATETIME.match(got)),
        "number:positive": lambda: _number(got) and got > 0,
        "number:non_negative": lambda: _number(got) and got >= 0,
        "array:nonempty": lambda: isinstance(got, list) and len(got) > 0,
        "array:empty": lambda: isinstance(got, list) and not got,
    }
    if want in simple:
        return simple[want]()
    if want.startswith("string:contains:"):
        return isinstance(got, str) and want[16:] in got
    if want.startswith("string:pattern(") and want.endswith(")"):
        return isinstance(got, str) and re.search(want[15:-1], got) is not None
    if m := _RANGE.match(want):
        return _number(got) and float(m.group(1)) <= got <= float(m.group(2))
    if want.startswith("~") and _number(got):
        expected = float(want[1:])
        return abs(got - expected) <= max(expected * TOLERANCE_PCT / 100, MIN_TOLERANCE)
    if m := _LENGTH.match(want):
        return isinstance(got, list) and len(got) == int(m.group(1))
    if m := _MIN_LENGTH.match(want):
        return isinstance(got, list) and len(got) >= int(m.group(1))
    if want.startswith("contains:"):
        return isinstance(got, list) and want[9:] in [_text(e) for e in got]
    if want.startswith("not_contains:"):
        return isinstance(got, list) and want[13:] not in [_text(e) for e in got]
    return got == want


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _operators(want: dict[str, Any], got: Any, exists: bool) -> bool:
    if not any(k.startswith("$") or k == "range" for k in want):  # a literal object
        return (
            isinstance(got, dict)
            and set(got) == set(want)
            and all(matches(v, got[k]) for k, v in want.items())
        )
    checks: list[bool] = []
    if "$exists" in want:
        checks.append(exists == bool(want["$exists"]))
    if "$type" in want:
        checks.append(_json_type(got) == want["$type"])
    if "$match" in want:
        checks.append(isinstance(got, str) and re.search(want["$match"], got) is not None)
    if "$in" in want:
        checks.append(any(matches(alt, got, exists) for alt in want["$in"]))
    if "$or" in want:
        checks.append(any(matches(alt, got, exists) for alt in want["$or"]))
    if "$size" in want:
        size = want["$size"]
        length = len(got) if isinstance(got, list) else -1
        checks.append(length >= size["$gte"] if isinstance(size, dict) else length == size)
    if "$gte" in want:
        checks.append(_number(got) and got >= want["$gte"])
    if "$empty" in want:
        checks.append((got in (None, {}, [], "")) == bool(want["$empty"]))
    if "range" in want:
        bounds = want["range"]
        checks.append(
            _number(got)
            and got >= bounds.get("min", float("-inf"))
            and got <= bounds.get("max", float("inf"))
        )
    return bool(checks) and all(checks)


def _json_type(value: Any) -> str:
    kinds = {bool: "boolean", str: "string", list: "array", dict: "object", type(None): "null"}
    if type(value) in kinds:
        return kinds[type(value)]
    return "number" if _number(value) else "unknown"


def check_cross(step: str, a: dict[str, Any], results: dict[str, Reply], outcome: Outcome) -> None:
    """The ``ASSERT`` step's checks: ``exclusive_claim`` and ``equality``."""
    claim = a.get("exclusive_claim")
    if claim:
        fetches = [f if isinstance(f, list) else [] for f in claim["fetches"]]
        holding = [f for f in fetches if any(j.get("id") == claim["job_id"] for j in f)]
        empty = [f for f in fetches if not f]
        if claim.get("exactly_one_has_job") and len(holding) != 1:
            outcome.fail(step, f"{len(holding)} fetches returned job {claim['job_id']}, not one")
        if claim.get("exactly_one_empty") and len(empty) != 1:
            outcome.fail(step, f"{len(empty)} fetches came back empty, not one")
    for left, right in (a.get("equality") or {}).items():
        m = re.fullmatch(r"\$\.steps\.([^.]+)\.response\.body", left)
        value = results[m.group(1)].body if m and m.group(1) in results else _MISSING
        if value != right:
            outcome.fail(step, f"{left} differs: {value!r} != {right!r}")
