"""Forms of the admin's own pages: trigger a job, replay a run with an edited payload."""

from __future__ import annotations

import json
from typing import Any

from django import forms

from django_strait.triggering import TriggerError

PAYLOAD_HELP = 'JSON: an object such as {"order_id": 42}, a list, a string, a number or null.'


class PayloadField(forms.CharField):
    """A JSON document typed into a text area; the cleaned value is the parsed JSON."""

    widget = forms.Textarea(attrs={"rows": 12, "cols": 80, "class": "vLargeTextField"})

    def to_python(self, value: Any) -> Any:
        text = super().to_python(value).strip()
        if not text:
            return None
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(
                f"Not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}. "
                + PAYLOAD_HELP
            ) from exc


class TriggerErrorMixin:
    """Show a ``TriggerError`` on the field it names, or above the form."""

    def add_trigger_error(self, exc: TriggerError) -> None:
        """Attach ``exc`` to its field when the form has one, else to the whole form."""
        field = exc.field if exc.field in self.fields else None  # type: ignore[attr-defined]
        text = exc.message if field else str(exc)
        self.add_error(field, text)  # type: ignore[attr-defined]


class TriggerForm(TriggerErrorMixin, forms.Form):
    """What one "trigger now" asks: a payload, and optionally a key and a priority."""

    payload = PayloadField(required=False, initial="{}", help_text=PAYLOAD_HELP)
    idempotency_key = forms.CharField(
        required=False,
        max_length=255,
        help_text="Optional. A run with this key already queued for the job is returned "
        "instead of a second one.",
    )
    priority = forms.IntegerField(
        required=False, help_text="Optional, -100..100 (higher runs first); empty: the job's."
    )
    delay = forms.CharField(
        required=False, max_length=50, help_text='Optional: "30s", "5m", "2h" or seconds.'
    )

    def trigger_options(self) -> dict[str, Any]:
        """Return the keyword arguments for ``trigger()`` (only what was filled in)."""
        data = self.cleaned_data
        options: dict[str, Any] = {"payload": data["payload"]}
        if data["idempotency_key"]:
            options["idempotency_key"] = data["idempotency_key"]
        if data["priority"] is not None:
            options["priority"] = data["priority"]
        if data["delay"]:
            options["delay"] = data["delay"]
        return options


class ReplayPayloadForm(TriggerErrorMixin, forms.Form):
    """The payload a run is replayed with, prefilled with its current one."""

    payload = PayloadField(required=False, help_text=PAYLOAD_HELP + " Empty: {}.")
