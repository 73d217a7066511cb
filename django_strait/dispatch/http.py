"""Call an HTTP job's endpoint once and describe the answer as an Outcome (docs/http-jobs.md).

The dispatcher persists nothing: it builds the request (JSON body, Strait headers,
signature), sends it over one connection pool (dispatch/wire.py), reads a bounded part of the
answer and maps status, ``Strait-Action`` and ``Retry-After`` to an
:class:`~django_strait.rules.outcome.Outcome`. The endpoint author's side of this
contract is described in docs/http-jobs.md.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC
from decimal import Decimal, InvalidOperation
from email.utils import parsedate_to_datetime
from types import TracebackType
from typing import Any

from multidict import CIMultiDict
from yarl import URL

from django_strait.dispatch.headers import (
    header_problems,
    is_reserved_header,
    unsendable_header,
)
from django_strait.dispatch.results import (
    EXCERPT_CHARS,
    decode,
    excerpt,
    parse_json,
    trim,
)
from django_strait.dispatch.signing import SIGNATURE_HEADER, sign
from django_strait.dispatch.ssrf import AddressGuard, AddressRefused, Network, Refusal
from django_strait.dispatch.wire import Client, RequestTimeout, Response
from django_strait.rules.outcome import Action, Outcome, action, failure, success

__all__ = [
    "ACTION_HEADER",
    "COST_HEADER",
    "HttpDispatcher",
    "HttpRequest",
    "encode_body",
    "header_problems",
    "parse_retry_after",
    "unsendable_header",
]

logger = logging.getLogger(__name__)

ACTION_HEADER = "Strait-Action"
#: The endpoint's report of what the call cost (budgets, docs/resilience.md).
COST_HEADER = "Strait-Cost"
#: Costs fit the ledger's columns (18 digits, 6 of them decimals).
MAX_COST = Decimal(10) ** 12
_ACTIONS = {act.value: act for act in Action}
_ALLOWED_ACTIONS = ", ".join(_ACTIONS)

#: Retryable besides every 5xx: timeout, too early, too many requests.
_RETRYABLE_STATUSES = frozenset({408, 425, 429})
_RETRY_AFTER_STATUSES = frozenset({429, 503})

#: A failed answer is read only as far as its excerpt needs (4 bytes per character at most).
_FAILURE_READ_BYTES = EXCERPT_CHARS * 4
_ERROR_EXCERPT_CHARS = 200


# Built once: json.dumps with options builds a new encoder on every call.
_COMPACT_JSON = json.JSONEncoder(separators=(",", ":"))

#: The most URLs, header sets and timeouts a dispatcher keeps prepared; it starts over beyond.
_PREPARED_SIZE = 1024
_NO_HEADERS: CIMultiDict[str] = CIMultiDict()


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """One attempt of an HTTP job: where to send it and what to send."""

    run_id: int
    job: str
    attempt: int
    payload: Any
    url: str
    method: str = "POST"
    headers: Mapping[str, str] = field(default_factory=dict)
    signing_secret: str = ""
    timeout: float = 30.0
    #: A workflow step's ``{"run_id", "step", "parents"}`` (sent as ``"workflow"``).
    workflow: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        timeout = self.timeout
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise ValueError(f"HttpRequest.timeout must be seconds > 0, got {timeout!r}")


def encode_body(req: HttpRequest) -> bytes:
    """Return the JSON body sent to the endpoint: run id, job, attempt, payload (and workflow)."""
    document: dict[str, Any] = {
        "run_id": req.run_id,
        "job": req.job,
        "attempt": req.attempt,
        "payload": req.payload,
    }
    if req.workflow is not None:
        document["workflow"] = req.workflow
    return _COMPACT_JSON.encode(document).encode("ascii")


def build_headers(req: HttpRequest, body: bytes, user_agent: str) -> CIMultiDict[str]:
    """Return the request headers: the job's own, then Strait's, which always win."""
    return _with_run_headers(_base_headers(req.headers, user_agent), req, body)


def _base_headers(job_headers: Mapping[str, Any], user_agent: str) -> CIMultiDict[str]:
    """Return the headers every run of a job sends: User-Agent, the job's own, the framing."""
    headers: CIMultiDict[str] = CIMultiDict({"User-Agent": user_agent})
    for name, value in job_headers.items():
        if is_reserved_header(name):
            continue
        headers[name] = str(value)
    headers["Content-Type"] = "application/json"
    # The body is read in bounded pieces; a compressed body would make the byte
    # limit mean nothing, so ask for it plain and never decompress.
    headers["Accept-Encoding"] = "identity"
    return headers


