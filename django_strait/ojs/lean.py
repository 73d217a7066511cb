"""The OJS worker endpoints as a bare ASGI application, beside Django's: the fast door.

``POST /ojs/v1/workers/fetch``, ``/ack``, ``/nack``, ``/heartbeat``, ``/jobs`` and
``/jobs/batch`` are answered here, without Django's request cycle or DRF; every
other request (other paths, other methods) goes on to the Django application it
wraps. Serve it with uvicorn (docs/ojs.md, "The fast door")::

    DJANGO_SETTINGS_MODULE=mysite.settings uvicorn django_strait.ojs.asgi:application

or wrap the project's own ASGI application: ``application = LeanOjs(get_asgi_application())``.

It makes every check the DRF views make, with the same code: API keys (``Bearer``,
``Api-Key``) and DRF tokens, scopes and permissions, the key's queues, the per-client
and failed-authentication throttles, the body's size and JSON (NUL, depth, numbers),
each field's bounds (``inputs``), reservation ownership, and the OJS error envelope
naming the field. What it leaves out is what costs: URL resolution, middleware,
content negotiation, DRF's request and response objects (docs/benchmarks.md, "The
OJS fast door"). The database work runs in a pool of threads, each with its own
connection (persistent as ``CONN_MAX_AGE`` says, as in Django's request cycle); a
fetch that finds nothing may wait for work (``wait_ms``, ``STRAIT["OJS_FETCH_WAIT"]``)
without holding a thread.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from django.db import close_old_connections, connections
from django.utils import timezone
from rest_framework import exceptions

from django_strait.api.auth import (
    LAST_USED_PRECISION,
    ApiKey,
    ApiKeyAuthentication,
    KeyHolder,
    QueueScope,
    Rule,
    StraitTokenAuthentication,
    _touch,
    _verified,
    credential,
    hash_key,
    key_queues,
    key_state,
)
from django_strait.api.throttles import AuthFailureThrottle, ClientThrottle
from django_strait.conf import strait_settings
from django_strait.ojs import batch, errors, hot, inputs, work
from django_strait.ojs.errors import OjsError
from django_strait.ojs.present import stamp
from django_strait.ojs.threads import DatabaseThreads
from django_strait.storage import backend
from django_strait.storage.sql import keep_plans

logger = logging.getLogger(__name__)

SPEC_VERSION = "1.0"
NUL = "\x00"
#: Database threads of one application (each holds a connection).
DEFAULT_THREADS = 8
#: The longest a fetch may wait for work (``wait_ms``): OJS recommends up to 2 s.
MAX_WAIT_MS = 30_000
#: How often a waiting fetch looks again.
WAIT_POLL = 0.1

_ENQUEUE = Rule("jobs:trigger", "django_strait.trigger_job")
_WORK = Rule("runs:write", "django_strait.change_jobrun")

ASGIApp = Callable[[dict, Callable[[], Awaitable[dict]], Callable[[dict], Awaitable[None]]], Any]


@dataclass
class Call:
    """One request, as the authentication and throttle classes read it (``request.META``)."""

    META: dict[str, str]
    method: str = "POST"
    user: Any = None
    auth: Any = None
    _request_id: str = ""

    @property
    def headers(self) -> _Headers:
        """``request.headers``: by name in any case (DRF reads ``authorization`` here)."""
        return _Headers(self.META)

    @property
    def request_id(self) -> str:
        """The client's ``X-Request-ID`` (printable, short), or a new one (as the views)."""
        given = self.META.get("HTTP_X_REQUEST_ID", "")
        if given and len(given) <= 200 and given.isprintable():
            return given
        if not self._request_id:
            self._request_id = new_request_id()
        return self._request_id


_request_ids = itertools.count()
_request_prefix = (0, "")


def new_request_id() -> str:
    """``req_`` and 32 hex digits, unique across processes: 16 random ones per process (made
    again in a forked child), then a counter; cheaper than a uuid4 per request."""
    global _request_prefix
    pid = os.getpid()
    if _request_prefix[0] != pid:
        _request_prefix = (pid, os.urandom(8).hex())
    return f"req_{_request_prefix[1]}{next(_request_ids) % 2**64:016x}"


class _Headers:
    def __init__(self, meta: Mapping[str, str]) -> None:
        self.meta = meta

    def get(self, name: str, default: Any = None) -> Any:
        key = name.upper().replace("-", "_")
        if key in ("CONTENT_LENGTH", "CONTENT_TYPE"):
            return self.meta.get(key, default)
        return self.meta.get(f"HTTP_{key}", default)


@dataclass
class Answer:
    status: int
    data: Any
    headers: dict[str, str] = field(default_factory=dict)


