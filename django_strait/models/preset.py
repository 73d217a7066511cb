"""Which memory preset a job's runs start at after an out-of-memory kill (docs/process-execution.md)."""

from __future__ import annotations

from django.db import models


class JobPresetRecommendation(models.Model):
    """Per job: the preset its runs start at until ``expires_at`` (24 h after the last OOM).

    Written by the worker's record of an OOM attempt, never lowered while it lasts.
    """

    job = models.OneToOneField(
        "django_strait.Job", on_delete=models.CASCADE, related_name="preset_recommendation"
    )
    preset = models.CharField(max_length=50)
    expires_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        verbose_name = "preset recommendation"

    def __str__(self) -> str:
        return f"{self.job_id}: {self.preset} until {self.expires_at:%Y-%m-%d %H:%M}"
