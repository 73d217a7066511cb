"""The job definition: what to run and how to retry it."""

from __future__ import annotations

import math

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from django_strait.registry import find_handler, handlers

PRIORITY_VALIDATORS = [MinValueValidator(-100), MaxValueValidator(100)]


class HttpMethod(models.TextChoices):
    POST = "POST"
    PUT = "PUT"
    PATCH = "PATCH"


class OnExhaustion(models.TextChoices):
    DEAD_LETTER = "dead_letter", "Dead-letter queue"
    DISCARD = "discard", "Discard"


class MissedTicks(models.TextChoices):
    RUN_ONCE = "run_once", "Run once on recovery"
    SKIP = "skip", "Skip"


class Overlap(models.TextChoices):
    ALLOW = "allow", "Allow"
    SKIP = "skip", "Skip while a run is active"


class RetryStrategy(models.TextChoices):
    EXPONENTIAL = "exponential"
    LINEAR = "linear"
    FIXED = "fixed"
    POLYNOMIAL = "polynomial"
    POWER = "power"
    CUSTOM = "custom"
    FUNCTION = "function"


class Job(models.Model):
    """A job definition: an HTTP endpoint or a Python callable, with its retry policy.

    Retry columns left empty inherit ``STRAIT["DEFAULT_RETRY"]`` (DESIGN §3).
    """

    name = models.SlugField(max_length=200, unique=True)
    description = models.TextField(blank=True)
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
    timeout_secs = models.FloatField(default=30.0, validators=[MinValueValidator(0.001)])

    # Retry policy columns: null means "inherit the default", distinct from any value,
    # so the string columns are nullable too.
    max_attempts = models.PositiveIntegerField(null=True, blank=True)
    retry_strategy = models.CharField(  # noqa: DJ001
        max_length=20, choices=RetryStrategy.choices, null=True, blank=True
    )
    retry_initial_delay_secs = models.FloatField(null=True, blank=True)
    retry_backoff_coefficient = models.FloatField(null=True, blank=True)
    retry_max_delay_secs = models.FloatField(null=True, blank=True)
    retry_delays_secs = models.JSONField(null=True, blank=True)
    retry_jitter = models.FloatField(null=True, blank=True)
    retry_function = models.CharField(max_length=300, null=True, blank=True)  # noqa: DJ001
    non_retryable_errors = models.JSONField(default=list, blank=True)
    on_exhaustion = models.CharField(  # noqa: DJ001
        max_length=20, choices=OnExhaustion.choices, null=True, blank=True
    )

    # Cron schedule (DESIGN §6): one run per tick across all workers and hosts.
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

    # Limits across all workers and hosts (DESIGN §5), decided inside the claim transaction.
    max_concurrency = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Most runs dequeued or executing at once, across all workers; empty = no limit.",
    )
    rate_limit_max = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Most runs started per rate_limit_window_secs, across all workers.",
    )
    rate_limit_window_secs = models.FloatField(
        null=True, blank=True, help_text="The rate limit's window in seconds (with rate_limit_max)."
    )

    # Budgets (DESIGN §5): runs reserve estimated_cost from the project's daily budget.
    project = models.ForeignKey(
        "django_strait.Project",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="jobs",
        help_text="The budget this job's runs spend from; empty = no budget.",
    )
    estimated_cost = models.DecimalField(
        max_digits=18,
        decimal_places=6,
        null=True,
        blank=True,
        validators=[MinValueValidator(0)],
        help_text="Reserved per attempt before dispatch; an endpoint's Strait-Cost header "
        "replaces it with the actual cost.",
    )

    #: Finished runs older than this are pruned (never dead letters); empty = STRAIT default.
    retention_days = models.PositiveIntegerField(null=True, blank=True)

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
        errors: dict[str, list[str]] = {}
        if bool(self.endpoint_url) == bool(self.handler):
            msg = "Set exactly one of endpoint_url (an HTTP job) or handler (a Python job)."
            errors.setdefault("endpoint_url", []).append(msg)
            errors.setdefault("handler", []).append(msg)
        # SSRF, early: scheme, host, and private IP literals. Host names are not
        # resolved here; the worker checks their addresses on every dispatch.
        from django_strait.conf import strait_settings
        from django_strait.dispatch.ssrf import url_problem

        allowed = strait_settings.ALLOWED_PRIVATE_NETWORKS
        if self.endpoint_url and (problem := url_problem(self.endpoint_url, allowed)):
            errors.setdefault("endpoint_url", []).append(f"{self.endpoint_url}: {problem}.")
        if not isinstance(self.fallback_endpoint_urls, list) or not all(
            isinstance(u, str) for u in self.fallback_endpoint_urls
        ):
            errors.setdefault("fallback_endpoint_urls", []).append(
                "A list of http:// or https:// URLs."
            )
        else:
            for i, url in enumerate(self.fallback_endpoint_urls):
                if problem := url_problem(url, allowed):
                    errors.setdefault("fallback_endpoint_urls", []).append(
                        f"Entry {i} ({url}): {problem}."
                    )
        from django_strait.dispatch.http import header_problems

        if problems := header_problems(self.headers):
            errors.setdefault("headers", []).extend(problems)
        if self.handler and find_handler(self.handler) is None:
            errors.setdefault("handler", []).append(handlers.unknown(self.handler))
        for name, problem in limit_problems(self):
            errors.setdefault(name, []).append(problem)
        from django_strait.retry import PolicyError, check_registered, job_partial, resolve

        try:
            check_registered(job_partial(self))
            resolve(self)  # the merged policy must hold together too (custom needs delays)
        except PolicyError as exc:
            errors.setdefault(exc.column or "retry_strategy", []).append(str(exc))
        from django_strait.duties.scheduler import ScheduleError, check_schedule, check_timezone

        schedule_checks = [(check_schedule, self.schedule)] if self.schedule else []
        for check, value in [*schedule_checks, (check_timezone, self.timezone)]:
            try:
                check(value)
            except ScheduleError as exc:
                errors.setdefault(exc.field, []).append(str(exc))
        if errors:
            raise ValidationError(errors)


def limit_problems(job: Job) -> list[tuple[str, str]]:
    """Return (field, message) for each limit column that does not hold together."""
    problems = []
    if job.max_concurrency is not None and job.max_concurrency < 1:
        problems.append(("max_concurrency", "A whole number >= 1, or empty for no limit."))
    rate_max, window = job.rate_limit_max, job.rate_limit_window_secs
    if (rate_max is None) != (window is None):
        missing = "rate_limit_window_secs" if window is None else "rate_limit_max"
        problems.append(
            (missing, "Set both rate_limit_max and rate_limit_window_secs, or neither.")
        )
    if job.project_id is not None and job.estimated_cost is None:
        problems.append(("estimated_cost", "Required when the job has a project (a cost >= 0)."))
    if job.estimated_cost is not None and job.estimated_cost < 0:
        problems.append(("estimated_cost", "A cost >= 0, or empty."))
    if rate_max is not None and rate_max < 1:
        problems.append(("rate_limit_max", "A whole number >= 1, or empty for no rate limit."))
    if window is not None and not (window > 0 and math.isfinite(window)):
        problems.append(
            ("rate_limit_window_secs", "A number of seconds > 0, or empty for no rate limit.")
        )
    return problems
