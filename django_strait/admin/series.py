"""Per-minute series for the overview and the drill-down pages, read without scanning history.

Counts come from the rollups the workers write (``RunRollup``), lag from the
queue sampler (``QueueSample``), and latency from the last hour of attempts
through ``strait_attempt_started`` (at most ``MOST_ATTEMPTS`` of them, the
newest: percentiles of a sample that large are exact enough to read).
"""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from django.db.models import Q, Sum
from django.utils import timezone

from django_strait.models import QueueSample, RunAttempt, RunRollup
from django_strait.states import TERMINAL, RunStatus

#: The window every series covers, one point a minute.
WINDOW = dt.timedelta(hours=1)
#: The most attempts a latency series reads (the newest).
MOST_ATTEMPTS = 50_000


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
    rows = RunRollup.objects.using(using).filter(minute__gte=minutes[0])
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
    rows = RunAttempt.objects.using(using).filter(started_at__gte=minutes[0])
    if job_id is not None:
        rows = rows.filter(run__job_id=job_id)
    if endpoint is not None:
        rows = rows.filter(endpoint=endpoint)
    rows = rows.filter(~Q(outcome="short_circuited")).order_by("-started_at")
    durations: dict[dt.datetime, list[int]] = defaultdict(list)
    succeeded: dict[dt.datetime, int] = defaultdict(int)
    runs: dict[dt.datetime, set[int]] = defaultdict(set)
    picked = rows.values_list("started_at", "duration_ms", "outcome", "run_id")[:MOST_ATTEMPTS]
    for started, ms, outcome, run_id in picked:
        minute = started.replace(second=0, microsecond=0)
        durations[minute].append(ms)
        succeeded[minute] += outcome == "succeeded"
        runs[minute].add(run_id)
    ordered = {m: sorted(v) for m, v in durations.items()}
    return Latency(
        tuple(percentile(ordered[m], 0.5) if m in ordered else None for m in minutes),
        tuple(percentile(ordered[m], 0.95) if m in ordered else None for m in minutes),
        tuple(len(durations.get(m, ())) for m in minutes),
        tuple(succeeded.get(m, 0) for m in minutes),
        tuple(len(runs.get(m, ())) for m in minutes),
    )


def queue_lag(
    minutes: Sequence[dt.datetime], using: str | None, most: int = 5
) -> dict[str, list[float | None]]:
    """Each queue's sampled lag per minute (seconds), the ``most`` laggiest queues only."""
    rows = QueueSample.objects.using(using).filter(at__gte=minutes[0])
    by_queue: dict[str, dict[dt.datetime, float]] = defaultdict(dict)
    for queue, at, lag in rows.values_list("queue", "at", "lag_seconds"):
        by_queue[queue][at] = lag
    laggiest = sorted(by_queue, key=lambda q: (-max(by_queue[q].values()), q))[:most]
    return {q: [by_queue[q].get(m) for m in minutes] for q in laggiest}
