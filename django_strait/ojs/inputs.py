"""What OJS requests carry, checked: each refusal names the field and what is allowed."""

from __future__ import annotations

import datetime as dt
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django_strait.conf import strait_settings
from django_strait.ojs import errors
from django_strait.ojs.errors import OjsError
from django_strait.ojs.ids import is_uuid7, uuid7
from django_strait.ojs.unique import Policy, policy
from django_strait.rules import bounds
from django_strait.rules.json_text import JSONRefused, loads
from django_strait.rules.retry import PolicyError, parse_duration

#: OJS's patterns for a job type (dot-separated lowercase names) and a queue name.
TYPE_PATTERN = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_-]*)*\Z")
QUEUE_PATTERN = re.compile(r"^[a-z0-9][a-z0-9.\-]*\Z")
TYPE_MAX_LENGTH = 200
QUEUE_MAX_LENGTH = 100
#: The longest visibility or execution timeout (as every duration: bounds.MAX_DURATION_SECS).
MAX_MS = int(bounds.MAX_DURATION_SECS * 1000)
#: Most jobs one fetch returns, and one batch enqueues.
FETCH_MAX = 1000
BATCH_MAX = 1000
#: The range of an OJS time (scheduled_at, delay_until, expires_at). Wider than trigger()'s
#: ten years ahead: OJS clients schedule in years like 2099 (the conformance suite does).
EARLIEST = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
LATEST = dt.datetime(9000, 1, 1, tzinfo=dt.UTC)
#: The highest attempt an ack or nack may name (a run's attempt is a 32-bit integer).
MAX_ATTEMPT = 2**31 - 1
#: The worker id of a fetch or heartbeat that names none.
ANONYMOUS = "ojs:anonymous"
#: Envelope keys read by the binding; the rest are kept and returned as they came.
KNOWN_KEYS = frozenset({"id", "type", "args", "meta", "options", "specversion"})


@dataclass(frozen=True)
class Enqueue:
    """One job to enqueue, checked."""

    type: str
    args: list[Any]
    meta: dict[str, Any]
    id: Any
    queue: str
    priority: int | None
    run_at: dt.datetime | None
    retry: dict[str, Any] | None
    envelope: dict[str, Any] = field(default_factory=dict)
    #: ``options.unique``, checked, with the job's key (``ojs.unique``).
    unique: Policy | None = None
    #: ``options.rate_limit`` as (most starts, per seconds): the queue's limit from now on.
    rate_limit: tuple[int, float] | None = None
    #: Whether the client chose ``id`` (else the server made it, a UUIDv7 no other meets).
    chosen_id: bool = False


def job_request(body: Any, prefix: str = "") -> Enqueue:
    """Check one enqueue envelope (``prefix``: where it sits in a batch)."""
    if not isinstance(body, Mapping):
        raise errors.invalid_payload(f"{prefix or 'the body'} must be a JSON object (a job)")
    kind = body.get("type")
    if not isinstance(kind, str) or len(kind) > TYPE_MAX_LENGTH or not TYPE_PATTERN.match(kind):
        raise errors.invalid_request(
            f"{prefix}type",
            f"must be a job type of lowercase dot-separated names (e.g. email.send), got {kind!r}",
        )
    if "args" not in body or not isinstance(body["args"], list):
        raise errors.invalid_request(f"{prefix}args", "must be a JSON array (the job's arguments)")
    meta = body.get("meta") or {}
    if not isinstance(meta, Mapping):
        raise errors.invalid_request(f"{prefix}meta", "must be a JSON object")
    options = body.get("options") or {}
    if not isinstance(options, Mapping):
        raise errors.invalid_request(f"{prefix}options", "must be a JSON object")
    return _with_options(body, kind, dict(meta), options, prefix)


def _with_options(
    body: Mapping[str, Any],
    kind: str,
    meta: dict[str, Any],
    options: Mapping[str, Any],
    prefix: str,
) -> Enqueue:
    opt = f"{prefix}options."
    extra_meta = options.get("metadata") or {}
    if not isinstance(extra_meta, Mapping):
        raise errors.invalid_request(f"{opt}metadata", "must be a JSON object")
    envelope: dict[str, Any] = {"extra": {k: v for k, v in body.items() if k not in KNOWN_KEYS}}
    envelope["options"] = dict(options)
    for key in ("timeout_ms", "visibility_timeout_ms"):
        if options.get(key) is not None:
            envelope[key] = milliseconds(options[key], f"{opt}{key}")
    if options.get("tags") is not None:
        envelope["tags"] = _tags(options["tags"], f"{opt}tags")
    if options.get("expires_at") is not None:
        given = options["expires_at"]
        moment = when(given, f"{opt}expires_at")  # returned as the client wrote an absolute time
        envelope["expires_at"] = given if not given.startswith("+") else _stamp(moment)
    queue = queue_name(options.get("queue", "default"), f"{opt}queue")
    meta = {**meta, **extra_meta}
    # retry and unique: in options (the HTTP binding) or at the top (the SDKs' and the spec's
    # job examples); options wins.
    retry_at, given_retry = _either(body, options, "retry", prefix)
    unique_at, given_unique = _either(body, options, "unique", prefix)
    unique = None
    if given_unique is not None:
        unique = policy(given_unique, unique_at, kind, queue, list(body["args"]), meta)
        envelope["unique_key"] = unique.key
    return Enqueue(
        type=kind,
        args=list(body["args"]),
        meta=meta,
        id=_id(body.get("id"), f"{prefix}id"),
        queue=queue,
        priority=_priority(options.get("priority"), f"{opt}priority"),
        run_at=_run_at(options, opt),
        retry=_retry(given_retry, retry_at),
        envelope=envelope,
        unique=unique,
        rate_limit=_rate_limit(options.get("rate_limit"), f"{opt}rate_limit"),
        chosen_id=body.get("id") is not None,
    )


