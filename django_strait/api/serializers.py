"""The wire format of the REST API: the trigger request, and runs as JSON."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.utils import timezone
from django.utils.dateparse import parse_datetime
from rest_framework import serializers

from django_strait.models import JobRun, RunAttempt
from django_strait.triggering import TriggerError

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
        if not isinstance(body, Mapping):
            raise TriggerError(
                "body",
                f"must be a JSON object with {', '.join(TRIGGER_KEYS)}; "
                f"got a JSON {_json_type(body)}",
            )
        unknown = sorted(set(body) - set(TRIGGER_KEYS))
        if unknown:
            raise TriggerError(unknown[0], f"unknown field; allowed: {', '.join(TRIGGER_KEYS)}")
        options = {k: v for k, v in body.items() if k != "payload" and v is not None}
        if "run_at" in options:
            options["run_at"] = parse_run_at(options["run_at"])
        key = idempotency_key(body.get("idempotency_key"), header_key)
        if key is not None:
            options["idempotency_key"] = key
        return cls(payload=body.get("payload"), options=options)


def parse_run_at(value: Any) -> dt.datetime:
    """Parse an ISO 8601 datetime that names its offset."""
    parsed = None
    if isinstance(value, str):
        try:
            parsed = parse_datetime(value)
        except ValueError:  # well formed but impossible, e.g. month 13
            parsed = None
    if parsed is None or timezone.is_naive(parsed):
        raise TriggerError(
            "run_at",
            f"must be an ISO 8601 datetime with a UTC offset, e.g. 2030-01-31T09:00:00Z; got {value!r}",
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


def _json_type(value: Any) -> str:
    names = {list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


class TriggeredRunSerializer(serializers.ModelSerializer):
    """What a trigger answers: the run, and whether it was an idempotency repeat."""

    job = serializers.SlugRelatedField(slug_field="name", read_only=True)
    idempotency_hit = serializers.BooleanField(read_only=True)

    class Meta:
        model = JobRun
        fields = ("id", "status", "job", "queue", "available_at", "idempotency_hit")
        read_only_fields = fields


class AttemptSerializer(serializers.ModelSerializer):
    """One attempt of a run."""

    class Meta:
        model = RunAttempt
        fields = (
            "number", "outcome", "status_code", "error_type", "error", "endpoint",
            "started_at", "finished_at", "duration_ms", "worker", "response_excerpt",
        )  # fmt: skip
        read_only_fields = fields


class RunSerializer(serializers.ModelSerializer):
    """A run with its attempts, oldest first."""

    job = serializers.SlugRelatedField(slug_field="name", read_only=True)
    attempts = AttemptSerializer(many=True, read_only=True)

    class Meta:
        model = JobRun
        fields = (
            "id", "job", "status", "payload", "queue", "priority", "available_at",
            "idempotency_key", "attempt", "max_attempts", "retry_overrides", "result",
            "error_type", "last_error", "endpoint_used", "cancel_requested", "replay_count",
            "replayed_by", "replayed_at", "created_at", "updated_at", "dequeued_at",
            "started_at", "finished_at", "attempts",
        )  # fmt: skip
        read_only_fields = fields
