"""The wire format of the REST API: trigger requests, jobs, runs and dead letters as JSON."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError as ModelValidationError
from django.utils import timezone
from rest_framework import serializers

from django_strait.api.inputs import DATETIME_SYNTAX, instant_or_none, shown
from django_strait.api.placement import LocatedMixin
from django_strait.models import (
    CircuitState,
    EndpointCircuit,
    EndpointHealth,
    HealthLevel,
    Job,
    JobRun,
    Project,
    RunAttempt,
    WebhookDelivery,
    WorkflowRun,
    WorkflowStepRun,
)
from django_strait.rules.retry import MAX_DURATION
from django_strait.services import registry
from django_strait.services.triggering import TriggerError

#: Keys a trigger body may hold; each but ``payload`` is a keyword of ``trigger()``.
TRIGGER_KEYS = (
    "payload", "delay", "run_at", "priority", "queue", "idempotency_key", "max_attempts", "retry",
)  # fmt: skip
IDEMPOTENCY_HEADER = "Idempotency-Key"


@dataclass(frozen=True, slots=True)
class TriggerRequest:
    """A trigger body, parsed into ``trigger()`` arguments (which validates the values)."""

    payload: Any
    options: Mapping[str, Any]

    @classmethod
    def parse(cls, body: Any, header_key: str | None) -> TriggerRequest:
        """Read a JSON body and the Idempotency-Key header; raise ``TriggerError`` if unusable."""
        _check_body(body, TRIGGER_KEYS)
        options = {k: v for k, v in body.items() if k != "payload" and v is not None}
        if "run_at" in options:
            options["run_at"] = parse_run_at(options["run_at"])
        key = idempotency_key(body.get("idempotency_key"), header_key)
        if key is not None:
            options["idempotency_key"] = key
        return cls(payload=body.get("payload"), options=options)


#: The earliest ``run_at``: before it, a date is a mistake rather than "now".
EARLIEST_RUN_AT = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
#: The latest ``run_at`` is this far from now: as far as the longest ``delay``.
LATEST_RUN_AT = dt.timedelta(seconds=MAX_DURATION)


RUN_AT_HELP = "With a UTC offset; from 2000-01-01T00:00:00Z to 3650 days from now."


def parse_run_at(value: Any, now: dt.datetime | None = None) -> dt.datetime:
    """Return ``value`` in UTC: ISO 8601 with an offset, from 2000 to 3650 days after ``now``."""
    latest = (now or timezone.now()) + LATEST_RUN_AT
    parsed = instant_or_none(value)
    if parsed is None or not EARLIEST_RUN_AT <= parsed <= latest:
        raise TriggerError(
            "run_at",
            f"must be {DATETIME_SYNTAX}, from {EARLIEST_RUN_AT:%Y-%m-%dT%H:%M:%SZ} to "
            f"{LATEST_RUN_AT.days} days from now ({latest:%Y-%m-%dT%H:%M:%SZ}); got {shown(value)}",
        )
    return parsed


def idempotency_key(body_key: Any, header_key: str | None) -> Any:
    """Return the one idempotency key that the body and the header agree on."""
    if header_key is None or body_key is None or header_key == body_key:
        return header_key if body_key is None else body_key
    raise TriggerError(
        "idempotency_key",
        f"the {IDEMPOTENCY_HEADER} header ({header_key!r}) and the body's idempotency_key "
        f"({body_key!r}) differ; send one of them, or the same value in both",
    )


def _check_body(body: Any, keys: Sequence[str]) -> None:
    """Raise ``TriggerError`` unless ``body`` is a JSON object with only ``keys``."""
    allowed = ", ".join(keys)
    if not isinstance(body, Mapping):
        raise TriggerError(
            "body", f"must be a JSON object with {allowed}; got a JSON {_json_type(body)}"
        )
    unknown = sorted(set(body) - set(keys))
    if unknown:
        raise TriggerError(unknown[0], f"unknown field; allowed: {allowed}")


def _json_type(value: Any) -> str:
    names = {list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


class TriggeredRunSerializer(LocatedMixin, serializers.ModelSerializer):
    """What a trigger answers: the run, and whether it was an idempotency repeat."""

    job = serializers.SlugRelatedField(slug_field="name", read_only=True)
    idempotency_hit = serializers.BooleanField(read_only=True)

    class Meta:
        model = JobRun
        fields = ("id", "status", "job", "queue", "available_at", "idempotency_hit")
        read_only_fields = fields


#: A cost or budget amount, always a string in JSON (the project's DRF settings aside).
COST = {"max_digits": 18, "decimal_places": 6, "coerce_to_string": True, "read_only": True}


class AttemptSerializer(serializers.ModelSerializer):
    """One attempt of a run."""

    class Meta:
        model = RunAttempt
        fields = (
            "number", "outcome", "preset", "status_code", "error_type", "error", "endpoint",
            "started_at", "finished_at", "duration_ms", "worker", "response_excerpt",
        )  # fmt: skip
        read_only_fields = fields


class RunSerializer(LocatedMixin, serializers.ModelSerializer):
    """A run with its attempts, oldest first."""

    job = serializers.SlugRelatedField(slug_field="name", read_only=True)
    reserved_cost = serializers.DecimalField(
        **COST, allow_null=True, help_text="Reserved from the budget for the attempt in flight."
    )
    actual_cost = serializers.DecimalField(
        **COST, allow_null=True, help_text="What the run's attempts spent so far."
    )
    attempts = AttemptSerializer(many=True, read_only=True)

    class Meta:
        model = JobRun
        fields = (
            "id", "job", "status", "payload", "queue", "priority", "available_at",
            "idempotency_key", "attempt", "max_attempts", "retry_overrides", "result",
            "error_type", "last_error", "endpoint_used", "preset", "cancel_requested",
            "replay_count",
            "replayed_by", "replayed_at", "reserved_cost", "actual_cost", "created_at",
            "updated_at", "dequeued_at", "started_at", "finished_at", "attempts",
        )  # fmt: skip
        read_only_fields = fields


class DeliverySerializer(serializers.ModelSerializer):
    """One completion webhook: what it notifies, where, and how its attempts went."""

    class Meta:
        model = WebhookDelivery
        fields = (
            "id", "delivery_id", "run", "workflow_run", "event", "url", "status", "attempt",
            "next_attempt_at", "last_status_code", "last_error", "last_response", "created_at",
            "delivered_at",
        )  # fmt: skip
        read_only_fields = fields


class DeliveryListSerializer(serializers.Serializer):
    """A run's deliveries, oldest first (for the schema)."""

    results = DeliverySerializer(many=True)


