"""API keys for the REST API and the OJS binding: stored hashed, with scopes and queues."""

from __future__ import annotations

from django.conf import settings
from django.db import models

#: What a key may be allowed to do (issue "surfaces": scopes).
SCOPES = (
    "jobs:read",
    "jobs:write",
    "jobs:trigger",
    "runs:read",
    "runs:write",
    "dlq:read",
    "dlq:replay",
    "circuits:reset",
    "*",
)


class ApiKey(models.Model):
    """A key for the REST API; only its SHA-256 is stored, shown once at creation."""

    name = models.CharField(max_length=200)
    #: The key's first characters, to find it without storing it.
    prefix = models.CharField(max_length=16, unique=True)
    hashed_key = models.CharField(max_length=128)
    scopes = models.JSONField(default=list)
    #: The queues the key may fetch, ack, enqueue and read (OJS and the REST API); empty: all.
    queues = models.JSONField(
        default=list,
        blank=True,
        help_text="The queues this key may fetch, ack, enqueue and read; empty: every queue.",
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"
