"""One circuit breaker per endpoint URL, shared by every worker (docs/resilience.md)."""

from __future__ import annotations

from django.db import models


class CircuitState(models.TextChoices):
    """Whether runs may be dispatched to an endpoint."""

    #: Runs flow.
    CLOSED = "closed", "Closed"
    #: Too many consecutive failures: runs are held until the cooldown has passed.
    OPEN = "open", "Open"
    #: Cooled down: one probe run is in flight; the others wait for its result.
    HALF_OPEN = "half_open", "Half-open"


class EndpointCircuit(models.Model):
    """The circuit of one endpoint URL: its state and its consecutive failures."""

    endpoint_url = models.CharField(max_length=2048, unique=True)
    state = models.CharField(
        max_length=10, choices=CircuitState.choices, default=CircuitState.CLOSED
    )
    #: Consecutive counted failures (reset by any answer that is not one).
    failures = models.PositiveIntegerField(default=0)
    opened_at = models.DateTimeField(null=True, blank=True)
    last_failure_at = models.DateTimeField(null=True, blank=True)
    #: When the current half-open probe was sent (None unless half-open).
    probe_started_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["endpoint_url"]
        permissions = [("reset_endpointcircuit", "Can reset endpoint circuits")]

    def __str__(self) -> str:
        return f"{self.endpoint_url}: {self.state}"