class RunSummarySerializer(RunSerializer):
    """A run in a list: everything but its attempts."""

    attempts = None  # type: ignore[assignment]

    class Meta(RunSerializer.Meta):
        fields = tuple(f for f in RunSerializer.Meta.fields if f != "attempts")
        read_only_fields = fields


class StrictSerializerMixin:
    """Refuse fields the serializer does not know, naming them (DRF would drop them silently)."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            writable = {n for n, f in self.fields.items() if not f.read_only}  # type: ignore[attr-defined]
            unknown = sorted(set(data) - writable)
            if unknown:
                allowed = ", ".join(sorted(writable))
                raise serializers.ValidationError(
                    {unknown[0]: [f"unknown field; allowed: {allowed}"]}
                )
        return super().to_internal_value(data)  # type: ignore[misc]


#: Job columns the API reads and writes. ``signing_secret`` and header values are
#: written only: they are credentials, and a ``jobs:read`` key must not see them.
JOB_FIELDS = (
    "name", "description", "queue", "priority", "enabled", "endpoint_url",
    "fallback_endpoint_urls", "http_method", "headers", "signing_secret", "handler",
    "timeout_secs", "max_attempts", "retry_strategy", "retry_initial_delay_secs",
    "retry_backoff_coefficient", "retry_max_delay_secs", "retry_delays_secs", "retry_jitter",
    "retry_jitter_window_secs",
    "retry_function", "non_retryable_errors", "on_exhaustion", "schedule", "timezone",
    "schedule_missed", "schedule_overlap", "retention_days", "max_concurrency", "rate_limit_max",
    "rate_limit_window_secs", "project", "estimated_cost", "webhook_url", "webhook_events",
    "webhook_retry", "execution", "preset",
)  # fmt: skip


class ProjectNameField(serializers.SlugRelatedField):
    """A project by its name; anything but a string is refused, not looked up as text."""

    def to_internal_value(self, data: Any) -> Project:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class JobSerializer(LocatedMixin, StrictSerializerMixin, serializers.ModelSerializer):
    """A job definition; checked by ``Job.clean()`` as in the admin."""

    header_names = serializers.SerializerMethodField()
    project = ProjectNameField(
        slug_field="name",
        queryset=Project.objects.all(),
        allow_null=True,
        required=False,
        help_text="The name of the project whose daily budget the runs spend from; null for none.",
        error_messages={
            "does_not_exist": "no project named {value!r}; allowed: the name of an existing "
            "project (add it in the admin), or null",
            "invalid": "must be a project name (a string), or null",
        },
    )

    class Meta:
        model = Job
        fields = (*JOB_FIELDS, "header_names", "schedule_last_tick", "created_at", "updated_at")
        read_only_fields = ("schedule_last_tick", "created_at", "updated_at")
        extra_kwargs = {
            "headers": {"write_only": True},
            "signing_secret": {"write_only": True},
            # A string whatever the project's COERCE_DECIMAL_TO_STRING says: the schema's type.
            "estimated_cost": {"coerce_to_string": True},
        }

    def get_header_names(self, job: Job) -> list[str]:
        """Return the names of the headers sent with every request (not their values)."""
        return sorted(job.headers) if isinstance(job.headers, dict) else []

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        name = self.instance.name if self.instance else attrs.get("name")
        owned = registry.code_owned(name, attrs) if isinstance(name, str) else {}
        if owned:
            raise serializers.ValidationError(owned)
        candidate = (
            Job(**{f: getattr(self.instance, f) for f in JOB_FIELDS}) if self.instance else Job()
        )
        for field, value in attrs.items():
            setattr(candidate, field, value)
        try:
            candidate.clean()
        except ModelValidationError as exc:
            raise serializers.ValidationError(exc.message_dict) from None
        return attrs


class JobUpdateSerializer(JobSerializer):
    """A job definition being changed: its name is the URL's and stays."""

    class Meta(JobSerializer.Meta):
        read_only_fields = ("name", *JobSerializer.Meta.read_only_fields)


