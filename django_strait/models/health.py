"""One health score per endpoint URL, and its history (docs/resilience.md).

The EWMA columns are written by the worker with every batch of results; the
score and the level are computed by the database from them (generated
columns), so one formula serves the worker, the admin, the API and the claim.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Case, F, Value, When
from django.db.models.functions import Greatest
from django.db.models.lookups import GreaterThan, GreaterThanOrEqual

from django_strait.rules.resilience.health import HEALTHY_ABOVE, UNHEALTHY_BELOW, HealthLevel

__all__ = ["EndpointHealth", "HealthLevel", "HealthSample", "health_subqueries"]


def score_expression() -> models.Expression:
    """100 x (0.5 success rate + 0.3 (1 - failure rate) + 0.2 (1 - p95 / timeout))."""
    latency = Greatest(
        Value(0.0), Value(1.0) - F("latency_p95_ms") / Greatest(F("timeout_ms"), Value(1.0))
    )
    return Value(100.0) * (
        Value(0.5) * F("success_rate")
        + Value(0.3) * (Value(1.0) - F("failure_rate"))
        + Value(0.2) * latency
    )


def level_expression() -> models.Expression:
    # A generated column cannot read another one: the level repeats the score's formula.
    return Case(
        When(
            GreaterThan(score_expression(), Value(HEALTHY_ABOVE)),
            then=Value(HealthLevel.HEALTHY.value),
        ),
        When(
            GreaterThanOrEqual(score_expression(), Value(UNHEALTHY_BELOW)),
            then=Value(HealthLevel.DEGRADED.value),
        ),
        default=Value(HealthLevel.UNHEALTHY.value),
    )


class EndpointHealth(models.Model):
    """The health of one endpoint URL: EWMAs of its recent answers, a score and a level."""

    endpoint_url = models.CharField(max_length=2048, unique=True)
    #: EWMA of answers that succeeded (2xx).
    success_rate = models.FloatField(default=1.0)
    #: EWMA of answers that count against the endpoint (5xx, timeouts, connection errors).
    failure_rate = models.FloatField(default=0.0)
    #: EWMA of each result batch's 95th-percentile duration.
    latency_p95_ms = models.FloatField(default=0.0)
    #: The timeout the latency is scored against (the job's, from the latest results).
    timeout_ms = models.FloatField(default=30_000.0)
    #: Results counted so far.
    samples = models.PositiveBigIntegerField(default=0)
    score = models.GeneratedField(
        expression=score_expression(), output_field=models.FloatField(), db_persist=True
    )
    level = models.GeneratedField(
        expression=level_expression(),
        output_field=models.CharField(max_length=10, choices=HealthLevel.choices),
        db_persist=True,
    )
    #: When the current probe of an unhealthy endpoint was let through.
    probe_started_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["endpoint_url"]
        verbose_name_plural = "endpoint health"

    def __str__(self) -> str:
        score = "-" if self.score is None else f"{self.score:.0f}"
        return f"{self.endpoint_url}: {score} ({self.level})"


def health_subqueries(url_field: str = "endpoint_url") -> tuple[models.Subquery, models.Subquery]:
    """Return the score and level of each row's endpoint, as subqueries to annotate with.

    One subquery each on the unique ``endpoint_url``: a list of any length stays one query.
    """
    rows = EndpointHealth.objects.filter(endpoint_url=models.OuterRef(url_field))
    return models.Subquery(rows.values("score")[:1]), models.Subquery(rows.values("level")[:1])


class HealthSample(models.Model):
    """An endpoint's score at one minute, for the history sparkline (kept a day)."""

    endpoint_url = models.CharField(max_length=2048)
    at = models.DateTimeField()
    score = models.FloatField()

    class Meta:
        ordering = ["endpoint_url", "at"]
        indexes = [models.Index(fields=["endpoint_url", "at"], name="strait_health_sample")]

    def __str__(self) -> str:
        return f"{self.endpoint_url} @ {self.at:%H:%M}: {self.score:.0f}"
