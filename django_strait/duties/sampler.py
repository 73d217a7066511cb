"""The samplers: one health score per endpoint, and one depth and lag per queue, per minute.

Once a minute one host (the round's leader) copies every endpoint's current
health score into ``HealthSample`` and deletes samples older than
``keep`` (a day by default): a small, fixed-size history, written by one
statement per round whatever the traffic.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, ClassVar

from django_strait.database import alias
from django_strait.duties.base import DutyResult
from django_strait.duties.leader import lead
from django_strait.models import EndpointHealth, HealthSample, Job, QueueSample
from django_strait.storage.gauges import queue_gauges

#: Seconds between samples.
DEFAULT_INTERVAL = 60.0
#: How long samples are kept.
DEFAULT_KEEP = dt.timedelta(days=1)


@dataclass(frozen=True, slots=True)
class HealthSampler:
    """Record each endpoint's health score once per ``interval`` (a Duty)."""

    name: ClassVar[str] = "health_sampler"

    interval: float = DEFAULT_INTERVAL
    keep: dt.timedelta = DEFAULT_KEEP
    using: str | None = None

    @classmethod
    def from_settings(cls, using: str | None = None, **options: Any) -> HealthSampler:
        return cls(using=alias(using), **options)

    def run_once(self, now: dt.datetime) -> DutyResult:
        """Sample every endpoint touched within ``keep``, and forget older samples."""
        with lead(self.name, using=self.using) as leading:
            if not leading:
                return DutyResult(self.name, False)
            at = now.replace(second=0, microsecond=0)
            rows = EndpointHealth.objects.using(self.using).filter(updated_at__gte=now - self.keep)
            samples = HealthSample.objects.using(self.using)
            # One sample per endpoint and minute, whoever led an earlier round of it.
            done = set(samples.filter(at=at).values_list("endpoint_url", flat=True))
            sampled = samples.bulk_create(
                [
                    HealthSample(endpoint_url=url, at=at, score=score)
                    for url, score in rows.values_list("endpoint_url", "score")
                    if url not in done
                ]
            )
            forgotten, _ = samples.filter(at__lt=now - self.keep).delete()
        return DutyResult(self.name, True, {"sampled": len(sampled), "forgotten": forgotten})


@dataclass(frozen=True, slots=True)
class QueueSampler:
    """Record each queue's depth, due runs and lag once per ``interval`` (a Duty).

    The overview charts lag per minute from these; the gauges are the metrics'
    (one pass over the partial index of queued runs).
    """

    name: ClassVar[str] = "queue_sampler"

    interval: float = DEFAULT_INTERVAL
    keep: dt.timedelta = DEFAULT_KEEP
    using: str | None = None

    @classmethod
    def from_settings(cls, using: str | None = None, **options: Any) -> QueueSampler:
        return cls(using=alias(using), **options)

    def run_once(self, now: dt.datetime) -> DutyResult:
        """Sample every queue of a job (and any with runs), and forget older samples."""
        with lead(self.name, using=self.using) as leading:
            if not leading:
                return DutyResult(self.name, False)
            at = now.replace(second=0, microsecond=0)
            known = set(Job.objects.using(self.using).values_list("queue", flat=True).distinct())
            samples = QueueSample.objects.using(self.using)
            done = set(samples.filter(at=at).values_list("queue", flat=True))
            sampled = samples.bulk_create(
                [
                    QueueSample(
                        queue=g.queue, at=at, depth=g.depth, due=g.due, lag_seconds=g.lag_seconds
                    )  # fmt: skip
                    for g in queue_gauges(self.using, now, known)
                    if g.queue not in done
                ]
            )
            forgotten, _ = samples.filter(at__lt=now - self.keep).delete()
        return DutyResult(self.name, True, {"sampled": len(sampled), "forgotten": forgotten})
