"""Per-minute series for the overview and the drill-down pages, read without scanning history.

Counts come from the rollups the workers write (``RunRollup``), lag from the
queue sampler (``QueueSample``), and latency from the last hour of attempts
through ``strait_attempt_started``: counted per minute in the database, and
their durations read from an even sample of at most ``SAMPLE`` of them (every
k-th id), so that a busy hour costs no more than a quiet one.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from django.db.models import Count, F, Q, Sum
from django.db.models.functions import TruncMinute
from django.utils import timezone

from django_strait.models import QueueSample, RunAttempt, RunRollup
from django_strait.rules.states import TERMINAL, RunStatus
from django_strait.storage.rows import readable_instants

#: The window every series covers, one point a minute.
WINDOW = dt.timedelta(hours=1)
#: The most attempt durations a latency series reads: an even sample of the window.
SAMPLE = 6_000


def minutes_of(now: dt.datetime, window: dt.timedelta = WINDOW) -> list[dt.datetime]:
    """Return the start of every minute in the window ending at ``now``, oldest first."""
    last = now.replace(second=0, microsecond=0)
    count = int(window.total_seconds() // 60)
    return [last - dt.timedelta(minutes=count - 1 - i) for i in range(count)]


def labels(minutes: Sequence[dt.datetime]) -> list[str]:
    """``HH:MM`` in the site's time zone, one per minute."""
    return [f"{timezone.localtime(m):%H:%M}" for m in minutes]


def percentile(ordered: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0-1) of sorted values, nearest rank (the value an attempt had)."""
    return ordered[max(math.ceil(q * len(ordered)) - 1, 0)]


def outcome_counts(
    minutes: Sequence[dt.datetime], using: str | None, job_id: int | None = None
) -> dict[dt.datetime, dict[str, int]]:
    """Attempts that ended in each minute, by where they left their run (the rollups)."""
    rows = RunRollup.objects.using(using).filter(
        readable_instants("minute"), minute__gte=minutes[0]
    )
    if job_id is not None:
        rows = rows.filter(job_id=job_id)
    counts: dict[dt.datetime, dict[str, int]] = {m: {} for m in minutes}
    for minute, status, n in (
        rows.values_list("minute", "status").annotate(n=Sum("count")).order_by()
    ):
        counts.setdefault(minute, {})[status] = n
    return counts


@dataclass(frozen=True, slots=True)
class RunCounts:
    """Per minute: attempts ended, runs finished, runs completed; and the ratios read from them."""

    attempts: tuple[int, ...]
    finished: tuple[int, ...]
    completed: tuple[int, ...]

    @classmethod
    def of(cls, minutes: Sequence[dt.datetime], counts: dict) -> RunCounts:
        by_minute = [counts.get(m, {}) for m in minutes]
        return cls(
            tuple(sum(c.values()) for c in by_minute),
            tuple(sum(n for s, n in c.items() if s in TERMINAL) for c in by_minute),
            tuple(c.get(RunStatus.COMPLETED, 0) for c in by_minute),
        )

    def success_rate(self) -> list[float | None]:
        """Percent of the runs finished in each minute that completed (None: none finished)."""
        return [
            100 * c / f if f else None for c, f in zip(self.completed, self.finished, strict=True)
        ]

    def attempts_per_run(self) -> list[float | None]:
        """Attempts ended per run finished, each minute (retries included)."""
        return [a / f if f else None for a, f in zip(self.attempts, self.finished, strict=True)]


@dataclass(frozen=True, slots=True)
class Latency:
    """Per minute, of the attempts that started in it: p50 and p95 durations, and how many."""

    p50: tuple[float | None, ...]
    p95: tuple[float | None, ...]
    attempts: tuple[int, ...]
    succeeded: tuple[int, ...]
    runs: tuple[int, ...]

    def success_rate(self) -> list[float | None]:
        return [
            100 * s / a if a else None for s, a in zip(self.succeeded, self.attempts, strict=True)
        ]

    def attempts_per_run(self) -> list[float | None]:
        return [a / r if r else None for a, r in zip(self.attempts, self.runs, strict=True)]


def latency(
    minutes: Sequence[dt.datetime],
    using: str | None,
    *,
    job_id: int | None = None,
    endpoint: str | None = None,
) -> Latency:
    """Read the window's attempts (of a job, or at an endpoint) and summarize them per minute."""
    rows = RunAttempt.objects.using(using).filter(
        readable_instants("started_at"), started_at__gte=minutes[0]
    )
    if job_id is not None:
        rows = rows.filter(run__job_id=job_id)
    if endpoint is not None:
        rows = rows.filter(endpoint=endpoint)
    rows = rows.exclude(outcome="short_circuited")
    counted = {
        r["at"]: r
        for r in rows.annotate(at=TruncMinute("started_at"))
        .values("at")
        .annotate(
            n=Count("id"),
            ok=Count("id", filter=Q(outcome="succeeded")),
            runs=Count("run_id", distinct=True),
        )  # fmt: skip
        .order_by()
    }
    counted = {_minute(at): r for at, r in counted.items()}
    step = max(1, math.ceil(sum(r["n"] for r in counted.values()) / SAMPLE))
    sampled = rows.annotate(k=F("id") % step).filter(k=0) if step > 1 else rows
    durations: dict[dt.datetime, list[int]] = defaultdict(list)
    for started, ms in sampled.values_list("started_at", "duration_ms").order_by():
        durations[_minute(started)].append(ms)
    ordered = {m: sorted(v) for m, v in durations.items()}
    return Latency(
        tuple(percentile(ordered[m], 0.5) if m in ordered else None for m in minutes),
        tuple(percentile(ordered[m], 0.95) if m in ordered else None for m in minutes),
        tuple(counted[m]["n"] if m in counted else 0 for m in minutes),
        tuple(counted[m]["ok"] if m in counted else 0 for m in minutes),
        tuple(counted[m]["runs"] if m in counted else 0 for m in minutes),
    )


