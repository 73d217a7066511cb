"""A period during which a claim gate kept a run from starting (no attempt spent)."""

from __future__ import annotations

from django.db import models


class RunHold(models.Model):
    """One hold period of a run: one reason, from the first hold to the last, between two attempts.

    A run held again for the same reason before its next attempt extends its
    latest period (``last_held_at``, ``until``, ``times``) instead of adding a
    row: a run waiting minutes for an open circuit keeps one row, not one per
    cooldown, and its real attempts stay readable.
    """

    run = models.ForeignKey("django_strait.JobRun", on_delete=models.CASCADE, related_name="holds")
    #: Attempts the run had started when the period began (the period follows that attempt).
    after_attempt = models.PositiveIntegerField(default=0)
    #: Why: the error type the run carried while held (``circuit.open``, ``limit.concurrency``).
    reason = models.CharField(max_length=200)
    error = models.TextField(blank=True)
    endpoint = models.CharField(max_length=2048, blank=True)
    started_at = models.DateTimeField()
    last_held_at = models.DateTimeField()
    #: When the latest hold let the run be claimed again (its ``available_at``).
    until = models.DateTimeField()
    #: How many claims held it in this period.
    times = models.PositiveIntegerField(default=1)
    worker = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["run_id", "started_at", "id"]

    def __str__(self) -> str:
        return f"hold of run {self.run_id}: {self.reason} x{self.times}"
