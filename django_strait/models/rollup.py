"""Per-minute counts of finished attempts, so dashboards never scan run history."""

from __future__ import annotations

from django.db import models


class RunRollup(models.Model):
    """How many attempts of a job ended in a given minute, by where they left the run."""

    minute = models.DateTimeField()
    job = models.ForeignKey("django_strait.Job", on_delete=models.CASCADE, related_name="+")
    #: The status the attempt moved the run to (completed, queued = retry, dead_letter, ...).
    status = models.CharField(max_length=20)
    count = models.PositiveIntegerField(default=0)
    total_duration_ms = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["minute", "job", "status"], name="strait_rollup_unique_minute"
            ),
        ]
        indexes = [models.Index(fields=["minute"], name="strait_rollup_minute")]

    def __str__(self) -> str:
        return f"{self.minute:%Y-%m-%d %H:%M} job {self.job_id} {self.status}: {self.count}"


class QueueSample(models.Model):
    """A queue's depth and lag at one minute, for the overview's lag chart (kept a day)."""

    queue = models.CharField(max_length=100)
    at = models.DateTimeField()
    depth = models.PositiveIntegerField(default=0)
    due = models.PositiveIntegerField(default=0)
    #: How long the oldest due run had been waiting, in seconds.
    lag_seconds = models.FloatField(default=0.0)

    class Meta:
        ordering = ["queue", "at"]
        constraints = [
            models.UniqueConstraint(fields=["queue", "at"], name="strait_queue_sample_unique")
        ]
        indexes = [models.Index(fields=["at"], name="strait_queue_sample_at")]

    def __str__(self) -> str:
        return f"{self.queue} @ {self.at:%H:%M}: {self.depth} queued, lag {self.lag_seconds:.1f}s"