class BulkTriggerSerializer(serializers.Serializer):
    """The body of a bulk trigger (for the schema; ``BulkTriggerRequest`` parses it)."""

    payloads = serializers.ListField(child=serializers.JSONField())
    idempotency_keys = serializers.ListField(child=serializers.CharField(), required=False)
    delay = serializers.JSONField(required=False)
    run_at = serializers.DateTimeField(required=False, help_text=RUN_AT_HELP)
    priority = serializers.IntegerField(required=False, min_value=-100, max_value=100)
    queue = serializers.CharField(required=False)
    max_attempts = serializers.IntegerField(required=False, min_value=1)
    retry = serializers.DictField(required=False)


class BulkTriggeredSerializer(serializers.Serializer):
    """What a bulk trigger answers: one entry per payload, in order."""

    runs = TriggeredRunSerializer(many=True)
    created = serializers.IntegerField(help_text="Runs this request made (the rest were repeats).")


class TriggerSerializer(serializers.Serializer):
    """The body of a trigger (for the schema; ``TriggerRequest`` parses it)."""

    payload = serializers.JSONField(required=False)
    delay = serializers.JSONField(required=False, help_text="Seconds, or a duration: 30s, PT5M.")
    run_at = serializers.DateTimeField(required=False, help_text=RUN_AT_HELP)
    priority = serializers.IntegerField(required=False, min_value=-100, max_value=100)
    queue = serializers.CharField(required=False)
    idempotency_key = serializers.CharField(required=False, max_length=255)
    max_attempts = serializers.IntegerField(required=False, min_value=1)
    retry = serializers.DictField(required=False)


BULK_TRIGGER_KEYS = (
    "payloads",
    "idempotency_keys",
    *(k for k in TRIGGER_KEYS if k not in ("payload", "idempotency_key")),
)


@dataclass(frozen=True, slots=True)
class BulkTriggerRequest:
    """A bulk trigger body, parsed into ``trigger_many()`` arguments."""

    payloads: list[Any]
    options: Mapping[str, Any]

    @classmethod
    def parse(cls, body: Any, limit: int) -> BulkTriggerRequest:
        """Read the body; raise ``TriggerError`` naming the field that is unusable."""
        if not isinstance(body, Mapping):
            raise TriggerError("body", f"must be a JSON object with {', '.join(BULK_TRIGGER_KEYS)}")
        unknown = sorted(set(body) - set(BULK_TRIGGER_KEYS))
        if unknown:
            raise TriggerError(
                unknown[0], f"unknown field; allowed: {', '.join(BULK_TRIGGER_KEYS)}"
            )
        payloads = body.get("payloads")
        if not isinstance(payloads, list) or not 1 <= len(payloads) <= limit:
            raise TriggerError(
                "payloads",
                f"must be a list of 1 to {limit} payloads (STRAIT['API_BULK_TRIGGER_MAX'])",
            )
        keys = body.get("idempotency_keys")
        if keys is not None and (
            not isinstance(keys, list) or not all(isinstance(k, str) for k in keys)
        ):
            raise TriggerError("idempotency_keys", "must be a list of strings, one per payload")
        options = {k: v for k, v in body.items() if k != "payloads" and v is not None}
        if "run_at" in options:
            options["run_at"] = parse_run_at(options["run_at"])
        return cls(payloads=payloads, options=options)


