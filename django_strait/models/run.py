"""One requested execution of a job."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

from django_strait.models.job import PRIORITY_VALIDATORS
from django_strait.rules import bounds
from django_strait.rules.states import RunStatus


class JobRun(models.Model):
    """A run: its payload, where it stands, and what its last attempt said.

    ``status`` is written by ``django_strait.transitions`` only.
    """

    job = models.ForeignKey("django_strait.Job", on_delete=models.PROTECT, related_name="runs")
    payload = models.JSONField(default=dict, blank=True)
    status = models.CharField(
        max_length=20, choices=RunStatus.choices, default=RunStatus.QUEUED, editable=False
    )
    #: Attempts started so far (all time; see ``attempts_before_replay``).
    attempt = models.PositiveIntegerField(default=0, editable=False)
    #: Attempts that do not count against the retry budget: ``attempt`` at the last
    #: replay, plus each attempt killed for memory since (retried at the next preset).
    attempts_before_replay = models.PositiveIntegerField(default=0, editable=False)
    max_attempts = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=bounds.within(*bounds.MAX_ATTEMPTS),
        help_text="Run-level override; empty = the job's policy.",
    )
    retry_overrides = models.JSONField(
        null=True, blank=True, help_text="Run-level retry policy override (partial)."
    )
    priority = models.SmallIntegerField(default=0, validators=PRIORITY_VALIDATORS)
    queue = models.CharField(max_length=100, default="default")
    #: Not claimable before this instant (delays and retry backoff).
    available_at = models.DateTimeField(default=timezone.now)
    # Null (no key) stays outside the unique constraint; "" would collide.
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001

    claimed_by = models.CharField(max_length=200, blank=True, editable=False)
    heartbeat_at = models.DateTimeField(null=True, blank=True, editable=False)
    dequeued_at = models.DateTimeField(null=True, blank=True, editable=False)
    started_at = models.DateTimeField(null=True, blank=True, editable=False)
    finished_at = models.DateTimeField(null=True, blank=True, editable=False)
    #: Set when cancel is asked while an attempt runs: canceled once it returns.
    cancel_requested = models.BooleanField(default=False, editable=False)

    result = models.JSONField(null=True, blank=True, editable=False)
    last_error = models.TextField(blank=True, editable=False)
    error_type = models.CharField(max_length=200, blank=True, editable=False)
    endpoint_used = models.CharField(max_length=2048, blank=True, editable=False)
    #: A process run's memory preset: its last attempt's, or the next one after an OOM.
    preset = models.CharField(max_length=50, blank=True, default="", db_default="", editable=False)
    #: The budget reserved for the attempt in flight, and what the attempts spent so far.
    reserved_cost = models.DecimalField(
        max_digits=18, decimal_places=6, null=True, blank=True, editable=False
    )
    actual_cost = models.DecimalField(
        max_digits=18, decimal_places=6, null=True, blank=True, editable=False
    )

    replay_count = models.PositiveIntegerField(default=0, editable=False)
    replayed_by = models.CharField(max_length=200, blank=True, editable=False)
    replayed_at = models.DateTimeField(null=True, blank=True, editable=False)

    #: The workflow step this run executes (None for a plain run). The claim reads it
    #: from the run's own row, so the worker knows a step without a join.
    workflow_step_run = models.ForeignKey(
        "django_strait.WorkflowStepRun",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        editable=False,
        db_index=False,  # strait_run_workflow_step: partial, so plain runs never write it
    )

    # External-worker runs (docs/ojs.md): the OJS job id (a UUIDv7), the deadline the
    # reaper holds an active run to (its visibility timeout, or timeout_ms), and the
    # envelope's meta, options and unknown fields, returned as they came.
    ojs_id = models.UUIDField(null=True, blank=True, unique=True, editable=False)
    visible_until = models.DateTimeField(null=True, blank=True, editable=False)
    ojs = models.JSONField(null=True, blank=True, editable=False)

    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-id"]
        # Separate from change_jobrun: who may act on runs, not edit them.
        permissions = [
            ("replay_jobrun", "Can replay runs"),
            ("cancel_jobrun", "Can cancel runs"),
            ("discard_jobrun", "Can discard runs"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["job", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="strait_run_unique_idempotency_key",
            ),
        ]
        indexes = [
            # The claim: due queued runs by priority. Partial, so history costs nothing.
            models.Index(
                fields=["queue", "-priority", "available_at", "id"],
                condition=Q(status="queued"),
                name="strait_run_claim_by_queue",
            ),
            models.Index(
                fields=["-priority", "available_at", "id"],
                condition=Q(status="queued"),
                name="strait_run_claim_any_queue",
            ),
            # Active runs by job: in-flight counts (heartbeats, the reaper, metrics,
            # concurrency limits) and "is a run of this job still active?" (cron overlap).
            models.Index(
                fields=["job", "status"],
                condition=Q(status__in=["queued", "dequeued", "executing", "waiting"]),
                name="strait_run_active",
            ),
            models.Index(
                fields=["job", "error_type"],
                condition=Q(status="dead_letter"),
                name="strait_run_dead_letters",
            ),
            models.Index(fields=["status", "finished_at"], name="strait_run_status_finished"),
            # A step's run, from its step run (the DAG, the step run's deletion). Partial:
            # a full index cost every plain run's INSERT (bulk trigger ~10 % slower).
            models.Index(
                fields=["workflow_step_run"],
                condition=Q(workflow_step_run__isnull=False),
                name="strait_run_workflow_step",
            ),
            # Looking a run up by its key alone (admin search, support questions).
            models.Index(
                fields=["idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="strait_run_idempotency_key",
            ),
        ]

    def __str__(self) -> str:
        # The job's name, never its database id: this is what pages and messages show.
        return f"run {self.pk} of {self.job.name} ({self.status})"

    @property
    def attempts_left_in_budget(self) -> int:
        """Attempts spent since the last replay."""
        return self.attempt - self.attempts_before_replay


class DeadLetterManager(models.Manager):
    def get_queryset(self):
        return super().get_queryset().filter(status=RunStatus.DEAD_LETTER)


class DeadLetter(JobRun):
    """The dead-letter queue: runs in ``dead_letter``, for the admin and the API."""

    objects = DeadLetterManager()

    class Meta:
        proxy = True
        verbose_name = "dead letter"
        verbose_name_plural = "dead letters"
