"""Workflows: DAGs of steps, each naming a job (docs/workflows.md)."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.utils import timezone

from django_strait.conf import strait_settings
from django_strait.dispatch import events as webhook_events
from django_strait.dispatch.addresses import url_problem
from django_strait.models.job import RetryStrategy, webhook_problems
from django_strait.rules import bounds


class WorkflowRunStatus(models.TextChoices):
    """Where a workflow run stands."""

    #: Some step has not finished yet.
    RUNNING = "running", "Running"
    #: Every step finished, none failed the workflow.
    COMPLETED = "completed", "Completed"
    #: A step failed without ``continue_on_failure``, or the workflow stalled.
    FAILED = "failed", "Failed"
    #: Canceled by a person or by code.
    CANCELED = "canceled", "Canceled"


class StepRunStatus(models.TextChoices):
    """Where one step of a workflow run stands."""

    #: Its parents have not all finished; it has no JobRun yet.
    WAITING = "waiting", "Waiting"
    #: Its JobRun exists (queued, executing or retrying).
    STARTED = "started", "Started"
    #: Its run completed.
    COMPLETED = "completed", "Completed"
    #: Its run ended dead_letter, failed or discarded.
    FAILED = "failed", "Failed"
    #: A parent failed the workflow: it will not run.
    SKIPPED = "skipped", "Skipped"
    #: The workflow run (or its JobRun) was canceled.
    CANCELED = "canceled", "Canceled"


class Workflow(models.Model):
    """A named DAG of steps (``define_workflow`` writes it)."""

    name = models.SlugField(max_length=100, unique=True)
    description = models.TextField(blank=True, max_length=bounds.DESCRIPTION_MAX_LENGTH)
    # Completion webhooks (docs/webhooks.md): notified when a workflow run completes or fails.
    webhook_url = models.URLField(
        max_length=2048, blank=True, help_text="Notified (POST) when a run ends; empty = none."
    )
    webhook_events = models.JSONField(
        default=webhook_events.all_workflow_events,
        blank=True,
        help_text="The events notified: " + ", ".join(webhook_events.WORKFLOW_EVENTS) + ".",
    )
    #: Signs the workflow's webhooks as a job's signing_secret signs its own.
    signing_secret = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        errors: dict[str, list[str]] = {}
        for name, problem in webhook_problems(self):
            errors.setdefault(name, []).append(problem)
        allowed = strait_settings.ALLOWED_PRIVATE_NETWORKS
        if self.webhook_url and (problem := url_problem(self.webhook_url, allowed)):
            errors.setdefault("webhook_url", []).append(f"{self.webhook_url}: {problem}.")
        if errors:
            raise ValidationError(errors)


class WorkflowStep(models.Model):
    """One step: the job it runs, the steps it waits for, its retry overrides."""

    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="steps")
    name = models.SlugField(max_length=100)
    job = models.ForeignKey("django_strait.Job", on_delete=models.PROTECT, related_name="+")
    #: Names of steps of the same workflow that must complete first.
    depends_on = models.JSONField(default=list, blank=True)
    retry_backoff = models.CharField(  # noqa: DJ001
        max_length=20, choices=RetryStrategy.choices, null=True, blank=True
    )
    retry_initial_delay_secs = models.FloatField(
        null=True, blank=True, validators=bounds.within(0, bounds.MAX_DURATION_SECS, "seconds")
    )
    retry_max_delay_secs = models.FloatField(
        null=True, blank=True, validators=bounds.within(0.001, bounds.MAX_DURATION_SECS, "seconds")
    )
    max_attempts = models.PositiveIntegerField(
        null=True, blank=True, validators=bounds.within(*bounds.MAX_ATTEMPTS)
    )
    #: Its failure neither fails the workflow nor stops its dependents.
    continue_on_failure = models.BooleanField(default=False)
    #: The step's own run, when it is not its job's and its workflow run's (an OJS
    #: workflow's step, docs/ojs.md): ``payload``, ``queue``, ``priority``, ``ojs``
    #: (envelope), ``ojs_id``, ``max_attempts``, ``retry_overrides``. None: the job's
    #: queue and priority, the workflow run's payload.
    run_template = models.JSONField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["workflow", "id"]
        constraints = [
            models.UniqueConstraint(fields=["workflow", "name"], name="strait_step_unique_name"),
        ]

    def __str__(self) -> str:
        return f"{self.workflow_id}:{self.name}"


class WorkflowRun(models.Model):
    """One execution of a workflow; ``status`` is written by the workflow engine only."""

    workflow = models.ForeignKey(Workflow, on_delete=models.PROTECT, related_name="runs")
    payload = models.JSONField(default=dict, blank=True)
    status = models.CharField(
        max_length=20,
        choices=WorkflowRunStatus.choices,
        default=WorkflowRunStatus.RUNNING,
        editable=False,
    )
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    error_type = models.CharField(max_length=200, blank=True, editable=False)
    last_error = models.TextField(blank=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    finished_at = models.DateTimeField(null=True, blank=True, editable=False)
    #: The last time a step was queued, retried or finished (stall detection).
    progressed_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["workflow", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="strait_wfrun_unique_idempotency_key",
            ),
        ]
        indexes = [
            # The reaper's stall scan reads running workflow runs only.
            models.Index(
                fields=["progressed_at"],
                condition=Q(status="running"),
                name="strait_wfrun_running",
            ),
        ]

    def __str__(self) -> str:
        # The workflow's name, never its database id: this is what pages and messages show.
        return f"workflow run {self.pk} of {self.workflow.name} ({self.status})"


class StepRunQuerySet(models.QuerySet):
    """Step runs as the admin and the API show them."""

    def summaries(self) -> StepRunQuerySet:
        """With step, job and run in one query, the runs' payloads and results unread.

        A wide workflow's page must not carry every step's result.
        """
        return (
            self.select_related("step__job", "run")
            .only(
                "id",
                "status",
                "workflow_run_id",
                "step__name",
                "step__depends_on",
                "step__job__name",
                "run__id",
                "run__status",
                "run__attempt",
                "run__error_type",
            )  # fmt: skip
            .order_by("id")
        )


class WorkflowStepRun(models.Model):
    """One step of a workflow run, and the JobRun that runs it once it is due."""

    #: No index of its own: the unique (workflow_run, step) index serves it.
    workflow_run = models.ForeignKey(
        WorkflowRun, on_delete=models.CASCADE, related_name="step_runs", db_index=False
    )
    step = models.ForeignKey(WorkflowStep, on_delete=models.PROTECT, related_name="+")
    status = models.CharField(
        max_length=20,
        choices=StepRunStatus.choices,
        default=StepRunStatus.WAITING,
        editable=False,
    )
    #: The step's JobRun: None while it waits (or was skipped or canceled unstarted).
    run = models.OneToOneField(
        "django_strait.JobRun",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        editable=False,
    )
    #: How many of its parents have not ended well (completed, or failed with
    #: continue_on_failure): it starts at 0. Kept by the DAG's advance for waiting steps.
    parents_left = models.IntegerField(default=0, editable=False)

    objects = StepRunQuerySet.as_manager()

    class Meta:
        ordering = ["workflow_run", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["workflow_run", "step"], name="strait_steprun_unique_step"
            ),
        ]

    def __str__(self) -> str:
        return f"step run {self.pk} ({self.status})"
