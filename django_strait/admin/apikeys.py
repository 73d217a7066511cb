"""API keys in the admin: create one (its key is shown once), see use, revoke."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from django_strait.admin.inputs import GuardedInput
from django_strait.api.auth import ScopeError, check_queues, issue_key, key_queues, key_state
from django_strait.models import SCOPES, ApiKey


class QueuesField(forms.CharField):
    """Queue names, one per line; empty: every queue."""

    widget = forms.Textarea(attrs={"rows": 3, "cols": 40})

    def prepare_value(self, value: Any) -> Any:
        return "\n".join(value) if isinstance(value, list) else value

    def to_python(self, value: Any) -> list[str]:
        text = super().to_python(value)
        try:
            return check_queues(line.strip() for line in text.splitlines() if line.strip())
        except ScopeError as exc:
            raise forms.ValidationError(str(exc)) from None


class ApiKeyForm(forms.ModelForm):
    """Name, scopes (ticked), queues and expiry; the key itself is made on save."""

    scopes = forms.MultipleChoiceField(
        choices=[(s, s) for s in SCOPES],
        widget=forms.CheckboxSelectMultiple,
        help_text="'*' allows everything.",
    )
    queues = QueuesField(
        required=False,
        help_text="One queue name per line: the key may fetch, ack, enqueue and read only "
        "these queues' jobs and runs (OJS and the REST API). Empty: every queue.",
    )

    class Meta:
        model = ApiKey
        fields = ("name", "scopes", "queues", "expires_at")


@admin.register(ApiKey)
class ApiKeyAdmin(GuardedInput, admin.ModelAdmin):
    """Keys are created here or by ``manage.py strait_api_key``; only their hash is kept."""

    form = ApiKeyForm
    list_display = (
        "name", "prefix", "scope_list", "queue_list", "state", "last_used_at", "expires_at",
    )  # fmt: skip
    list_filter = ("revoked_at",)
    search_fields = ("name", "prefix")
    readonly_fields = ("prefix", "created_by", "created_at", "last_used_at", "revoked_at")
    actions = ["revoke_selected"]

    @admin.display(description="scopes")
    def scope_list(self, key: ApiKey) -> str:
        return ", ".join(key.scopes)

    @admin.display(description="queues")
    def queue_list(self, key: ApiKey) -> str:
        queues = key_queues(key)
        return "all" if queues is None else ", ".join(sorted(queues)) or "none (unreadable)"

    @admin.display(description="state")
    def state(self, key: ApiKey) -> str:
        return key_state(key, timezone.now())

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return ("name", "scopes", "queues", "expires_at") + (self.readonly_fields if obj else ())

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        made, key = issue_key(
            obj.name, form.cleaned_data["scopes"], queues=form.cleaned_data["queues"],
            expires_at=obj.expires_at, created_by=request.user,
        )  # fmt: skip
        obj.pk, obj.prefix = made.pk, made.prefix
        messages.warning(request, f"The new API key (shown once, store it now): {key}")

    @admin.action(description="Revoke selected API keys", permissions=["change"])
    def revoke_selected(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        revoked = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(request, f"Revoked {revoked} API key(s).")
