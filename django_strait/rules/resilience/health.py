"""Endpoint health (docs/resilience.md): a score from every result, and what each level allows.

Each batch of results a worker records is summarized per endpoint
(:func:`summarize`) and folded into the endpoint's ``EndpointHealth`` row with
the results (a part of the record: ``storage.record_parts``). A batch of
``n`` results moves each EWMA as ``n`` steps of weight ``alpha`` toward the
batch's mean would: ``new = old x (1 - alpha)^n + mean x (1 - (1 - alpha)^n)``.
The latency term is the EWMA of each batch's 95th-percentile duration.

What the levels allow, decided at claim:

- healthy (score > 60): nothing changes;
- degraded (30-60): a job with ``max_concurrency`` gets
  :func:`effective_concurrency`, down to 25 % of it at 30 (``resilience.limits``);
- unhealthy (< 30): its runs are held like an open circuit; one probe run is
  let through per ``CIRCUIT_COOLDOWN`` (won by a conditional update, so one
  across all workers), and its successes lift the score back.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable
from dataclasses import dataclass

from django.db import models

from django_strait.rules.resilience.policy import Admission, Result, Verdict, classify

#: Above this score an endpoint is healthy: its jobs run at full concurrency.
HEALTHY_ABOVE = 60.0
#: Below this score an endpoint is unhealthy: its runs are held like an open circuit.
UNHEALTHY_BELOW = 30.0
#: A degraded job's concurrency at UNHEALTHY_BELOW, as a share of its max_concurrency.
DEGRADED_FLOOR = 0.25


class HealthLevel(models.TextChoices):
    """Where an endpoint's score puts it."""

    HEALTHY = "healthy", "Healthy"
    DEGRADED = "degraded", "Degraded"
    UNHEALTHY = "unhealthy", "Unhealthy"


#: The error type of a run held because its endpoint is unhealthy.
UNHEALTHY_ERROR = "health.unhealthy"

__all__ = [
    "DEGRADED_FLOOR",
    "HEALTHY_ABOVE",
    "UNHEALTHY_BELOW",
    "Health",
    "HealthLevel",
    "Sample",
    "admit",
    "capped_concurrency",
    "concurrency_share",
    "effective_concurrency",
    "fold",
    "summarize",
]


@dataclass(frozen=True, slots=True)
class Answer:
    """One ended HTTP attempt, as health sees it."""

    endpoint_url: str
    succeeded: bool
    error_type: str
    status_code: int | None
    duration_ms: int
    timeout_secs: float


@dataclass(frozen=True, slots=True)
class Sample:
    """One endpoint's results in one recorded batch, ready to fold into its EWMAs."""

    endpoint_url: str
    count: int
    #: The old EWMAs' weight: (1 - alpha) ** count.
    keep: float
    success: float
    failure: float
    p95_ms: float
    timeout_ms: float


def summarize(answers: Iterable[Answer], *, alpha: float) -> list[Sample]:
    """Return one sample per endpoint, sorted by URL (rows are locked in that order).

    Answers that say nothing about the endpoint (refused before sending, such as
    ``ssrf.blocked``) are left out.
    """
    by_url: dict[str, list[tuple[Answer, Result]]] = {}
    for ans in answers:
        result = classify(ans.error_type, ans.status_code)
        if ans.succeeded or result is not Result.NEUTRAL:
            by_url.setdefault(ans.endpoint_url, []).append((ans, result))
    samples = []
    for url in sorted(by_url):
        group = by_url[url]
        n = len(group)
        durations = sorted(ans.duration_ms for ans, _ in group)
        samples.append(
            Sample(
                endpoint_url=url,
                count=n,
                keep=(1.0 - alpha) ** n,
                success=sum(ans.succeeded for ans, _ in group) / n,
                failure=sum(result is Result.FAILURE for _, result in group) / n,
                p95_ms=float(durations[math.ceil(0.95 * n) - 1]),
                timeout_ms=max(ans.timeout_secs for ans, _ in group) * 1000.0,
            )
        )
    return samples


#: Below this an EWMA, or the old values' weight, is 0: nothing this small changes a score,
#: and PostgreSQL raises on a float product that underflows to 0 (it would fail the record).
NEGLIGIBLE = 1e-12


def fold(old: float, new: float, keep: float) -> float:
    """Return an EWMA moved by a batch: the old value weighs ``keep``, the batch's the rest.

    The one definition: PostgreSQL's record statement calls ``django_strait_fold``,
    which computes the same (tests/conformance/test_agreement.py checks they agree).
    """
    # Every factor below NEGLIGIBLE counts as 0, so no product of two nonzero factors
    # is smaller than NEGLIGIBLE squared: PostgreSQL raises on a product that
    # underflows to 0, and the two definitions must agree on every input.
    old, new, keep = clip(old), clip(new), clip(keep)
    moved = old * keep + new * clip(1.0 - keep)
    return clip(moved)


def clip(value: float) -> float:
    """Return 0 for a value below NEGLIGIBLE (PostgreSQL refuses subnormal floats), else the value."""
    return 0.0 if value < NEGLIGIBLE else value


#: A new endpoint's EWMAs before its first batch: all answers good, none failing.
FRESH_SUCCESS_RATE = 1.0
FRESH_FAILURE_RATE = 0.0


# -- levels at claim -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Health:
    """An endpoint that is not healthy, as the claim gate sees it."""

    endpoint_url: str
    score: float
    level: str
    probe_started_at: dt.datetime | None = None

    @property
    def unhealthy(self) -> bool:
        return self.level == HealthLevel.UNHEALTHY


def admit(
    health: Health | None, *, now: dt.datetime, cooldown: dt.timedelta, may_probe: bool
) -> Admission:
    """Return whether a run may go to this endpoint now, as far as its health says.

    ``may_probe``: this run is the first of its endpoint in the batch (the
    others wait for the probe's result, as with a half-open circuit).
    """
    if health is None or not health.unhealthy:
        return Admission(Verdict.START)
    next_probe = (health.probe_started_at or now - cooldown) + cooldown
    if may_probe and next_probe <= now:
        return Admission(Verdict.PROBE)
    until = max(next_probe, now + dt.timedelta(seconds=1))
    return Admission(Verdict.HOLD, until, _reason(health), error_type=UNHEALTHY_ERROR)


def concurrency_share(score: float | None) -> float:
    """Return the share of max_concurrency a job may use at this endpoint score."""
    if score is None or score > HEALTHY_ABOVE:
        return 1.0
    if score < UNHEALTHY_BELOW:
        return DEGRADED_FLOOR  # held at the gate anyway, but never more than degraded
    span = (score - UNHEALTHY_BELOW) / (HEALTHY_ABOVE - UNHEALTHY_BELOW)
    return DEGRADED_FLOOR + (1.0 - DEGRADED_FLOOR) * span


def capped_concurrency(max_concurrency: int, share: float) -> int:
    """Return ``max_concurrency`` scaled by ``share``, at least 1 (PostgreSQL's limit statement too)."""
    return max(1, math.floor(max_concurrency * share))


def effective_concurrency(max_concurrency: int, score: float | None) -> int:
    """Return a job's concurrency limit at its endpoint's score (at least 1)."""
    return capped_concurrency(max_concurrency, concurrency_share(score))


def _reason(health: Health) -> str:
    return (
        f"endpoint {health.endpoint_url} is unhealthy (health score {health.score:.0f} < "
        f"{UNHEALTHY_BELOW:g}); one probe run per cooldown until it recovers; no attempt spent"
    )
