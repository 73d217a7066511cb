"""Fuzz the OJS binding: every endpoint with hostile bodies, path parameters and query strings.

Each operation's requests start from a valid one (a real job id, a real cron
name, a well-formed body) and have parts swapped for hostile values
(``tests/hostile.py``): NUL, lone surrogates, JSON 2,000+ levels deep, times
past what UTC holds, text of 200,000 characters, numbers past every range,
bodies that are not JSON or not UTF-8. No answer may be a 5xx; every refusal is
a 4xx in the OJS error shape. Sixteen requests per operation and four more for
each part of its body, query and path, some 1,000 in all, through Django's test
client with a key for every scope.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote_from_bytes

import pytest
from django.core.cache import cache
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_strait.api.auth import issue_key
from django_strait.models import Execution, Job, JobRun
from tests.hostile import (
    HOSTILE_TEXT,
    HOSTILE_TIMES,
    URL_TEXT,
    encode,
    hostile_tree,
    not_dots,
    one_part_hostile,
    parts,
    path_value,
    query_value,
)
from tests.integration.factories import make_run
from tests.ojs.lean_server import HttpClient, serving_lean
from tests.security.fuzzing import Tally, tallied

pytestmark = [
    pytest.mark.slow,
    pytest.mark.layout_free,
    pytest.mark.django_db(transaction=True),
    # A failing example's repr holds 200,000-character values; the report says what failed.
    pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning"),
]

OJS = "application/openjobspec+json"
#: Requests per operation: a base, and more for each part of its body, query and path.
BASE_EXAMPLES = 16
PER_PART = 4

JOB = {
    "type": "fuzz.mail",
    "args": [{"to": "a@example.com"}, 2],
    "meta": {"trace": "t-1"},
    "options": {
        "queue": "fuzz",
        "priority": 5,
        "timeout_ms": 60_000,
        "visibility_timeout_ms": 30_000,
        "scheduled_at": "2030-01-01T00:00:00Z",
        "expires_at": "2031-01-01T00:00:00Z",
        "retry": {"max_attempts": 3, "initial_interval": "PT1S", "backoff_coefficient": 2.0,
                  "non_retryable_errors": ["fatal"]},
        "tags": ["a", "b"],
        "metadata": {"tenant": "t"},
        # Only a completed run is a duplicate: the fixture enqueues this job four times.
        "unique": {"keys": ["type", "args"], "states": ["completed"], "period": "PT1H",
                   "on_conflict": "reject"},
        "rate_limit": {"max_per_minute": 1000},
    },
}  # fmt: skip
ERROR = {"code": "handler_error", "type": "Boom", "message": "it broke", "retryable": True,
         "details": {"line": 3}}  # fmt: skip
CRON = {"name": "fuzz-cron", "expression": "*/5 * * * *", "timezone": "Europe/Paris",
        "overlap_policy": "skip", "job_template": {"type": "fuzz.tick", "args": [1],
                                                   "options": {"queue": "fuzz"}}}  # fmt: skip

STEP = {"type": "fuzz.step", "args": [1, {"k": "v"}], "meta": {"m": 1},
        "options": {"queue": "fuzz", "retry": {"max_attempts": 2}, "priority": 3}}  # fmt: skip
BATCH_WORKFLOW = {
    "type": "batch", "name": "fuzz batch", "jobs": [STEP, {**STEP, "type": "fuzz.other"}],
    "options": {"queue": "fuzz"}, "metadata": {"tenant": "t"},
    "callbacks": {"on_complete": {"type": "fuzz.done", "args": [], "options": {"queue": "fuzz"}},
                  "on_failure": {"type": "fuzz.failed", "args": [2]}},
}  # fmt: skip
CHAIN = {"type": "chain", "name": "fuzz chain", "steps": [STEP, STEP, STEP]}

#: (method, path, body, query) per operation; ``{id}`` and ``{name}`` are path parameters.
OPERATIONS: dict[str, tuple[str, str, Any, dict[str, str]]] = {
    "manifest": ("GET", "/ojs/manifest", None, {}),
    "health": ("GET", "/ojs/v1/health", None, {}),
    "enqueue": ("POST", "/ojs/v1/jobs", JOB, {}),
    "enqueue batch": ("POST", "/ojs/v1/jobs/batch", {"jobs": [JOB, {**JOB, "args": []}]}, {}),
    "info": ("GET", "/ojs/v1/jobs/{id}", None, {}),
    "cancel": ("DELETE", "/ojs/v1/jobs/{id}", None, {}),
    "activate": ("POST", "/ojs/v1/jobs/{id}/activate", {}, {}),
    "fetch": (
        "POST",
        "/ojs/v1/workers/fetch",
        {
            "queues": ["fuzz", "default"],
            "count": 2,
            "worker_id": "fuzz-w",
            "visibility_timeout_ms": 30_000,
        },
        {},
    ),  # fmt: skip
    "ack": (
        "POST",
        "/ojs/v1/workers/ack",
        {"job_id": "{id}", "result": {"ok": [1, "two"]}, "worker_id": "fuzz-w", "attempt": 1},
        {},
    ),  # fmt: skip
    "nack": (
        "POST",
        "/ojs/v1/workers/nack",
        {"job_id": "{id}", "error": ERROR, "requeue": False, "worker_id": "fuzz-w", "attempt": 1},
        {},
    ),  # fmt: skip
    "heartbeat": (
        "POST",
        "/ojs/v1/workers/heartbeat",
        {
            "worker_id": "fuzz-w",
            "state": "running",
            "active_jobs": ["{id}"],
            "active_job_ids": ["{id}"],
            "visibility_timeout_ms": 30_000,
        },
        {},
    ),  # fmt: skip
    "dead letters": ("GET", "/ojs/v1/dead-letter", None, {"page": "1", "per_page": "10"}),
    "dead letter": ("GET", "/ojs/v1/dead-letter/{id}", None, {}),
    "dead letter retry": ("POST", "/ojs/v1/dead-letter/{id}/retry", {}, {}),
    "dead letter delete": ("DELETE", "/ojs/v1/dead-letter/{id}", None, {}),
    "admin dead letters": ("GET", "/ojs/v1/admin/dead-letter", None, {"limit": "5"}),
    "admin dead letter stats": ("GET", "/ojs/v1/admin/dead-letter/stats", None, {}),
    "crons": ("GET", "/ojs/v1/cron", None, {}),
    "cron register": ("POST", "/ojs/v1/cron", CRON, {}),
    "cron register (SDK form)": (
        "POST",
        "/ojs/v1/cron",
        {
            "name": "fuzz-sdk",
            "cron": "@daily",
            "type": "fuzz.tick",
            "args": [],
            "timezone": "UTC",
            "options": {"queue": "fuzz"},
            "meta": {},
        },
        {},
    ),  # fmt: skip
    "cron": ("GET", "/ojs/v1/cron/{name}", None, {}),
    "cron delete": ("DELETE", "/ojs/v1/cron/{name}", None, {}),
    "queues": ("GET", "/ojs/v1/queues", None, {"limit": "5", "offset": "1"}),
    "queue stats": ("GET", "/ojs/v1/queues/{name}/stats", None, {}),
    "queue pause": ("POST", "/ojs/v1/queues/{name}/pause", {}, {}),
    "queue resume": ("POST", "/ojs/v1/queues/{name}/resume", {}, {}),
    "admin queues": ("GET", "/ojs/v1/admin/queues", None, {"page": "1", "per_page": "5"}),
    "admin queue": ("GET", "/ojs/v1/admin/queues/{name}", None, {}),
    "admin queue pause": ("POST", "/ojs/v1/admin/queues/{name}/pause", {}, {}),
    "admin jobs": ("GET", "/ojs/v1/admin/jobs", None, {"state": "available", "queue": "fuzz"}),
    "admin job": ("GET", "/ojs/v1/admin/jobs/{id}", None, {}),
    "admin bulk retry": (
        "POST",
        "/ojs/v1/admin/jobs/bulk/retry",
        {"filter": {"queue": "fuzz"}, "confirm": True},
        {},
    ),  # fmt: skip
    "admin workers": ("GET", "/ojs/v1/admin/workers", None, {}),
    "admin stats": ("GET", "/ojs/v1/admin/stats", None, {}),
    "events": (
        "GET",
        "/ojs/v1/events",
        None,
        {"types": "job.completed,job.failed", "queues": "fuzz", "limit": "20"},
    ),  # fmt: skip
    # Level 3 and the extensions.
    "workflow create": ("POST", "/ojs/v1/workflows", BATCH_WORKFLOW, {}),
    "chain create": ("POST", "/ojs/v1/workflows", CHAIN, {}),
    "workflow": ("GET", "/ojs/v1/workflows/{workflow}", None, {}),
    "workflow cancel": ("DELETE", "/ojs/v1/workflows/{workflow}", None, {}),
    "progress report": (
        "PUT",
        "/ojs/v1/jobs/{id}/progress",
        {
            "progress": 0.5,
            "message": "half",
            "data": {"rows": 3},
            "worker_id": "fuzz-w",
            "attempt": 1,
            "checkpoint": {"at": 3},
        },
        {},
    ),  # fmt: skip
    "progress": ("GET", "/ojs/v1/jobs/{id}/progress", None, {}),
    "events stream": (
        "GET",
        "/ojs/v1/events/stream",
        None,
        {
            "types": "job.completed",
            "queues": "fuzz",
            "max_seconds": "1",
            "since": "2026-01-01T00:00:00Z",
        },
    ),  # fmt: skip
}

#: What every path and query parameter meets at least now and then.
ESSENTIALS = st.sampled_from(["\x00", "a\x00b", "\ud800", "x" * 5000, "9" * 400])
#: Bodies that are not a JSON object: empty, not UTF-8, not JSON, JSON of another kind.
RAW_BODIES = st.sampled_from(
    [b"", b" ", b"\xff\xfe\x00", b"\xed\xa0\x80", b"{", b"null", b"[]", b"1e999", b'"\\ud800"',
     b"\x00", b"{}" * 5000, b'{"a": 1} trailing', "{\"type\": \"\u0000\"}".encode()]
)  # fmt: skip


@pytest.fixture
def ojs(settings) -> Client:
    """A client with a key for every scope, unthrottled."""
    settings.STRAIT = {**settings.STRAIT, "API_THROTTLE_RATE": None, "OJS_TEST_DIRECTIVES": True}
    cache.clear()
    _, key = issue_key("fuzz", ["*"])
    return Client(raise_request_exception=False, HTTP_AUTHORIZATION=f"Bearer {key}")


@pytest.fixture
def real(ojs) -> dict[str, list[str]]:
    """Jobs in every state the endpoints look for, and a cron: the ids a valid request names."""
    ids = [_enqueue(ojs, queue) for queue in ("fuzz", "fuzz", "fuzz", "default")]
    fetched = ojs.post("/ojs/v1/workers/fetch", {"queues": ["fuzz"], "count": 2,
                       "worker_id": "fuzz-w"}, content_type=OJS)  # fmt: skip
    assert fetched.status_code == 200, fetched.content
    job = Job.objects.get(name="fuzz.mail")
    dead = make_run(job, status="dead_letter", queue="fuzz")
    JobRun.objects.filter(pk=dead.pk).update(ojs_id="01900000-0000-7000-8000-000000000001")
    assert job.execution == Execution.EXTERNAL
    made = ojs.post("/ojs/v1/cron", CRON, content_type=OJS)
    assert made.status_code == 201, made.content
    flows = [
        ojs.post("/ojs/v1/workflows", body, content_type=OJS) for body in (BATCH_WORKFLOW, CHAIN)
    ]
    assert all(f.status_code == 201 for f in flows), [f.content for f in flows]
    return {
        "id": [*ids, "01900000-0000-7000-8000-000000000001"],
        "name": ["fuzz-cron"],
        "workflow": [f.json()["workflow"]["id"] for f in flows],
    }


def _enqueue(client: Client, queue: str) -> str:
    body = {**JOB, "options": {**JOB["options"], "queue": queue}}
    body["options"].pop("scheduled_at")
    made = client.post("/ojs/v1/jobs", body, content_type=OJS)
    assert made.status_code == 201, made.content
    return made.json()["job"]["id"]


def _filled(value: Any, params: dict[str, str]) -> Any:
    """Return a body template with ``{id}`` / ``{name}`` strings replaced by the chosen values."""
    if isinstance(value, dict):
        return {k: _filled(v, params) for k, v in value.items()}
    if isinstance(value, list):
        return [_filled(v, params) for v in value]
    if isinstance(value, str) and value.startswith("{") and value.endswith("}"):
        return params.get(value[1:-1], value)
    return value


@st.composite
def requests(draw: st.DrawFn, operation: str, real: dict[str, list[str]]) -> tuple:
    """Draw one request of ``operation``: method, path, body bytes and query bytes."""
    method, path, body, query = OPERATIONS[operation]
    params = {name: draw(st.sampled_from(values)) for name, values in real.items()}
    sent_path = path
    for name, value in params.items():
        hostile = draw(
            st.one_of(st.just(value), URL_TEXT.filter(not_dots), HOSTILE_TIMES, ESSENTIALS)
        )
        sent_path = sent_path.replace("{" + name + "}", path_value(hostile))
    data: bytes | None = None
    if body is not None:
        shape = draw(st.sampled_from(["one part", "one part", "tree", "raw"]))
        if shape == "raw":
            data = draw(RAW_BODIES)
        else:
            valid = _filled(body, params)
            tree = draw(one_part_hostile(valid) if shape == "one part" else hostile_tree(valid))
            data = encode(tree, ascii_only=draw(st.booleans())).encode("utf-8", "surrogatepass")
    sent_query = {
        name: query_value(draw(st.one_of(st.just(value), URL_TEXT, ESSENTIALS, HOSTILE_TEXT.map(lambda t: t[:500]))))
        for name, value in {**query, **draw(st.dictionaries(URL_TEXT, URL_TEXT, max_size=1))}.items()
    }  # fmt: skip
    return method, sent_path, data, sent_query


def send(client: Client, tally: Tally, operation: str, drawn: tuple) -> None:
    method, path, data, query = drawn
    extra: dict[str, Any] = {"QUERY_STRING": _query_string(query)}
    if data is not None:
        response = client.generic(method, path, data, content_type=OJS, **extra)
    else:
        response = client.generic(method, path, **extra)
    tally.record(operation, method, path + "?" + extra["QUERY_STRING"], data, response.status_code)
    if response.status_code < 500 and response.status_code >= 400:
        error = json.loads(response.content)["error"]
        assert error["code"] and error["message"], response.content


def _query_string(query: dict[str, bytes]) -> str:
    return "&".join(f"{quote_from_bytes(k.encode('utf-8', 'surrogatepass'))}={quote_from_bytes(v)}"
                    for k, v in query.items())  # fmt: skip


def examples(operation: str) -> int:
    """How many requests ``operation`` gets: more for more parts to spoil."""
    _, path, body, query = OPERATIONS[operation]
    spoilable = len(parts(body)) if body is not None else 0
    return BASE_EXAMPLES + PER_PART * (spoilable + len(query) + path.count("{"))


@pytest.fixture
def tally() -> Iterator[Tally]:
    with tallied() as found:
        yield found


def fuzz(client: Client, tally: Tally, operation: str, real: dict[str, list[str]]) -> None:
    @given(drawn=requests(operation, real))
    @settings(
        max_examples=examples(operation), deadline=None, database=None,
        suppress_health_check=list(HealthCheck),
    )  # fmt: skip
    def check(drawn: tuple) -> None:
        send(client, tally, operation, drawn)

    check()


def test_ojs__hostile_requests_never_answer_5xx(ojs, real, tally, capsys):
    # One test for every operation: one database to set up and flush, not one per operation.
    for operation in OPERATIONS:
        fuzz(ojs, tally, operation, real)
    with capsys.disabled():
        print(f"\nOJS fuzz, {len(OPERATIONS)} operations: {tally.report().splitlines()[0]}")
    assert not tally.failures, tally.report()


#: The operations the fast door (``django_strait.ojs.lean``) answers itself.
LEAN_OPERATIONS = ("enqueue", "enqueue batch", "fetch", "ack", "nack", "heartbeat")


def test_ojs__hostile_requests_never_answer_5xx_through_the_fast_door(ojs, real, tally, capsys):
    # Over HTTP to uvicorn: the same requests, the same rule (no 5xx, every refusal in the shape).
    with serving_lean() as base:
        client = HttpClient(base, {"Authorization": ojs.defaults["HTTP_AUTHORIZATION"]})
        for operation in LEAN_OPERATIONS:
            fuzz(client, tally, operation, real)  # type: ignore[arg-type]
    with capsys.disabled():
        print(f"\nOJS fast door fuzz: {tally.report().splitlines()[0]}")
    assert not tally.failures, tally.report()