def _with_run_headers(base: CIMultiDict[str], req: HttpRequest, body: bytes) -> CIMultiDict[str]:
    """Return ``base`` (not changed) with this attempt's Strait headers and signature added."""
    headers = base.copy()
    run_id = str(req.run_id)
    headers["Strait-Run-Id"] = run_id
    headers["Strait-Attempt"] = str(req.attempt)
    headers["Idempotency-Key"] = run_id
    if req.signing_secret:
        headers[SIGNATURE_HEADER] = sign(req.signing_secret, body, int(time.time()))
    return headers


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Return the delay a ``Retry-After`` value asks for, in seconds, or None if unreadable."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            # A "-0000" zone parses naive; HTTP dates are always UTC.
            when = when.replace(tzinfo=UTC)
        seconds = when.timestamp() - now
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


class HttpDispatcher:
    """Send HTTP job attempts over one connection pool and describe the answers.

    Only public addresses are called, and those in ``allowed_networks`` (the
    worker passes ``STRAIT["ALLOWED_PRIVATE_NETWORKS"]``); see dispatch/ssrf.py.
    """

    def __init__(
        self,
        *,
        max_result_bytes: int = 65536,
        user_agent: str = "django-strait",
        limit: int = 100,
        allowed_networks: Iterable[Network] = (),
    ) -> None:
        if max_result_bytes < 0:
            raise ValueError(f"max_result_bytes must be >= 0, got {max_result_bytes!r}")
        if limit < 0:
            raise ValueError(f"limit must be >= 0 (0 = no limit), got {limit!r}")
        self._max_result_bytes = max_result_bytes
        self._user_agent = user_agent
        self._limit = limit
        self._guard = AddressGuard(allowed_networks)
        self._client: Client | None = None
        # What every call to one URL, with one job's headers or one timeout, shares:
        # parsed, checked and built once, not per run.
        self._urls: dict[str, URL | None] = {}
        self._headers: dict[tuple[Any, ...], CIMultiDict[str]] = {}

    async def start(self) -> None:
        """Open the connection pool; call it inside the event loop that dispatches."""
        if self._client is None:
            # Host names resolve through the guard and every socket is checked before it
            # connects, so a name that later resolves to a private address is refused too.
            # The client keeps no cookies, reads no proxy settings and decompresses nothing.
            self._client = Client(self._guard, limit=self._limit)

    async def close(self) -> None:
        """Close the pool and every connection in it."""
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    async def __aenter__(self) -> HttpDispatcher:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def dispatch(self, req: HttpRequest) -> Outcome:
        """Send one attempt and describe what came back; never raise."""
        return await self._guarded(req, None)

    async def post(self, req: HttpRequest, body: bytes, headers: Mapping[str, str]) -> Outcome:
        """Send ``body`` with Strait's ``headers`` (a webhook) under the same guard; never raise.

        ``req`` names the URL, the timeout and what the log says; its payload is not sent.
        """
        sent: CIMultiDict[str] = CIMultiDict({"User-Agent": self._user_agent})
        sent["Content-Type"] = "application/json"
        sent["Accept-Encoding"] = "identity"
        sent.update(headers)
        return await self._guarded(req, (body, sent))

    async def _guarded(
        self, req: HttpRequest, prepared: tuple[bytes, CIMultiDict[str]] | None
    ) -> Outcome:
        started = time.perf_counter()
        try:
            return await self._exchange(req, started, prepared)
        except Exception as exc:
            logger.exception(
                "Dispatching run %s to %s failed inside django-strait",
                req.run_id,
                req.url,
                extra={"run_id": req.run_id, "job": req.job, "attempt": req.attempt},
            )
            return failure(
                "dispatch.internal",
                f"{type(exc).__name__}: {exc}",
                endpoint=req.url,
                duration_ms=_elapsed_ms(started),
            )

    async def _exchange(
        self, req: HttpRequest, started: float, prepared: tuple[bytes, CIMultiDict[str]] | None
    ) -> Outcome:
        if self._client is None:
            await self.start()
        assert self._client is not None
        url = self._url(req.url)
        if url is None:
            return _invalid_url(req, _elapsed_ms(started))
        # An IP address in the URL never reaches the resolver: check it here.
        refused = self._guard.check_url(req.url)
        if refused is not None:
            return _blocked(req, refused, _elapsed_ms(started))
        # Job.clean checks the same rules; a row written around it fails here, once.
        problem, base = self._job_headers(req.headers)
        if problem is not None:
            return _invalid_header(req, problem, _elapsed_ms(started))
        if prepared is None:
            body = encode_body(req)
            headers = _with_run_headers(base, req, body)
        else:
            body, headers = prepared
        try:
            answer = await self._client.send(
                req.method, url, headers, body, timeout=req.timeout, read_limit=self._read_limit
            )
        except RequestTimeout as exc:
            return _timeout(req, exc.status, _elapsed_ms(started))
        except OSError as exc:
            refused = _refusal_in(exc)
            if refused is not None:
                return _blocked(req, refused, _elapsed_ms(started))
            status = getattr(exc, "status", None)
            return _unreachable(req, exc, status, _elapsed_ms(started))
        return _Answer.of(answer).outcome(req.url, self._max_result_bytes, _elapsed_ms(started))

    def _url(self, text: str) -> URL | None:
        """Return ``text`` parsed, or None if it is not an http(s) URL; parsed once per URL."""
        try:
            return self._urls[text]
        except KeyError:
            pass
        url: URL | None = None
        if text.lower().startswith(("http://", "https://")):
            try:
                parsed = URL(text)
            except (TypeError, ValueError):
                parsed = None
            url = parsed if parsed is not None and parsed.raw_host else None
        _remember(self._urls, text, url)
        return url

    def _job_headers(self, job_headers: Mapping[str, Any]) -> tuple[str | None, CIMultiDict[str]]:
        """Return why a job's headers cannot be sent (or None) and what every run of it sends."""
        key = _headers_key(job_headers)
        base = self._headers.get(key) if key is not None else None
        if base is not None:
            return None, base
        problem = unsendable_header(job_headers)
        if problem is not None:
            # Not kept: only sendable headers are, whose names and values are all text.
            return problem, _NO_HEADERS
        base = _base_headers(job_headers, self._user_agent)
        if key is not None:
            _remember(self._headers, key, base)
        return None, base

    def _read_limit(self, status: int) -> int:
        # One byte past the limit tells "exactly the limit" from "longer".
        if 200 <= status < 300:
            return self._max_result_bytes + 1
        return _FAILURE_READ_BYTES


