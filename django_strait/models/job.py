"""The job definition: what to run and how to retry it."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import MaxLengthValidator, RegexValidator
from django.db import models
from django.db.models import Q

from django_strait.conf import strait_settings
from django_strait.dispatch import events as webhook_events
from django_strait.dispatch.addresses import url_problem
from django_strait.dispatch.headers import header_problems as dispatch_header_problems
from django_strait.rules import bounds, presets
from django_strait.rules.cron import (
    MissedTicks,
    Overlap,
    ScheduleError,
    check_schedule,
    check_timezone,
)
from django_strait.rules.execution import Execution
from django_strait.rules.handlers import find_handler, handlers
from django_strait.rules.retry import PolicyError, check_registered, job_partial, resolve

PRIORITY_VALIDATORS = bounds.within(*bounds.PRIORITY)


class HttpMethod(models.TextChoices):
    POST = "POST"
    PUT = "PUT"
    PATCH = "PATCH"


class OnExhaustion(models.TextChoices):
    DEAD_LETTER = "dead_letter", "Dead-letter queue"
    DISCARD = "discard", "Discard"


#: Job names: a slug, or dotted like an OJS type (``email.send``).
JOB_NAME_VALIDATOR = RegexValidator(
    r"^[-a-zA-Z0-9_]+(\.[-a-zA-Z0-9_]+)*\Z",
    "Enter a job name of letters, numbers, underscores or hyphens, optionally in "
    "dot-separated parts (an OJS type such as email.send).",
    "invalid",
)


class RetryStrategy(models.TextChoices):
    EXPONENTIAL = "exponential"
    LINEAR = "linear"
    FIXED = "fixed"
    POLYNOMIAL = "polynomial"
    POWER = "power"
    ZIZQ = "zizq"
    CUSTOM = "custom"
    FUNCTION = "function"


class Job(models.Model):
    """A job definition: an HTTP endpoint or a Python callable, with its retry policy.

    Retry columns left empty inherit ``STRAIT["DEFAULT_RETRY"]`` (docs/retry.md).
    """

    name = models.CharField(max_length=200, unique=True, validators=[JOB_NAME_VALIDATOR])
    description = models.TextField(
        blank=True,
        max_length=bounds.DESCRIPTION_MAX_LENGTH,
        validators=[MaxLengthValidator(bounds.DESCRIPTION_MAX_LENGTH)],
    )
    queue = models.CharField(max_length=100, default="default")
    priority = models.SmallIntegerField(
        default=0, validators=PRIORITY_VALIDATORS, help_text="-100..100; higher runs first."
    )
    enabled = models.BooleanField(default=True)

    # Target: exactly one of endpoint_url / handler.
    endpoint_url = models.URLField(max_length=2048, blank=True)
    fallback_endpoint_urls = models.JSONField(default=list, blank=True)
    http_method = models.CharField(max_length=8, choices=HttpMethod.choices, default="POST")
    headers = models.JSONField(default=dict, blank=True)
    signing_secret = models.CharField(max_length=200, blank=True)
    handler = models.CharField(
        max_length=300,
        blank=True,
        help_text="The name of a function registered in code with @job or @handler "
        "(its dotted path, e.g. myapp.jobs.send_email).",
    )
    timeout_secs = models.FloatField(
        default=30.0, validators=bounds.within(*bounds.TIMEOUT_SECS, "seconds")
    )
    # Process execution (docs/process-execution.md): Python jobs only.
    execution = models.CharField(
        max_length=10,
        choices=Execution.choices,
        default=Execution.THREAD,
        db_default=Execution.THREAD,  # rows written by SQL (older releases, scripts) too
        help_text="process: each run in a child process with a memory limit and a hard timeout.",
    )
    #: External jobs (docs/ojs.md): the OJS ``type`` their runs carry and, for an OJS cron
    #: registration, its job template (``args``, ``meta``, ``options``).
    ojs = models.JSONField(null=True, blank=True, editable=False)
    preset = models.CharField(
        max_length=presets.NAME_MAX_LENGTH,
        blank=True,
        default="",
        db_default="",
        help_text="The memory preset runs start at (a STRAIT['PRESETS'] name); "
        "empty = the first. Process jobs only.",
    )

    # Retry policy columns: null means "inherit the default", distinct from any value,
    # so the string columns are nullable too.
    max_attempts = models.PositiveIntegerField(
        null=True, blank=True, validators=bounds.within(*bounds.MAX_ATTEMPTS)
    )
    retry_strategy = models.CharField(  # noqa: DJ001
        max_length=20, choices=RetryStrategy.choices, null=True, blank=True
    )
    retry_initial_delay_secs = models.FloatField(
        null=True, blank=True, validators=bounds.within(0, bounds.MAX_DURATION_SECS, "seconds")
    )
    retry_backoff_coefficient = models.FloatField(
        null=True, blank=True, validators=bounds.within(*bounds.BACKOFF_COEFFICIENT)
    )
    retry_max_delay_secs = models.FloatField(
        null=True, blank=True, validators=bounds.within(0.001, bounds.MAX_DURATION_SECS, "seconds")
    )
    retry_delays_secs = models.JSONField(null=True, blank=True)
    retry_jitter = models.FloatField(null=True, blank=True, validators=bounds.within(0, 1))
    retry_jitter_window_secs = models.FloatField(
        null=True, blank=True, validators=bounds.within(0, bounds.MAX_DURATION_SECS, "seconds")
    )
    retry_function = models.CharField(max_length=300, null=True, blank=True)  # noqa: DJ001
    non_retryable_errors = models.JSONField(default=list, blank=True)
    on_exhaustion = models.CharField(  # noqa: DJ001
        max_length=20, choices=OnExhaustion.choices, null=True, blank=True
    )

    # Cron schedule (docs/worker.md): one run per tick across all workers and hosts.
    schedule = models.CharField(
        max_length=100, blank=True, help_text="5-field cron, or @hourly / @daily / ..."
    )
    timezone = models.CharField(max_length=64, default="UTC")
    schedule_missed = models.CharField(
        max_length=10, choices=MissedTicks.choices, default=MissedTicks.RUN_ONCE
    )
    schedule_overlap = models.CharField(
        max_length=10, choices=Overlap.choices, default=Overlap.ALLOW
    )
    #: The last tick the scheduler has acted on (fired or skipped).
    schedule_last_tick = models.DateTimeField(null=True, blank=True, editable=False)
    #: The schedule was declared in code (``@job(schedule=...)``), which owns it: the
    #: admin shows it read-only, and code that stops declaring it removes it.
    schedule_in_code = models.BooleanField(default=False, db_default=False, editable=False)

    # Limits across all workers and hosts (docs/resilience.md), decided inside the claim transaction.
    max_concurrency = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=bounds.within(*bounds.MAX_CONCURRENCY),
        help_text="Most runs dequeued or executing at once, across all workers; "
        "empty or 0 = no limit.",
    )
    rate_limit_max = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=bounds.within(*bounds.RATE_LIMIT_MAX),
        help_text="Most runs started in any span of rate_limit_window_secs, across all workers.",
    )
    rate_limit_window_secs = models.FloatField(
        null=True,
        blank=True,
        validators=bounds.within(*bounds.RATE_LIMIT_WINDOW_SECS, "seconds"),
        help_text="The rate limit's window in seconds (with rate_limit_max).",
    )

    # Budgets (docs/resilience.md): runs reserve estimated_cost from the project's daily budget.
    project = models.ForeignKey(
        "django_strait.Project",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="jobs",
        # No constraint in the database: with several databases the project lives on the
        # control database, and a job on another alias names it by id there.
        db_constraint=False,
        help_text="The budget this job's runs spend from; empty = no budget.",
    )
    estimated_cost = models.DecimalField(
        max_digits=18,
        decimal_places=6,
        null=True,
        blank=True,
        validators=bounds.within(*bounds.COST),
        help_text="Reserved per attempt before dispatch; an endpoint's Strait-Cost header "
        "replaces it with the actual cost.",
    )

    #: Finished runs older than this are pruned (never dead letters); empty = STRAIT default.
    retention_days = models.PositiveIntegerField(
        null=True, blank=True, validators=bounds.within(*bounds.RETENTION_DAYS)
    )

    # Completion webhooks (docs/webhooks.md): notified when a run ends, signed with signing_secret.
    webhook_url = models.URLField(
        max_length=2048, blank=True, help_text="Notified (POST) when a run ends; empty = none."
    )
    webhook_events = models.JSONField(
        default=webhook_events.all_run_events,
        blank=True,
        help_text="The events notified: " + ", ".join(webhook_events.RUN_EVENTS) + ".",
    )
    webhook_retry = models.JSONField(
        null=True,
        blank=True,
        help_text="The delivery retry policy (partial, as trigger's retry); "
        "empty = exponential, 10 attempts, capped at 1 h.",
    )

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        permissions = [("trigger_job", "Can trigger jobs")]
        indexes = [
            models.Index(fields=["name"], condition=~Q(schedule=""), name="strait_job_scheduled"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def is_http(self) -> bool:
        return bool(self.endpoint_url)

    def clean(self) -> None:
        errors = definition_problems(self, fields=False)
        for name, problem in url_problems(self):
            errors.setdefault(name, []).append(problem)
        if self.handler and find_handler(self.handler) is None:
            errors.setdefault("handler", []).append(handlers.unknown(self.handler))
        try:
            check_registered({"function": self.retry_function})
        except PolicyError as exc:
            errors.setdefault("retry_function", []).append(str(exc))
        if errors:
            raise ValidationError(errors)


def definition_problems(job: Job, *, fields: bool = True) -> dict[str, list[str]]:
    """Return what is wrong with ``job``'s definition, by field; empty when it holds together.

    Pure: reads no table and asks no registry, so the worker can check a row that
    bypassed validation (raw SQL, an older release) and hold only its runs.
    ``fields`` also runs each field's own validators (bounds, choices, lengths),
    which ``full_clean`` runs before ``clean``.
    """
    errors: dict[str, list[str]] = {}
    if fields:
        try:
            # Not the fields left unread (a reader's defer()): checking them would read them.
            job.clean_fields(exclude=["project", *job.get_deferred_fields()])
        except ValidationError as exc:
            errors.update({name: list(messages) for name, messages in exc.message_dict.items()})
    checks = (
        target_problems, limit_problems, policy_problems, schedule_problems, webhook_problems,
        execution_problems,
    )  # fmt: skip
    for check in checks:
        for name, problem in check(job):
            errors.setdefault(name, []).append(problem)
    return errors


def target_problems(job: Job) -> list[tuple[str, str]]:
    """Return (field, message) for the target: one of URL or handler, URLs and headers sane."""
    problems: list[tuple[str, str]] = []
    if job.execution == Execution.EXTERNAL:
        if job.endpoint_url or job.handler:
            msg = "An external-worker job has no endpoint_url or handler: OJS workers run it."
            problems += [("endpoint_url" if job.endpoint_url else "handler", msg)]
        return problems
    if bool(job.endpoint_url) == bool(job.handler):
        msg = "Set exactly one of endpoint_url (an HTTP job) or handler (a Python job)."
        problems += [("endpoint_url", msg), ("handler", msg)]
    return problems + fallback_problems(job) + header_problems(job)


def fallback_problems(job: Job) -> list[tuple[str, str]]:
    """Return (field, message) when the fallbacks are not a short list of URL strings."""
    fallbacks = job.fallback_endpoint_urls
    if not isinstance(fallbacks, list) or not all(isinstance(u, str) for u in fallbacks):
        return [("fallback_endpoint_urls", "A list of http:// or https:// URLs.")]
    if len(fallbacks) > bounds.MAX_FALLBACK_ENDPOINTS:
        count = f"{len(fallbacks)} URLs; at most {bounds.MAX_FALLBACK_ENDPOINTS} are allowed."
        return [("fallback_endpoint_urls", count)]
    return []


def url_problems(job: Job) -> list[tuple[str, str]]:
    """Return (field, message) for endpoint URLs the SSRF guard would refuse.

    Scheme, host, and hosts written as addresses; host names are resolved only
    by the worker, which checks every address it connects to on every dispatch
    (so a stored URL is not held for this: the dispatch refuses it as
    ``ssrf.blocked``, under the networks allowed then).
    """
    allowed = strait_settings.ALLOWED_PRIVATE_NETWORKS
    problems = []
    if job.endpoint_url and (problem := url_problem(job.endpoint_url, allowed)):
        problems.append(("endpoint_url", f"{job.endpoint_url}: {problem}."))
    fallbacks = job.fallback_endpoint_urls if not fallback_problems(job) else []
    for i, url in enumerate(fallbacks):
        if problem := url_problem(url, allowed):
            problems.append(("fallback_endpoint_urls", f"Entry {i} ({url}): {problem}."))
    if job.webhook_url and (problem := url_problem(job.webhook_url, allowed)):
        problems.append(("webhook_url", f"{job.webhook_url}: {problem}."))
    return problems


def header_problems(job: Job) -> list[tuple[str, str]]:
    """Return (field, message) for headers the worker could not send (dispatch.http's rules)."""
    return [("headers", problem) for problem in dispatch_header_problems(job.headers)]


def policy_problems(job: Job) -> list[tuple[str, str]]:
    """Return (column, message) for retry columns that are not a valid policy, merged or alone."""
    try:
        job_partial(job)
        resolve(job, defaults=strait_settings.DEFAULT_RETRY)  # the merged whole must hold too
    except PolicyError as exc:
        return [(exc.column or "retry_strategy", str(exc))]
    return []


def schedule_problems(job: Job) -> list[tuple[str, str]]:
    """Return (field, message) for a schedule or time zone that cannot be used."""
    problems = []
    schedule_checks = [(check_schedule, job.schedule)] if job.schedule else []
    for check, value in [*schedule_checks, (check_timezone, job.timezone)]:
        try:
            check(value)
        except ScheduleError as exc:
            problems.append((exc.field, str(exc)))
    return problems


def webhook_problems(job: Any) -> list[tuple[str, str]]:
    """Return (field, message) for webhook events or a delivery policy that cannot be used."""
    problems = []
    allowed = webhook_events.RUN_EVENTS if isinstance(job, Job) else webhook_events.WORKFLOW_EVENTS
    if problem := webhook_events.events_problem(job.webhook_events, allowed):
        problems.append(("webhook_events", problem))
    try:
        webhook_events.policy(getattr(job, "webhook_retry", None))
    except PolicyError as exc:
        problems.append(("webhook_retry", str(exc)))
    return problems


def limit_problems(job: Job) -> list[tuple[str, str]]:
    """Return (field, message) for each limit column that does not hold together."""
    problems = []
    rate_max, window = job.rate_limit_max, job.rate_limit_window_secs
    if (rate_max is None) != (window is None):
        missing = "rate_limit_window_secs" if window is None else "rate_limit_max"
        problems.append(
            (missing, "Set both rate_limit_max and rate_limit_window_secs, or neither.")
        )
    if job.project_id is not None and job.estimated_cost is None:
        problems.append(("estimated_cost", "Required when the job has a project (a cost >= 0)."))
    return problems


def execution_problems(job: Job) -> list[tuple[str, str]]:
    """Return (field, message) when the execution or the preset cannot be used."""
    problems = []
    if job.execution == Execution.EXTERNAL and job.ojs is not None and not _ojs_type(job.ojs):
        problems.append(("ojs", "an external job's ojs must name its OJS type ({'type': ...})."))
    if job.execution == Execution.PROCESS and not job.handler:
        problems.append(("execution", "process execution is for Python jobs (set a handler)."))
    chain = strait_settings.PRESETS
    if not isinstance(job.preset, str) or (job.preset and job.preset not in chain.names):
        problems.append(
            ("preset", f"{job.preset!r} is not a preset; allowed: {', '.join(chain.names)}.")
        )
    elif job.preset and job.execution != Execution.PROCESS:
        problems.append(("preset", "a preset is for process execution (execution='process')."))
    return problems


def _ojs_type(ojs: Any) -> str:
    return ojs.get("type", "") if isinstance(ojs, dict) and isinstance(ojs.get("type"), str) else ""
