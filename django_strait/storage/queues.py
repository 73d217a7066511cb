"""Queue switches through storage (``QueueState``): pause, resume, an OJS queue's rate limit.

A claim reads which queues are paused from a per-process copy kept ``CACHE_SECS``
(one small read a second per process, not one per claim: the claim is the hot path),
dropped at once when this process pauses or resumes a queue. On PostgreSQL a pause or
resume also NOTIFYs ``QUEUE_STATE_CHANNEL`` at its commit: a listening worker
drops its copy then and wakes (a resumed queue's runs are due), and keeps its copy
``LISTENED_CACHE_SECS`` while its LISTEN holds (so an idle worker woken for one run
does not read the set before claiming it). Elsewhere, or for a worker that does not
listen, a pause reaches other processes within ``CACHE_SECS``. A run already claimed
goes on.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections import Counter
from collections.abc import Sequence

from django.db import connections, transaction
from django.db.models import Q

from django_strait.models import JobRun, QueueState
from django_strait.rules.states import RunStatus

#: How long a process keeps the set of paused queues before it reads it again.
CACHE_SECS = 1.0
#: The same while a listener of this process holds its LISTEN on the queues' database:
#: a pause or resume NOTIFYs it, which drops the copy at once, so this is only a safety
#: net. An idle worker woken for a run then claims without reading the set first.
LISTENED_CACHE_SECS = 60.0
#: The channel a pause or resume NOTIFYs on PostgreSQL (``wakeup.Listener`` listens).
QUEUE_STATE_CHANNEL = "django_strait_queue_state"

_cache: dict[str, tuple[float, frozenset[str], frozenset[str]]] = {}
_lock = threading.Lock()
#: The aliases a listener of this process hears pauses and resumes on now, with how many
#: listeners: one that stops late (its thread ends after the next one began) takes back
#: only its own, not the next one's.
_listened: Counter[str] = Counter()


def _kept(alias: str) -> tuple[float, frozenset[str], frozenset[str]]:
    now = time.monotonic()
    kept = _cache.get(alias)
    if kept is not None and kept[0] > now:
        return kept
    rows = QueueState.objects.using(alias).values_list("name", "paused_at", "rate_limit_max")
    rows = rows.filter(Q(paused_at__isnull=False) | Q(rate_limit_max__isnull=False))
    listed = list(rows)
    kept = (
        now + (LISTENED_CACHE_SECS if alias in _listened else CACHE_SECS),
        frozenset(name for name, at, _ in listed if at is not None),
        frozenset(name for name, _, most in listed if most is not None),
    )
    with _lock:
        _cache[alias] = kept
    return kept


def paused(alias: str = "default") -> frozenset[str]:
    """The paused queues' names, read at most once per ``CACHE_SECS`` per process."""
    return _kept(alias)[1]


def limited(alias: str = "default") -> frozenset[str]:
    """The names of the queues with a rate limit, kept as :func:`paused`."""
    return _kept(alias)[2]


def forget() -> None:
    """Drop the kept set: the next claim reads it again."""
    with _lock:
        _cache.clear()


def listened(alias: str, holds: bool) -> None:
    """Say whether a listener of this process hears ``alias``'s pauses and resumes now.

    The kept set is dropped when the alias goes from heard to not heard or back (what
    was sent while nobody listened is lost); not when another listener of the same
    alias comes or goes meanwhile.
    """
    with _lock:
        heard = alias in _listened
        if holds:
            _listened[alias] += 1
        elif _listened[alias] > 1:
            _listened[alias] -= 1
        else:  # the last listener of it (or one that never said it held)
            _listened.pop(alias, None)
        if heard != (alias in _listened):
            _cache.clear()


def unpaused(alias: str, queues: Sequence[str]) -> list[str]:
    """``queues`` without the paused ones, in their order."""
    held = paused(alias)
    return [q for q in queues if q not in held] if held else list(queues)


def set_paused(alias: str, name: str, pause: bool, now: dt.datetime) -> QueueState:
    """Pause (or resume) the queue ``name``; return its state as it is now."""
    with transaction.atomic(using=alias):
        state, _ = QueueState.objects.using(alias).select_for_update().get_or_create(name=name)
        if pause and state.paused_at is None:
            state.paused_at = now
        elif not pause:
            state.paused_at = None
        state.save(using=alias)
        connection = connections[alias]
        if connection.vendor == "postgresql":  # at the commit: other processes' workers
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_notify(%s, %s)", [QUEUE_STATE_CHANNEL, name])
    forget()
    return state


def state(alias: str, name: str) -> QueueState:
    """The queue's state (an unsaved, running one when it has no row)."""
    return QueueState.objects.using(alias).filter(name=name).first() or QueueState(name=name)


def set_rate_limit(alias: str, name: str, most: int, window_secs: float) -> None:
    """Limit OJS fetches from ``name`` to ``most`` starts per ``window_secs`` (no write when
    the queue has that limit already: every enqueue naming it says it again)."""
    rows = QueueState.objects.using(alias)
    if rows.filter(name=name, rate_limit_max=most, rate_limit_window_secs=window_secs).exists():
        return
    QueueState.objects.using(alias).update_or_create(
        name=name, defaults={"rate_limit_max": most, "rate_limit_window_secs": window_secs}
    )
    forget()


def rate_room(alias: str, name: str, now: dt.datetime) -> int | None:
    """How many runs of ``name`` may start now under its rate limit (None: no limit).

    Call inside the fetch's transaction: the queue's row is locked to its end, so
    two fetches from one limited queue count each other's starts.
    """
    row = (
        QueueState.objects.using(alias)
        .select_for_update()
        .filter(name=name, rate_limit_max__isnull=False)
        .values_list("rate_limit_max", "rate_limit_window_secs")
        .first()
    )
    if row is None:
        return None
    most, window = row
    since = now - dt.timedelta(seconds=window or 1.0)
    started = (
        JobRun.objects.using(alias)
        .filter(queue=name, started_at__gt=since)
        .exclude(status=RunStatus.QUEUED)
        .count()
    )
    return max(most - started, 0)