class _Anonymous:
    is_authenticated = False
    is_anonymous = True
    pk = None

    def has_perm(self, perm: str, obj: Any = None) -> bool:
        return False


#: How long a verified API key is used without reading its row again: a key revoked
#: or expired meanwhile is refused by the fast door within this (its expiry at once).
KEY_TTL = 2.0
#: Most verified keys remembered (only keys that verified are).
KEYS_KEPT = 1000


class _Keys:
    """Verified keys by the digest of the key presented, each with when it was read."""

    def __init__(self) -> None:
        self.found: dict[str, tuple[ApiKey, float]] = {}

    def verified(self, text: str) -> ApiKey:
        digest = hash_key(text)
        hit = self.found.get(digest)
        if hit is not None and time.monotonic() - hit[1] < KEY_TTL:
            state = key_state(hit[0], timezone.now())
            if state != "active":
                raise exceptions.AuthenticationFailed(f"this API key is {state}")
            return hit[0]
        key = _verified(text)
        if len(self.found) >= KEYS_KEPT:
            self.found.clear()
        self.found[digest] = (key, time.monotonic())
        return key


_keys = _Keys()


class _ApiKey(ApiKeyAuthentication):
    """``ApiKeyAuthentication`` with the row remembered ``KEY_TTL`` (one query fewer a request)."""

    def authenticate(self, request: Any) -> tuple[KeyHolder, ApiKey] | None:
        text = credential(request, self.keyword)
        if text is None:
            return None
        key = _keys.verified(text)
        now = timezone.now()
        if key.last_used_at is None or key.last_used_at <= now - LAST_USED_PRECISION:
            _touch(key, now)
            key.last_used_at = now
        return KeyHolder(key), key


class _Bearer(_ApiKey):
    keyword = "Bearer"


def authorize(call: Call, rule: Rule) -> QueueScope:
    """Authenticate ``call`` and check its rule and throttle, as ``OjsView.initial`` does.

    Return the queues its credential may use; raise the OJS error to answer otherwise.
    """
    try:
        for authenticator in (_Bearer(), _ApiKey(), StraitTokenAuthentication()):
            found = authenticator.authenticate(call)  # type: ignore[arg-type]
            if found is not None:
                call.user, call.auth = found
                break
        else:
            call.user, call.auth = _Anonymous(), None
    except exceptions.AuthenticationFailed as exc:
        throttled = AuthFailureThrottle().failed(call)  # type: ignore[arg-type]
        raise _as_ojs(throttled or exc) from None
    if strait_settings.OJS_REQUIRE_AUTH:
        _permit(call, rule)
    throttle = ClientThrottle()
    if not throttle.allow_request(call, None):  # type: ignore[arg-type]
        raise _as_ojs(exceptions.Throttled(throttle.wait()))
    return QueueScope(key_queues(call.auth)) if isinstance(call.auth, ApiKey) else QueueScope()


def _permit(call: Call, rule: Rule) -> None:
    """``IsAuthenticated`` and ``ScopeOrPermission``: a key by its scopes, a user by permissions."""
    if call.user is None or not call.user.is_authenticated:
        raise _as_ojs(exceptions.NotAuthenticated())
    if isinstance(call.auth, ApiKey):
        if rule.scope in call.auth.scopes or "*" in call.auth.scopes:
            return
        raise OjsError(403, "forbidden", f"this API key lacks the {rule.scope} scope")
    if not call.user.has_perm(rule.permission):
        raise OjsError(403, "forbidden", f"this needs the {rule.permission} permission")


def _as_ojs(exc: Exception) -> OjsError:
    if isinstance(exc, exceptions.Throttled):
        wait = int(exc.wait or 1)
        return OjsError(
            429, "rate_limited", str(exc.detail), retryable=True, headers={"Retry-After": str(wait)}
        )
    return OjsError(401, "unauthorized", str(exc.detail), headers={"WWW-Authenticate": "Bearer"})  # type: ignore[attr-defined]


def refuse_nul(query: str) -> None:
    """A query parameter holding NUL is refused (400), as ``views.refuse_nul`` refuses it."""
    for name, value in parse_qsl(query, keep_blank_values=True):
        if NUL in name or NUL in value:
            raise errors.invalid_request(
                name.replace(NUL, "\\u0000"), "must not contain the NUL character (\\u0000)"
            )


def within(scope: QueueScope, queue: str, name: str) -> None:
    if not scope.allows(queue):
        raise errors.forbidden(name, scope.refusal(queue))


# The endpoints: what the views' post() do, on a checked body and the credential's queues.


