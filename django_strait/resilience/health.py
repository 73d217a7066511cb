"""Endpoint health (DESIGN §5): a score from every result, and what each level allows.

Each batch of results a worker records is summarized per endpoint
(:func:`summarize`) and folded into the endpoint's ``EndpointHealth`` row in
the same statement as the results (``transitions.batch.record``). A batch of
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

from django.db.models import F, Q

from django_strait.models import EndpointHealth, HealthLevel
from django_strait.models.health import DEGRADED_FLOOR, HEALTHY_ABOVE, UNHEALTHY_BELOW
from django_strait.resilience.policy import Admission, Result, Verdict, classify

#: The error type of a run held because its endpoint is unhealthy.
UNHEALTHY_ERROR = "health.unhealthy"

__all__ = [
    "Health",
    "Sample",
    "admit",
    "effective_concurrency",
    "load_unwell",
    "summarize",
    "win_probe",
    "write",
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


def write(samples: Iterable[Sample], *, using: str | None = None) -> None:
    """Fold samples into their rows with the ORM (SQLite; PostgreSQL does it inside the record)."""
    for s in samples:
        rows = EndpointHealth.objects.using(using).filter(endpoint_url=s.endpoint_url)
        fresh = 1.0 - s.keep
        updated = rows.update(
            success_rate=F("success_rate") * s.keep + s.success * fresh,
            failure_rate=F("failure_rate") * s.keep + s.failure * fresh,
            latency_p95_ms=F("latency_p95_ms") * s.keep + s.p95_ms * fresh,
            timeout_ms=s.timeout_ms,
            samples=F("samples") + s.count,
        )
        if not updated:
            EndpointHealth.objects.using(using).create(
                endpoint_url=s.endpoint_url,
                success_rate=s.keep + s.success * fresh,
                failure_rate=s.failure * fresh,
                latency_p95_ms=s.p95_ms,
                timeout_ms=s.timeout_ms,
                samples=s.count,
            )


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


def load_unwell(*, using: str | None = None) -> dict[str, Health]:
    """Return the endpoints that are degraded or unhealthy (usually none)."""
    rows = (
        EndpointHealth.objects.using(using)
        .exclude(level=HealthLevel.HEALTHY)
        .values_list("endpoint_url", "score", "level", "probe_started_at")
    )
    return {url: Health(url, score, level, probe) for url, score, level, probe in rows}


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


def win_probe(
    url: str, *, now: dt.datetime, cooldown: dt.timedelta, using: str | None = None
) -> bool:
    """Take the one probe of an unhealthy endpoint for this cooldown; False if another worker did."""
    due = Q(probe_started_at__isnull=True) | Q(probe_started_at__lte=now - cooldown)
    return bool(
        EndpointHealth.objects.using(using)
        .filter(due, endpoint_url=url, level=HealthLevel.UNHEALTHY)
        .update(probe_started_at=now)
    )


def concurrency_share(score: float | None) -> float:
    """Return the share of max_concurrency a job may use at this endpoint score."""
    if score is None or score > HEALTHY_ABOVE:
        return 1.0
    if score < UNHEALTHY_BELOW:
        return DEGRADED_FLOOR  # held at the gate anyway, but never more than degraded
    span = (score - UNHEALTHY_BELOW) / (HEALTHY_ABOVE - UNHEALTHY_BELOW)
    return DEGRADED_FLOOR + (1.0 - DEGRADED_FLOOR) * span


def effective_concurrency(max_concurrency: int, score: float | None) -> int:
    """Return a job's concurrency limit at its endpoint's score (at least 1)."""
    return max(1, math.floor(max_concurrency * concurrency_share(score)))


def _reason(health: Health) -> str:
    return (
        f"endpoint {health.endpoint_url} is unhealthy (health score {health.score:.0f} < "
        f"{UNHEALTHY_BELOW:g}); one probe run per cooldown until it recovers; no attempt spent"
    )
