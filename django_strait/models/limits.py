"""The log of a rate-limited job's admissions, shared by every worker (docs/resilience.md)."""

from __future__ import annotations

from django.db import models


class JobRateAdmission(models.Model):
    """How many runs of a job one claim let start, and when: a sliding log.

    A claim counts the job's admissions in the last ``rate_limit_window_secs``
    and adds its own, at most up to ``rate_limit_max``; the same statement deletes
    entries a minute past the window (``resilience.limits.RATE_LOG_KEPT``). So no
    span of that length ever holds more than ``rate_limit_max`` starts, across
    every worker and host.
    """

    job = models.ForeignKey("django_strait.Job", on_delete=models.CASCADE, related_name="+")
    #: The claim's transaction time: the started runs' ``started_at``.
    admitted_at = models.DateTimeField()
    count = models.PositiveIntegerField()

    class Meta:
        indexes = [models.Index(fields=["job", "admitted_at"], name="strait_rate_admission")]

    def __str__(self) -> str:
        return f"{self.job_id} @ {self.admitted_at:%Y-%m-%d %H:%M:%S.%f}: {self.count}"
