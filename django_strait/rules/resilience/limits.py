"""Per-job concurrency and rate limits (docs/resilience.md): the rules, as pure functions.

The storage backends apply them inside the claim transaction, with the limited
jobs' rows locked, so that they hold across every worker and host
(``storage.Storage.enforce_limits``; one statement on PostgreSQL):

- **concurrency**: a job's dequeued and executing runs, this claim's included,
  never exceed its ``max_concurrency`` (0 or empty: no limit), scaled down while
  its endpoint is degraded (:func:`resilience.health.capped_concurrency`);
- **rate**: a sliding log of admissions. A claim counts the runs the job was
  let start in the last ``rate_limit_window_secs`` and adds at most enough to
  reach ``rate_limit_max``. Every admission is stamped with its claim's time,
  which its runs carry as ``started_at``, so no span of the window's length ever
  holds more than ``rate_limit_max`` starts (aligned windows let twice as many
  through across a boundary). A claim's time is taken before it waits for the
  job's row lock, so claims serialize out of clock order: an entry is dropped
  only :data:`RATE_LOG_KEPT` past the window (:func:`forget_before`), when no
  claim still waiting can count it.

Runs over a limit go back to queued, spending no attempt: over the concurrency
limit for :data:`CONCURRENCY_WAIT`, over the rate limit until the window's
oldest admission leaves it. Jobs without limits cost no statement at all.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django_strait.rules.resilience.health import capped_concurrency

#: How long a run over its job's concurrency limit waits before it is claimable again.
CONCURRENCY_WAIT = dt.timedelta(seconds=1)
CONCURRENCY_ERROR = "limit.concurrency"
RATE_ERROR = "limit.rate"
#: How long past its window a rate admission is kept: longer than any claim's clock
#: can lag behind the claim that serializes before it on the job's row lock.
RATE_LOG_KEPT = dt.timedelta(seconds=60)


@dataclass(frozen=True, slots=True)
class Pending:
    """A claimed run of a limited job, in claim order."""

    run_id: int
    job_id: int
    #: The health score of the job's endpoint, from the worker's cache (None: healthy,
    #: or a Python job): a degraded endpoint scales max_concurrency down.
    health_score: float | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    """What one job's limits let through of one claim, as read under the job row lock."""

    job_id: int
    max_concurrency: int | None
    #: The concurrency cap now (None: no concurrency limit).
    cap: int | None
    #: The job's runs dequeued or executing besides this claim's.
    others: int
    #: How many of this claim's runs the concurrency limit admits.
    admitted: int
    rate_max: int | None
    rate_window_secs: float | None
    #: How many of the admitted the rate limit grants (all when there is none).
    granted: int
    #: When the rate window's oldest admission leaves it.
    frees_at: dt.datetime | None
    health_score: float | None = None


@dataclass(frozen=True, slots=True)
class Held:
    """A run a limit sends back to queued: until when, and why."""

    run_id: int
    until: dt.datetime
    error_type: str
    reason: str


def is_limited(job: Any) -> bool:
    """Return whether claims of ``job`` need the limit check."""
    return bool(job.max_concurrency) or job.rate_limit_max is not None


def concurrency_cap(max_concurrency: int | None, share: float) -> int | None:
    """Return the concurrency cap at this health share (None: no limit; 0 is no limit)."""
    if not max_concurrency:
        return None
    return capped_concurrency(max_concurrency, share)


def concurrency_admits(cap: int | None, others: int, n: int) -> int:
    """Return how many of ``n`` claimed runs fit beside ``others`` under ``cap``."""
    return n if cap is None else min(n, max(0, cap - others))


def rate_grants(rate_max: int | None, used: int, n: int) -> int:
    """Return how many of ``n`` runs the rate limit lets start with ``used`` in the window."""
    return n if rate_max is None else min(n, max(0, rate_max - used))


def window_start(now: dt.datetime, secs: float) -> dt.datetime:
    """Return where the sliding window ending at ``now`` begins (admissions after it count)."""
    return now - dt.timedelta(seconds=secs)


def forget_before(now: dt.datetime, secs: float) -> dt.datetime:
    """Return the time at or before which admissions may be deleted from the log."""
    return window_start(now, secs) - RATE_LOG_KEPT


def holds(
    decisions: Iterable[Decision], runs_by_job: Mapping[int, list[int]], now: dt.datetime
) -> list[Held]:
    """Return the runs each decision sends back, in claim order: the last ones of each job."""
    held: list[Held] = []
    for d in decisions:
        runs = runs_by_job[d.job_id]
        if d.admitted < len(runs):
            reason = _concurrency_reason(d)
            until = now + CONCURRENCY_WAIT
            held += [Held(rid, until, CONCURRENCY_ERROR, reason) for rid in runs[d.admitted :]]
        if d.granted < d.admitted:
            until = d.frees_at or now
            reason = _rate_reason(d)
            held += [Held(rid, until, RATE_ERROR, reason) for rid in runs[d.granted : d.admitted]]
    return held


def _concurrency_reason(d: Decision) -> str:
    if d.cap is not None and d.cap < (d.max_concurrency or 0):
        cap = (
            f"its concurrency of {d.cap} (max_concurrency {d.max_concurrency}, scaled down "
            f"while its endpoint is degraded: health score {d.health_score or 0:.0f})"
        )
    else:
        cap = f"its max_concurrency of {d.cap}"
    return f"job at {cap} ({d.others} runs dequeued or executing); no attempt spent"


def _rate_reason(d: Decision) -> str:
    return (
        f"job at its rate limit of {d.rate_max} runs in any {d.rate_window_secs:g}s; "
        "no attempt spent"
    )