def fetch(body: dict[str, Any], scope: QueueScope) -> Answer:
    queues, count, worker, visibility = inputs.fetch_request(body)
    for i, queue in enumerate(queues):
        within(scope, queue, f"queues[{i}]")
    if hot.usable():
        return Answer(200, {"jobs": hot.fetch(queues, count, worker, visibility)})
    runs = work.fetch(queues, count, worker, visibility)
    return Answer(200, {"jobs": [work.describe(r, with_errors=False) for r in runs]})


def ack(body: dict[str, Any], scope: QueueScope) -> Answer:
    if hot.usable():
        return Answer(
            200, hot.ack(body.get("job_id"), body.get("result"), inputs.holder(body), scope)
        )
    run = work.ack(body.get("job_id"), body.get("result"), inputs.holder(body), scope)
    return Answer(200, work.ended(run))


def nack(body: dict[str, Any], scope: QueueScope) -> Answer:
    error = body.get("error") or {}
    if not isinstance(error, dict):
        raise errors.invalid_request(
            "error", "must be an object {code, message, retryable, details}"
        )
    hot.fetched.forget(body.get("job_id"))
    run, decision = work.nack(
        body.get("job_id"), error, body.get("requeue") is True, inputs.holder(body), scope
    )
    return Answer(200, work.ended(run, decision))


def heartbeat(body: dict[str, Any], scope: QueueScope) -> Answer:
    ids, vis, worker = inputs.heartbeat(body)
    directive, extended = work.heartbeat(worker, ids, vis, scope)
    now = stamp(timezone.now()) or ""
    return Answer(200, {"state": directive, "directive": directive,
                        "jobs_extended": extended, "server_time": now})  # fmt: skip


def enqueue(body: dict[str, Any], scope: QueueScope) -> Answer:
    wanted = inputs.job_request(body)
    within(scope, wanted.queue, "options.queue")
    return Answer(*work.enqueued(work.enqueue(wanted, scope)))


def enqueue_batch(body: dict[str, Any], scope: QueueScope) -> Answer:
    jobs = body.get("jobs")
    if not isinstance(jobs, list) or not 1 <= len(jobs) <= inputs.BATCH_MAX:
        raise errors.invalid_request("jobs", f"must be an array of 1 to {inputs.BATCH_MAX} jobs")
    wanted = [inputs.job_request(j, f"jobs[{i}].") for i, j in enumerate(jobs)]
    for i, one in enumerate(wanted):
        within(scope, one.queue, f"jobs[{i}].options.queue")
    if any(one.unique is not None for one in wanted):
        runs = work.enqueue_batch(wanted, scope)
    else:
        runs = batch.enqueue_batch(wanted)
    bodies = [work.describe(r, with_errors=False) for r in runs]
    return Answer(201, {"jobs": bodies, "count": len(bodies)})


@dataclass(frozen=True)
class Endpoint:
    rule: Rule
    handle: Callable[[dict[str, Any], QueueScope], Answer]


ENDPOINTS: Mapping[str, Endpoint] = {
    "/ojs/v1/workers/fetch": Endpoint(_WORK, fetch),
    "/ojs/v1/workers/ack": Endpoint(_WORK, ack),
    "/ojs/v1/workers/nack": Endpoint(_WORK, nack),
    "/ojs/v1/workers/heartbeat": Endpoint(_WORK, heartbeat),
    "/ojs/v1/jobs": Endpoint(_ENQUEUE, enqueue),
    "/ojs/v1/jobs/batch": Endpoint(_ENQUEUE, enqueue_batch),
}


def wait_of(body: Any) -> float:
    """Seconds a fetch may wait for work: its ``wait_ms``, else ``STRAIT["OJS_FETCH_WAIT"]``."""
    given = body.get("wait_ms") if isinstance(body, dict) else None
    if given is None:
        return min(strait_settings.OJS_FETCH_WAIT, MAX_WAIT_MS / 1000)
    if isinstance(given, bool) or not isinstance(given, int) or not 0 <= given <= MAX_WAIT_MS:
        raise errors.invalid_request(
            "wait_ms", f"must be an integer from 0 to {MAX_WAIT_MS} (ms), got {given!r}"
        )
    return given / 1000


def serve(endpoint: Endpoint, call: Call, raw: bytes, too_long: bool) -> tuple[Answer, float]:
    """Answer one request in a database thread; also how long a fetch may wait if it found none.

    The thread's connections are checked after each request (closed if unusable, past
    ``CONN_MAX_AGE``, or left in a transaction), as Django's request cycle checks them
    when a request ends; and so before the thread's next request.
    """
    try:
        try:
            if hot.usable():  # the record statement prepared, as a worker's (sql.keep_plans)
                keep_plans(
                    connections[backend().alias], time.monotonic(), strait_settings.PLAN_LIFETIME
                )
            scope = authorize(call, endpoint.rule)
            refuse_nul(call.META.get("QUERY_STRING", ""))
            body = inputs.body_of(raw, too_long)
            wait = wait_of(body) if endpoint.handle is fetch else 0.0
            return endpoint.handle(body, scope), wait
        except OjsError as exc:
            return Answer(exc.status, exc.body(call.request_id), dict(exc.headers)), 0.0
        except Exception:
            logger.exception("OJS %s failed", call.META.get("PATH_INFO"))
            error = OjsError(500, "internal_error", "the server failed to answer; see its log")
            return Answer(500, error.body(call.request_id), {}), 0.0
    finally:
        close_old_connections()