def _minute(at: dt.datetime) -> dt.datetime:
    """The UTC minute ``at`` falls in, as ``minutes_of`` names it."""
    return at.astimezone(dt.UTC).replace(second=0, microsecond=0)


def queue_lag(
    minutes: Sequence[dt.datetime], using: str | None, most: int = 5
) -> dict[str, list[float | None]]:
    """Each queue's sampled lag per minute (seconds), the ``most`` laggiest queues only."""
    rows = QueueSample.objects.using(using).filter(readable_instants("at"), at__gte=minutes[0])
    by_queue: dict[str, dict[dt.datetime, float]] = defaultdict(dict)
    for queue, at, lag in rows.values_list("queue", "at", "lag_seconds"):
        by_queue[queue][at] = lag
    laggiest = sorted(by_queue, key=lambda q: (-max(by_queue[q].values()), q))[:most]
    return {q: [by_queue[q].get(m) for m in minutes] for q in laggiest}


def slowest(latencies: list[Latency]) -> Latency:
    """Several aliases' latencies as one: counts summed, p50 and p95 the slowest alias's
    each minute (percentiles cannot be summed; the overview draws each alias's)."""

    def most(values) -> float | None:
        present = [v for v in values if v is not None]
        return max(present) if present else None

    return Latency(
        tuple(most(v) for v in zip(*(lat.p50 for lat in latencies), strict=True)),
        tuple(most(v) for v in zip(*(lat.p95 for lat in latencies), strict=True)),
        _zipped_sum(lat.attempts for lat in latencies),
        _zipped_sum(lat.succeeded for lat in latencies),
        _zipped_sum(lat.runs for lat in latencies),
    )


def _zipped_sum(rows) -> tuple[int, ...]:
    return tuple(sum(values) for values in zip(*rows, strict=True))