class ReplaySerializer(StrictSerializerMixin, serializers.Serializer):
    """The optional body of a replay: a payload to replace the run's."""

    payload = serializers.JSONField(required=False)


class DiscardSerializer(StrictSerializerMixin, serializers.Serializer):
    """The optional body of a discard: why, for the log."""

    reason = serializers.CharField(required=False, allow_blank=True, max_length=500)


class InstantField(serializers.DateTimeField):
    """A datetime read as every API datetime is (:func:`instant_or_none`); answered in UTC."""

    def to_internal_value(self, value: Any) -> dt.datetime:
        parsed = instant_or_none(value)
        if parsed is None:
            raise serializers.ValidationError(f"must be {DATETIME_SYNTAX}; got {shown(value)}")
        return parsed


class BulkReplaySerializer(StrictSerializerMixin, serializers.Serializer):
    """Which dead letters to replay: every given filter must hold; ``all`` for no filter."""

    job = serializers.ListField(child=serializers.CharField(), required=False, allow_empty=False)
    queue = serializers.ListField(child=serializers.CharField(), required=False, allow_empty=False)
    error_type = serializers.ListField(
        child=serializers.CharField(), required=False, allow_empty=False,
        help_text="Exact types (http.503) or prefixes ending in .* (http.*).",
    )  # fmt: skip
    created_after = InstantField(required=False)
    created_before = InstantField(required=False)
    all = serializers.BooleanField(
        required=False, default=False, help_text="Replay every dead letter (no filter given)."
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        filters = set(attrs) - {"all"}
        if not filters and not attrs.get("all"):
            raise serializers.ValidationError(
                {"all": ["give a filter (job, queue, error_type, created_after, created_before), "
                         "or all: true to replay every dead letter"]}
            )  # fmt: skip
        return attrs


class ReplayedSerializer(serializers.Serializer):
    """How many runs a bulk replay moved back to the queue."""

    replayed = serializers.IntegerField()


class PauseSerializer(serializers.Serializer):
    """A job's name and whether it is enabled, after pause or resume."""

    name = serializers.CharField()
    enabled = serializers.BooleanField()


class CircuitSerializer(serializers.ModelSerializer):
    """An endpoint's circuit, with the health of the same URL (null before any result)."""

    state = serializers.ChoiceField(choices=CircuitState.choices, read_only=True)
    health_score = serializers.FloatField(read_only=True, allow_null=True)
    health_level = serializers.ChoiceField(
        choices=HealthLevel.choices, read_only=True, allow_null=True
    )

    class Meta:
        model = EndpointCircuit
        fields = (
            "endpoint_url", "state", "failures", "opened_at", "last_failure_at",
            "probe_started_at", "updated_at", "health_score", "health_level",
        )  # fmt: skip
        read_only_fields = fields


class CircuitResetSerializer(StrictSerializerMixin, serializers.Serializer):
    """Which circuit to close."""

    endpoint_url = serializers.CharField(
        max_length=2048, help_text="The endpoint URL exactly as circuits/ lists it."
    )


class HealthSerializer(serializers.ModelSerializer):
    """An endpoint's health: the EWMAs of its recent answers, its score (0-100) and level."""

    score = serializers.FloatField(read_only=True)
    level = serializers.ChoiceField(choices=HealthLevel.choices, read_only=True)

    class Meta:
        model = EndpointHealth
        fields = (
            "endpoint_url", "score", "level", "success_rate", "failure_rate", "latency_p95_ms",
            "samples", "updated_at",
        )  # fmt: skip
        read_only_fields = fields


class BudgetDaySerializer(serializers.Serializer):
    """One day of a project's ledger (zeros on a day with no row)."""

    day = serializers.DateField()
    spent = serializers.DecimalField(**COST)
    reserved = serializers.DecimalField(**COST)
    soft_warning_sent_at = serializers.DateTimeField(allow_null=True)


class BudgetSerializer(serializers.Serializer):
    """A project's budget and today's ledger."""

    name = serializers.CharField()
    daily_budget = serializers.DecimalField(**COST)
    soft_limit_ratio = serializers.FloatField()
    day = serializers.DateField(help_text="Today, in Django's TIME_ZONE: the budget day.")
    spent = serializers.DecimalField(**COST)
    reserved = serializers.DecimalField(**COST, help_text="Held by attempts in flight.")
    remaining = serializers.DecimalField(
        **COST, help_text="daily_budget - spent - reserved, never below 0."
    )


class BudgetHistorySerializer(serializers.Serializer):
    """A project's budget and its last days, newest first."""

    name = serializers.CharField()
    daily_budget = serializers.DecimalField(**COST)
    soft_limit_ratio = serializers.FloatField()
    days = BudgetDaySerializer(many=True)


#: Keys a workflow trigger body may hold.
WORKFLOW_TRIGGER_KEYS = ("payload", "idempotency_key")


@dataclass(frozen=True, slots=True)
class WorkflowTriggerRequest:
    """A workflow trigger body: its payload and idempotency key (``trigger_workflow`` checks them)."""

    payload: Any
    idempotency_key: Any

    @classmethod
    def parse(cls, body: Any, header_key: str | None) -> WorkflowTriggerRequest:
        """Read a JSON body and the Idempotency-Key header; raise ``TriggerError`` if unusable."""
        _check_body(body, WORKFLOW_TRIGGER_KEYS)
        key = idempotency_key(body.get("idempotency_key"), header_key)
        return cls(payload=body.get("payload"), idempotency_key=key)


class WorkflowTriggerSerializer(serializers.Serializer):
    """The body of a workflow trigger (for the schema; ``WorkflowTriggerRequest`` parses it)."""

    payload = serializers.JSONField(required=False, help_text="Every step's run gets it.")
    idempotency_key = serializers.CharField(required=False, max_length=255)


class TriggeredWorkflowRunSerializer(LocatedMixin, serializers.ModelSerializer):
    """What a workflow trigger answers: the workflow run, and whether it was a repeat."""

    workflow = serializers.SlugRelatedField(slug_field="name", read_only=True)
    idempotency_hit = serializers.BooleanField(read_only=True)

    class Meta:
        model = WorkflowRun
        fields = ("id", "workflow", "status", "idempotency_key", "created_at", "idempotency_hit")
        read_only_fields = fields


class StepRunSerializer(serializers.ModelSerializer):
    """One step of a workflow run: its status, and its JobRun once started."""

    step = serializers.CharField(source="step.name", read_only=True)
    job = serializers.CharField(source="step.job.name", read_only=True)
    depends_on = serializers.ListField(
        source="step.depends_on", child=serializers.CharField(), read_only=True
    )
    run_id = serializers.IntegerField(allow_null=True, read_only=True)
    run_status = serializers.SerializerMethodField()
    attempt = serializers.SerializerMethodField()
    error_type = serializers.SerializerMethodField()

    class Meta:
        model = WorkflowStepRun
        fields = (
            "step", "status", "job", "depends_on", "run_id", "run_status", "attempt", "error_type",
        )  # fmt: skip
        read_only_fields = fields

    def get_run_status(self, sr: WorkflowStepRun) -> str | None:
        return sr.run.status if sr.run is not None else None

    def get_attempt(self, sr: WorkflowStepRun) -> int | None:
        return sr.run.attempt if sr.run is not None else None

    def get_error_type(self, sr: WorkflowStepRun) -> str:
        return sr.run.error_type if sr.run is not None else ""


class WorkflowRunSummarySerializer(LocatedMixin, serializers.ModelSerializer):
    """A workflow run in a list: everything but its payload and steps."""

    workflow = serializers.SlugRelatedField(slug_field="name", read_only=True)

    class Meta:
        model = WorkflowRun
        fields = (
            "id", "workflow", "status", "idempotency_key", "error_type", "last_error",
            "created_at", "progressed_at", "finished_at",
        )  # fmt: skip
        read_only_fields = fields


class WorkflowRunSerializer(WorkflowRunSummarySerializer):
    """A workflow run with its payload and its step runs, in definition order."""

    steps = StepRunSerializer(source="step_runs", many=True, read_only=True)

    class Meta(WorkflowRunSummarySerializer.Meta):
        fields = (*WorkflowRunSummarySerializer.Meta.fields, "payload", "steps")
        read_only_fields = fields