class LeanOjs:
    """An ASGI application: the OJS worker endpoints here, everything else to ``fallback``."""

    def __init__(self, fallback: ASGIApp | None = None, *, threads: int = DEFAULT_THREADS) -> None:
        self.fallback = fallback
        self.threads = threads
        self._pool: DatabaseThreads | None = None

    @property
    def pool(self) -> DatabaseThreads:
        if self._pool is None:
            self._pool = DatabaseThreads(self.threads)
        return self._pool

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        endpoint = ENDPOINTS.get(scope.get("path", "")) if scope["type"] == "http" else None
        if endpoint is None or scope.get("method") != "POST":
            if self.fallback is None:
                await _send(send, 404, _not_found(scope), {})
                return
            await self.fallback(scope, receive, send)
            return
        call = Call(_meta(scope))
        raw, too_long = await _read_body(receive, call.META.get("CONTENT_LENGTH", ""))
        answer = await self._answer(endpoint, call, raw, too_long)
        headers = {**answer.headers, "OJS-Version": SPEC_VERSION, "X-Request-ID": call.request_id}
        await _send(send, answer.status, answer.data, headers)

    async def _answer(self, endpoint: Endpoint, call: Call, raw: bytes, too_long: bool) -> Answer:
        answer, wait = await self.pool.call(serve, endpoint, call, raw, too_long)
        if wait <= 0 or answer.status != 200 or answer.data.get("jobs"):
            return answer
        # Nothing to do yet: look again now and then until the wait is over, holding no thread.
        deadline = time.monotonic() + wait
        while (left := deadline - time.monotonic()) > 0:
            await asyncio.sleep(min(WAIT_POLL, left))
            answer, _ = await self.pool.call(serve, endpoint, call, raw, False)
            if answer.status != 200 or answer.data.get("jobs"):
                break
        return answer

    async def _lifespan(self, receive: Callable, send: Callable) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._pool is not None:
                    self._pool.stop()
                    self._pool = None
                await send({"type": "lifespan.shutdown.complete"})
                return


def _meta(scope: dict) -> dict[str, str]:
    """``request.META``'s entries that authentication, throttles and request ids read."""
    meta = {
        "PATH_INFO": scope.get("path", ""),
        "REQUEST_METHOD": scope.get("method", ""),
        "QUERY_STRING": scope.get("query_string", b"").decode("latin-1"),
    }
    client = scope.get("client")
    meta["REMOTE_ADDR"] = client[0] if client else ""
    for name, value in scope.get("headers", ()):
        key = _META_KEYS.get(name)
        if key is None:
            key = _meta_key(name)
        text = value.decode("latin-1")
        if key in meta and key[0] == "H":  # HTTP_*: joined, as Django joins them
            text = f"{meta[key]},{text}"
        meta[key] = text
    return meta


#: Header names as ``request.META`` names them, for the names clients send (``_meta_key``).
_META_KEYS: dict[bytes, str] = {}
_META_KEYS_KEPT = 256


def _meta_key(name: bytes) -> str:
    key = name.decode("latin-1").upper().replace("-", "_")
    if key not in ("CONTENT_LENGTH", "CONTENT_TYPE"):
        key = f"HTTP_{key}"
    if len(_META_KEYS) < _META_KEYS_KEPT:  # names are the clients': only so many kept
        _META_KEYS[name] = key
    return key


async def _read_body(receive: Callable, declared: str) -> tuple[bytes, bool]:
    """The body, up to the limit; whether it is over it (declared or sent), read no further."""
    limit = strait_settings.API_MAX_PAYLOAD_BYTES
    if declared.isdigit() and (len(declared) > 18 or int(declared) > limit):
        return b"", True
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return b"", True
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks), False


def _not_found(scope: dict) -> dict[str, Any]:
    error = OjsError(404, "not_found", f"no OJS endpoint at {scope.get('path', '')}")
    return error.body(new_request_id())


async def _send(send: Callable, status: int, data: Any, headers: Mapping[str, str]) -> None:
    body = b"" if status == 204 else json.dumps(data).encode()
    raw = [(b"content-type", strait_settings.OJS_CONTENT_TYPE.encode("latin-1"))]
    raw += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    raw.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})