#: The windows of ``options.rate_limit``'s fields, in seconds.
RATE_FIELDS = {"max_per_second": 1.0, "max_per_minute": 60.0, "max_per_hour": 3600.0}


def _rate_limit(value: Any, name: str) -> tuple[int, float] | None:
    """``{max_per_second | max_per_minute | max_per_hour: n}`` or ``{limit: n, period: "PT1M"}``."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise errors.invalid_request(name, 'must be an object such as {"max_per_second": 10}')
    given = [(value[k], secs, k) for k, secs in RATE_FIELDS.items() if value.get(k) is not None]
    if value.get("limit") is not None:
        try:
            window = parse_duration(value.get("period", "PT1S"), field=f"{name}.period")
        except PolicyError as exc:
            raise errors.invalid_request(
                f"{name}.period", f"{exc.problem}; must be {exc.allowed}"
            ) from None
        given.append((value["limit"], window, "limit"))
    if len(given) != 1:
        raise errors.invalid_request(
            name,
            "must give one of max_per_second, max_per_minute, max_per_hour, or limit (with period)",
        )
    most, window, key = given[0]
    if isinstance(most, bool) or not isinstance(most, int) or not 1 <= most <= 1_000_000:
        raise errors.invalid_request(
            f"{name}.{key}", f"must be an integer from 1 to 1000000, got {most!r}"
        )
    if not 0 < window <= bounds.MAX_DURATION_SECS:
        raise errors.invalid_request(f"{name}.period", "must be a positive duration")
    return most, float(window)


def _either(
    body: Mapping[str, Any], options: Mapping[str, Any], key: str, prefix: str
) -> tuple[str, Any]:
    """``options.<key>`` if given, else the envelope's own ``<key>``; with where it was."""
    if options.get(key) is not None:
        return f"{prefix}options.{key}", options[key]
    return f"{prefix}{key}", body.get(key)


def _id(value: Any, name: str) -> Any:
    if value is None:
        return uuid7()
    if not is_uuid7(value):
        raise errors.invalid_request(name, f"must be a lowercase UUIDv7, got {value!r}")
    return uuid.UUID(value)


def queue_name(value: Any, name: str) -> str:
    """Return a queue name in OJS's pattern (lowercase letters, digits, dots, hyphens)."""
    if (
        not isinstance(value, str)
        or len(value) > QUEUE_MAX_LENGTH
        or not QUEUE_PATTERN.match(value)
    ):
        raise errors.invalid_request(
            name,
            "must be a queue name of lowercase letters, digits, '.' and '-', starting with a "
            f"letter or digit, at most {QUEUE_MAX_LENGTH} characters; got {value!r}",
        )
    return value


