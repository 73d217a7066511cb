"""A queue's switches, shared by every worker: paused, and a rate limit (docs/ojs.md, "Queues")."""

from __future__ import annotations

from django.db import models


class QueueState(models.Model):
    """What is set on one queue by name; a queue without a row is running and unlimited.

    ``paused_at``: no worker claims the queue's runs (the project's own workers and
    OJS fetches alike); runs already claimed go on. ``rate_limit_max`` starts per
    ``rate_limit_window_secs``: OJS's ``options.rate_limit`` of a job enqueued into
    the queue (docs/ojs.md), applied to OJS fetches from it.
    """

    name = models.CharField(max_length=100, primary_key=True)
    paused_at = models.DateTimeField(null=True, blank=True)
    rate_limit_max = models.PositiveIntegerField(null=True, blank=True)
    rate_limit_window_secs = models.FloatField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.name}{' (paused)' if self.paused_at else ''}"
