"""Worker processes, registered so that people and the reaper can see who is alive."""

from __future__ import annotations

from django.db import models


class WorkerProcess(models.Model):
    """One ``run_strait_worker`` process: who it is and when it was last seen."""

    worker_id = models.CharField(max_length=200, unique=True)
    host = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    queues = models.JSONField(default=list, blank=True, help_text="Empty: every queue.")
    concurrency = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    in_flight = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-last_seen_at"]
        verbose_name = "worker"

    def __str__(self) -> str:
        return self.worker_id