def _priority(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not -100 <= value <= 100:
        raise errors.invalid_request(name, f"must be an integer from -100 to 100, got {value!r}")
    return value


def milliseconds(value: Any, name: str) -> int:
    """Return a positive whole number of milliseconds up to ``MAX_MS``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_MS:
        raise errors.invalid_request(
            name, f"must be an integer from 1 to {MAX_MS} (ms), got {value!r}"
        )
    return value


def _tags(value: Any, name: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise errors.invalid_request(name, "must be an array of strings")
    return value


def _run_at(options: Mapping[str, Any], opt: str) -> dt.datetime | None:
    given = [k for k in ("scheduled_at", "delay_until") if options.get(k) is not None]
    if len(given) > 1:
        raise errors.invalid_request(
            f"{opt}scheduled_at", "give scheduled_at or delay_until, not both"
        )
    return when(options[given[0]], f"{opt}{given[0]}") if given else None


def when(value: Any, name: str, now: dt.datetime | None = None) -> dt.datetime:
    """Read an RFC 3339 time, or one relative to now (``+PT2S``, ``+5m``)."""
    now = now or dt.datetime.now(dt.UTC)
    if isinstance(value, str) and value.startswith("+"):
        try:
            return now + dt.timedelta(seconds=parse_duration(value[1:], field=name))
        except PolicyError as exc:
            raise errors.invalid_request(name, f"{exc.problem}; must be {exc.allowed}") from None
    try:
        moment = dt.datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise errors.invalid_request(
            name,
            f"must be an RFC 3339 time with its offset (2026-01-01T00:00:00Z) or +PT5S; got {value!r}",
        )
    try:
        utc = moment.astimezone(dt.UTC)
    except OverflowError:  # 9999-12-31T23:59:59-23:59 is past year 9999 in UTC
        utc = None
    if utc is None or not EARLIEST <= utc <= LATEST:
        raise errors.invalid_request(
            name, f"must be from {EARLIEST:%Y} to {LATEST:%Y} in UTC, got {value!r}"
        )
    return utc


def _stamp(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _retry(value: Any, name: str) -> dict[str, Any] | None:
    """An OJS policy, on OJS's defaults (docs/retry.md): its fields are checked at enqueue."""
    if value is None:
        return {"preset": "ojs"}
    if not isinstance(value, Mapping):
        raise errors.invalid_request(name, "must be a JSON object (an OJS retry policy)")
    return {"preset": "ojs", **value}


def fetch_request(body: Mapping[str, Any]) -> tuple[list[str], int, str, int]:
    """Check a fetch: queues (in order), count, worker id, visibility timeout in ms."""
    queues = body.get("queues", ["default"])
    if not isinstance(queues, list) or not queues:
        raise errors.invalid_request("queues", "must be a non-empty array of queue names")
    names = [queue_name(q, f"queues[{i}]") for i, q in enumerate(queues)]
    count = body.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= FETCH_MAX:
        raise errors.invalid_request(
            "count", f"must be an integer from 1 to {FETCH_MAX}, got {count!r}"
        )
    worker = worker_id(body.get("worker_id"))
    vis = body.get("visibility_timeout_ms")
    return (
        names,
        count,
        worker,
        default_visibility_ms() if vis is None else milliseconds(vis, "visibility_timeout_ms"),
    )


@dataclass(frozen=True)
class Holder:
    """Whose reservation an ack or nack says it ends: the fetch's worker id, the job's attempt.

    Either may be missing (the SDKs send neither): what is missing is not checked.
    """

    worker: str | None = None
    attempt: int | None = None


def holder(body: Mapping[str, Any]) -> Holder:
    """Read ``worker_id`` and ``attempt`` of an ack or nack; each is checked when given."""
    worker = body.get("worker_id")
    attempt = body.get("attempt")
    if attempt is not None and (
        isinstance(attempt, bool) or not isinstance(attempt, int) or not 1 <= attempt <= MAX_ATTEMPT
    ):
        raise errors.invalid_request(
            "attempt",
            f"must be the fetched job's attempt, an integer from 1 to {MAX_ATTEMPT}, got {attempt!r}",
        )
    return Holder(None if worker in (None, "") else worker_id(worker), attempt)


def default_visibility_ms() -> int:
    """A fetched job's visibility when neither it nor the fetch names one (30 s by default)."""
    return int(strait_settings.OJS_VISIBILITY_TIMEOUT * 1000)


def worker_id(value: Any) -> str:
    """Return the worker's id as Strait records it (``ojs:`` + the id, or ``ojs:anonymous``)."""
    if value is None or value == "":
        return ANONYMOUS
    if not isinstance(value, str) or len(value) > 190 or "\x00" in value:
        raise errors.invalid_request("worker_id", "must be a string of at most 190 characters")
    return f"ojs:{value}"


def body_of(raw: bytes, declared_too_long: bool) -> dict[str, Any]:
    """The request's JSON object; an empty, oversized or unreadable body is refused (the DRF
    views' and the fast door's one reader)."""
    limit = strait_settings.API_MAX_PAYLOAD_BYTES
    if declared_too_long or len(raw) > limit:
        raise OjsError(
            413,
            "invalid_payload",
            f"the body is over {limit} bytes (STRAIT['API_MAX_PAYLOAD_BYTES'])",
        )
    if not raw.strip():
        raise errors.invalid_payload("the request body is empty; send a JSON object")
    try:
        value = loads(raw.decode("utf-8"))
    except JSONRefused as exc:
        raise errors.invalid_payload(f"{exc.field}: {exc.message}") from None
    except ValueError as exc:
        raise errors.invalid_payload(f"the body is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise errors.invalid_payload("the request body must be a JSON object")
    return value


def heartbeat(body: Mapping[str, Any]) -> tuple[list[str], int | None, str]:
    """A heartbeat's job ids, visibility timeout (ms) and worker id, each checked."""
    ids = body.get("active_jobs")
    if not isinstance(ids, list):  # JS and Go: a count here, the ids beside it
        ids = body.get("active_job_ids") or []
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise errors.invalid_request("active_jobs", "must be an array of job ids")
    vis = body.get("visibility_timeout_ms")
    vis = None if vis is None else milliseconds(vis, "visibility_timeout_ms")
    return ids, vis, worker_id(body.get("worker_id"))
