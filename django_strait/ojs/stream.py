"""``GET /ojs/v1/events/stream``: the events of ``/ojs/v1/events`` as Server-Sent Events.

The spec leaves the transport to the server (ojs-events, section 2: "HTTP streaming
(Server-Sent Events)" among others). Bounded so that a client cannot hold a server
thread for ever: the stream ends after ``max_seconds`` (``STREAM_MAX_SECONDS`` at
most; the client reconnects, sending ``Last-Event-ID`` or ``since``), sends a comment
line every ``HEARTBEAT_SECONDS`` so proxies keep it open, and reads the database
once per ``POLL_SECONDS``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.db import close_old_connections
from django.utils import timezone

from django_strait.api.auth import QueueScope
from django_strait.ojs import errors, events
from django_strait.ojs.inputs import when
from django_strait.ojs.present import stamp

STREAM_MAX_SECONDS = 300
DEFAULT_SECONDS = 60
HEARTBEAT_SECONDS = 15
POLL_SECONDS = 1.0
#: Events sent per poll at most (the newest ``events.recent`` finds).
BATCH = 200
NAMES_MAX = 50


@dataclass(frozen=True)
class Wanted:
    """The stream's filters and length, checked."""

    types: list[str]
    queues: list[str]
    seconds: float
    since: str

    @classmethod
    def of(cls, params: Mapping[str, Any]) -> Wanted:
        types = [t for t in str(params.get("types", "")).split(",") if t]
        unknown = [t for t in types if t not in events.EVENT_TYPES]
        if unknown:
            raise errors.invalid_request(
                "types",
                f"unknown event type {unknown[0]!r}; known: {', '.join(events.EVENT_TYPES)}",
            )
        queues = [q for q in str(params.get("queues", "")).split(",") if q]
        if len(queues) > NAMES_MAX or any(len(q) > 100 for q in queues):
            raise errors.invalid_request(
                "queues", f"at most {NAMES_MAX} names of 1 to 100 characters"
            )
        raw = params.get("max_seconds", DEFAULT_SECONDS)
        try:
            seconds = float(raw)
        except (TypeError, ValueError):
            seconds = -1.0
        if not 1 <= seconds <= STREAM_MAX_SECONDS:
            raise errors.invalid_request(
                "max_seconds",
                f"must be a number of seconds from 1 to {STREAM_MAX_SECONDS}, got {raw!r}",
            )
        since = str(params.get("since", ""))
        if since and not _is_stamp(since):
            raise errors.invalid_request("since", "must be an RFC 3339 time (an event's time)")
        return cls(types, queues, seconds, since)


def _is_stamp(text: str) -> bool:
    try:
        when(text, "since")
    except errors.OjsError:
        return False
    return len(text) <= 40


def events_after(
    wanted: Wanted, scope: QueueScope, since: str, seen: set[str]
) -> list[dict[str, Any]]:
    """The events from ``since`` on not ``seen`` yet, oldest first."""
    found = events.recent(wanted.types, wanted.queues, BATCH, scope)
    return [e for e in reversed(found) if (e["time"] or "") >= since and e["id"] not in seen]


class _Frames:
    """What one stream sends, poll by poll: each event once, a heartbeat now and then."""

    def __init__(self, wanted: Wanted, scope: QueueScope, clock=time.monotonic) -> None:
        self.wanted, self.scope, self.clock = wanted, scope, clock
        self.end = clock() + wanted.seconds
        self.since = wanted.since or (stamp(_now()) or "")
        self.seen: set[str] = set()
        self.beat = clock()

    def opening(self) -> bytes:
        head = f"retry: {int(POLL_SECONDS * 1000)}\n: stream open for {self.wanted.seconds:g} s\n\n"
        return head.encode()

    def poll(self) -> list[bytes]:
        """The frames of one poll (reads the database)."""
        out = []
        for event in events_after(self.wanted, self.scope, self.since, self.seen):
            if len(self.seen) > 10 * BATCH:
                self.seen.clear()
            self.seen.add(event["id"])
            self.since = max(self.since, event["time"] or "")
            data = json.dumps(event)
            out.append(f"id: {event['id']}\nevent: {event['type']}\ndata: {data}\n\n".encode())
        if self.clock() - self.beat >= HEARTBEAT_SECONDS:
            self.beat = self.clock()
            out.append(b": heartbeat\n\n")
        return out

    def open(self) -> bool:
        return self.clock() < self.end

    def pause(self) -> float:
        return min(POLL_SECONDS, max(self.end - self.clock(), 0))


ENDING = b'event: end\ndata: {"reason": "max_seconds"}\n\n'


def frames(wanted: Wanted, scope: QueueScope) -> Iterator[bytes]:
    """Yield SSE frames until ``wanted.seconds`` have passed (a WSGI server's thread)."""
    stream = _Frames(wanted, scope)
    yield stream.opening()
    try:
        while stream.open():
            yield from stream.poll()
            time.sleep(stream.pause())
        yield ENDING
    finally:
        close_old_connections()


async def async_frames(wanted: Wanted, scope: QueueScope) -> AsyncIterator[bytes]:
    """The same under ASGI: each poll in Django's sync thread, the waits in the event loop
    (a sync iterator would be read whole before the first byte went out)."""
    stream = _Frames(wanted, scope)
    yield stream.opening()
    while stream.open():
        for frame in await sync_to_async(stream.poll)():
            yield frame
        await asyncio.sleep(stream.pause())
    yield ENDING


def _now():
    return timezone.now()
