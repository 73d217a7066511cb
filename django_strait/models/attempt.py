"""One attempt of a run, append-only."""

from __future__ import annotations

from django.db import models


class AttemptOutcome(models.TextChoices):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    SHORT_CIRCUITED = "short_circuited"
    SYSTEM_FAILED = "system_failed"
    #: A child process killed for memory (docs/process-execution.md): retried at the next preset.
    OOM = "oom"


class RunAttempt(models.Model):
    """What happened on one attempt: written once, when the attempt ends."""

    run = models.ForeignKey(
        "django_strait.JobRun", on_delete=models.CASCADE, related_name="attempts"
    )
    number = models.PositiveIntegerField()
    endpoint = models.CharField(max_length=2048, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.PositiveIntegerField(default=0)
    outcome = models.CharField(max_length=20, choices=AttemptOutcome.choices)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error_type = models.CharField(max_length=200, blank=True)
    error = models.TextField(blank=True)
    response_excerpt = models.TextField(blank=True)
    worker = models.CharField(max_length=200, blank=True)
    #: The memory preset a process attempt ran at (empty: a thread attempt).
    preset = models.CharField(max_length=50, blank=True, default="", db_default="")

    class Meta:
        # Oldest first by when they started: the order of the run's story.
        ordering = ["run_id", "started_at", "id"]
        # The overview's and drill-down pages' latency percentiles read the last hour of
        # attempts; appended in time order, the index grows at its right edge only.
        indexes = [models.Index(fields=["started_at"], name="strait_attempt_started")]
        constraints = [
            # Short-circuit rows repeat the number of the run's last real attempt
            # (they spend none), so only real attempts are unique per number.
            models.UniqueConstraint(
                fields=["run", "number"],
                condition=~models.Q(outcome="short_circuited"),
                name="strait_attempt_unique_number",
            ),
        ]

    def __str__(self) -> str:
        return f"attempt {self.number} of run {self.run_id}: {self.outcome}"
