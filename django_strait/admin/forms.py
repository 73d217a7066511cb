"""Forms of the admin's own pages: a job (secrets write-only), trigger it, replay a run."""

from __future__ import annotations

from typing import Any

from django import forms

from django_strait.admin.inputs import BoundedJSONField, read_json
from django_strait.models import Execution, Job
from django_strait.services.triggering import TriggerError

#: What the admin shows in place of a stored header value; posted back, it keeps the value.
MASK = "••••••"

SECRET_SET = "A secret is set (write-only: it is never shown)."
SECRET_UNSET = "No secret is set."
SECRET_EDIT = {
    True: " Leave this empty to keep it, type a new one to replace it, or tick “Clear the "
    "secret” to remove it.",
    False: " Type one to sign every request (Strait-Signature).",
}
HEADERS_HELP = (
    f"A JSON object of header name to value. Stored values are shown as {MASK}: leave "
    f"{MASK} to keep a header's value, type a value to replace it, remove the line to "
    "drop the header."
)

PAYLOAD_HELP = 'JSON: an object such as {"order_id": 42}, a list, a string, a number or null.'


class PayloadField(forms.CharField):
    """A JSON document typed into a text area; the cleaned value is the parsed JSON.

    Read as every surface reads outside JSON (``inputs.read_json``): the text stays
    in the box as typed when it is refused.
    """

    widget = forms.Textarea(attrs={"rows": 12, "cols": 80, "class": "vLargeTextField"})

    def to_python(self, value: Any) -> Any:
        text = super().to_python(value).strip()
        if not text:
            return None
        try:
            return read_json(text)
        except forms.ValidationError as exc:
            raise forms.ValidationError(f"{exc.messages[0]} {PAYLOAD_HELP}") from None


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


def secret_state(secret: str) -> str:
    """Return what a page says about a job's signing secret: whether one is set."""
    return SECRET_SET if secret else SECRET_UNSET


def masked(headers: object) -> object:
    """Return ``headers`` with every value replaced by the mask (anything else as it is)."""
    if not isinstance(headers, dict):
        return {}
    return dict.fromkeys(headers, MASK)


def unmasked(edited: object, stored: object) -> object:
    """Return the headers to save: a masked value takes the value stored under that name."""
    if not isinstance(edited, dict):
        return edited  # Job.clean says what headers must be
    kept = stored if isinstance(stored, dict) else {}
    missing = [name for name, value in edited.items() if value == MASK and name not in kept]
    if missing:
        raise forms.ValidationError(
            [
                f"header {name!r}: no value is stored under this name to keep; "
                f"allowed: {MASK} only for a stored header, else type the value"
                for name in missing
            ]
        )
    return {name: kept[name] if value == MASK else value for name, value in edited.items()}


class OptionalJSONField(BoundedJSONField):
    """A JSON field whose "not set" (None, inherit the default) shows empty, not ``null``."""

    def prepare_value(self, value: Any) -> Any:
        return "" if value is None else super().prepare_value(value)


class JobForm(forms.ModelForm):
    """A job: its signing secret and header values are written here, never shown again."""

    signing_secret = forms.CharField(
        label="Signing secret",
        required=False,
        max_length=Job._meta.get_field("signing_secret").max_length,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
    )
    clear_signing_secret = forms.BooleanField(label="Clear the secret", required=False)
    headers = BoundedJSONField(
        label="Headers",
        required=False,
        empty={},
        help_text=HEADERS_HELP,
        widget=forms.Textarea(attrs={"rows": 4, "cols": 80, "class": "vLargeTextField"}),
    )

    class Meta:
        model = Job
        fields = ("signing_secret", "headers")  # the admin adds the rest from its fieldsets
        field_classes = {"retry_delays_secs": OptionalJSONField}
        help_texts = {
            "retry_delays_secs": "custom strategy: seconds per retry, e.g. [1, 5, 30]; the last "
            "repeats. Empty: the default (STRAIT['DEFAULT_RETRY']).",
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        stored = self.instance if self.instance.pk else None
        self._secret = stored.signing_secret if stored else ""
        self._headers = stored.headers if stored else {}
        # The form's initial values are what it renders and what "changed" compares with.
        self.initial["signing_secret"] = ""
        self.initial["headers"] = masked(self._headers)
        self.fields["signing_secret"].help_text = (
            secret_state(self._secret) + SECRET_EDIT[bool(self._secret)]
        )
        if "execution" in self.fields:
            # A form posted without it (a script, an older page) keeps the job as it is.
            self.fields["execution"].required = False

    def clean_execution(self) -> str:
        chosen = self.cleaned_data.get("execution")
        return chosen or self.instance.execution or Execution.THREAD

    def clean_headers(self) -> object:
        edited = self.cleaned_data.get("headers")
        return unmasked({} if edited is None else edited, self._headers)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        typed = cleaned.get("signing_secret", "")
        if cleaned.get("clear_signing_secret"):
            if typed:
                self.add_error(
                    "signing_secret", "Type a new secret or tick “Clear the secret”, not both."
                )
            else:
                cleaned["signing_secret"] = ""
        elif not typed:
            cleaned["signing_secret"] = self._secret
        return cleaned

    @property
    def changed_data(self) -> list[str]:
        """Name the fields whose saved value changes (the secret once, whichever box did it)."""
        changed = set(super().changed_data) - {"signing_secret", "clear_signing_secret"}
        secret = getattr(self, "cleaned_data", {}).get("signing_secret", self._secret)
        if secret != self._secret:
            changed.add("signing_secret")
        return [name for name in self.fields if name in changed]