def _headers_key(job_headers: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """Return a job's headers as a dictionary key, or None if they cannot be one."""
    try:
        key = tuple(job_headers.items())
        hash(key)
    except (AttributeError, TypeError):
        return None  # not a mapping, or a value such as a list: never sendable anyway
    return key


def _remember(cache: dict[Any, Any], key: Any, value: Any) -> None:
    # Bounded without an LRU's bookkeeping: endpoints and jobs are few, so a full cache is rare.
    if len(cache) >= _PREPARED_SIZE:
        cache.clear()
    cache[key] = value


def _elapsed_ms(started: float) -> int:
    return int((time.perf_counter() - started) * 1000)


def _timeout(req: HttpRequest, status: int | None, duration_ms: int) -> Outcome:
    return failure(
        "http.timeout",
        f"No complete response from {req.url} within {req.timeout:g} s",
        attempt_outcome="timed_out",
        status_code=status,
        endpoint=req.url,
        duration_ms=duration_ms,
    )


def _invalid_url(req: HttpRequest, duration_ms: int) -> Outcome:
    return failure(
        "http.invalid_url",
        f"Cannot call {req.url!r}: not a valid http:// or https:// URL",
        retryable=False,
        endpoint=req.url,
        duration_ms=duration_ms,
    )


def _invalid_header(req: HttpRequest, problem: str, duration_ms: int) -> Outcome:
    return failure(
        "http.invalid_header",
        f"Cannot send the job's headers: {problem}",
        retryable=False,
        endpoint=req.url,
        duration_ms=duration_ms,
    )


def _refusal_in(exc: BaseException) -> Refusal | None:
    """Return the guard's refusal behind a connection error (the client wraps it), if any."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, AddressRefused):
            return seen.refusal
        wrapped = getattr(seen, "os_error", None)
        seen = wrapped if isinstance(wrapped, BaseException) else seen.__cause__
    return None


def _blocked(req: HttpRequest, refused: Refusal, duration_ms: int) -> Outcome:
    return failure(
        "ssrf.blocked",
        refused.message,
        retryable=False,
        endpoint=req.url,
        duration_ms=duration_ms,
    )


def _unreachable(
    req: HttpRequest, exc: BaseException, status: int | None, duration_ms: int
) -> Outcome:
    return failure(
        "http.connect",
        f"Could not complete the call to {req.url}: {type(exc).__name__}: {exc}",
        status_code=status,
        endpoint=req.url,
        duration_ms=duration_ms,
    )


@dataclass(frozen=True, slots=True)
class _Answer:
    """What the endpoint answered, read as far as needed."""

    status: int
    headers: Mapping[str, str]
    charset: str
    body: bytes

    @classmethod
    def of(cls, response: Response) -> _Answer:
        # The charset read from Content-Type once, not at each excerpt of the body.
        return cls(response.status, response.headers, response.charset or "utf-8", response.body)

    def outcome(self, url: str, max_result_bytes: int, duration_ms: int) -> Outcome:
        """Map status, Strait-Action and Retry-After to an Outcome."""
        cost, cost_note = self._cost()
        common: dict[str, Any] = {
            "status_code": self.status,
            "endpoint": url,
            "duration_ms": duration_ms,
            "cost": cost,
        }
        requested, note = self._requested_action()
        note += cost_note
        if requested is not None:
            return self._action(requested, url, common)
        if 200 <= self.status < 300:
            return success(self._result(max_result_bytes), error=note, **common)
        return self._failure(url, note, common)

    def _requested_action(self) -> tuple[Action | None, str]:
        value = self.headers.get(ACTION_HEADER)
        if value is None:
            return None, ""
        requested = _ACTIONS.get(value.strip().lower())
        if requested is None:
            return None, f" (ignored {ACTION_HEADER}: {value!r}; allowed: {_ALLOWED_ACTIONS})"
        return requested, ""

    def _cost(self) -> tuple[Decimal | None, str]:
        value = self.headers.get(COST_HEADER)
        if value is None:
            return None, ""
        try:
            cost = Decimal(value.strip())
        except InvalidOperation:
            cost = None
        if cost is None or not cost.is_finite() or cost < 0 or cost >= MAX_COST:
            return None, f" (ignored {COST_HEADER}: {value!r}; allowed: a number >= 0)"
        return cost, ""

    def _action(self, requested: Action, url: str, common: dict[str, Any]) -> Outcome:
        text = excerpt(self.body, self.charset)
        # An explicit "retry" may carry its own delay whatever the status.
        retry_after = self._retry_after() if requested is Action.RETRY else None
        message = f"HTTP {self.status} from {url} asked to {requested.value}{_tail(text)}"
        return action(
            requested,
            f"http.{self.status}",
            message,
            retry_after=retry_after,
            response_excerpt=text,
            **common,
        )

    def _failure(self, url: str, note: str, common: dict[str, Any]) -> Outcome:
        status = self.status
        text = excerpt(self.body, self.charset)
        message = f"HTTP {status} from {url}"
        if 300 <= status < 400:
            location = self.headers.get("Location", "none given")
            message += f" (redirects are not followed; Location: {location})"
        retry_after = self._retry_after() if status in _RETRY_AFTER_STATUSES else None
        return failure(
            f"http.{status}",
            message + _tail(text) + note,
            retryable=status in _RETRYABLE_STATUSES or 500 <= status <= 599,
            retry_after=retry_after,
            response_excerpt=text,
            **common,
        )

    def _retry_after(self) -> float | None:
        return parse_retry_after(self.headers.get("Retry-After"), time.time())

    def _result(self, limit: int) -> Any:
        body = self.body
        if len(body) > limit:
            return trim(body, limit, self.charset)
        if not body:
            return None
        is_json, value = parse_json(body)
        return value if is_json else decode(body, self.charset)


def _tail(text: str) -> str:
    """Return ``": <first line of the excerpt>"`` for an error message, or nothing."""
    line = " ".join(text.split())[:_ERROR_EXCERPT_CHARS]
    return f": {line}" if line else ""
