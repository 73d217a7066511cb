"""Completion webhooks' outbox (docs/webhooks.md): one row per notification owed to a receiver."""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q
from django.utils import timezone


class DeliveryStatus(models.TextChoices):
    """Where a notification stands."""

    #: Not delivered yet: due at ``next_attempt_at`` (again, after a failed attempt).
    PENDING = "pending", "Pending"
    #: The receiver answered 2xx.
    DELIVERED = "delivered", "Delivered"
    #: Attempts exhausted, or a refusal that no retry can change (SSRF, a 4xx); redeliverable.
    FAILED = "failed", "Failed"


#: Deliveries that keep their run from pruning: not delivered yet, or given up on and
#: not redelivered.
UNDELIVERED = (DeliveryStatus.PENDING, DeliveryStatus.FAILED)


class WebhookDelivery(models.Model):
    """A notification that a run (or a workflow run) ended, written with the transition that ended it.

    Its ``delivery_id`` is sent as ``Strait-Delivery-Id`` on every attempt, so a
    receiver can drop repeats (delivery is at least once).
    """

    delivery_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    run = models.ForeignKey(
        "django_strait.JobRun",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="webhook_deliveries",
        editable=False,
    )
    workflow_run = models.ForeignKey(
        "django_strait.WorkflowRun",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="webhook_deliveries",
        editable=False,
    )
    event = models.CharField(max_length=32, editable=False)
    #: The receiver, as the job named it when the run ended.
    url = models.CharField(max_length=2048, editable=False)
    status = models.CharField(
        max_length=10,
        choices=DeliveryStatus.choices,
        default=DeliveryStatus.PENDING,
        editable=False,
    )
    #: Attempts made so far.
    attempt = models.PositiveIntegerField(default=0, editable=False)
    #: When a worker may send it (again); a worker sending it pushes this ahead as a lease.
    next_attempt_at = models.DateTimeField(default=timezone.now, editable=False)
    last_status_code = models.IntegerField(null=True, blank=True, editable=False)
    last_error = models.TextField(blank=True, editable=False)
    #: The start of the receiver's last answer (trimmed).
    last_response = models.TextField(blank=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    delivered_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["-id"]
        verbose_name_plural = "webhook deliveries"
        permissions = [("redeliver_webhookdelivery", "Can redeliver webhooks")]
        indexes = [
            # Workers claim due pending rows only: delivered history never slows the claim.
            models.Index(
                fields=["next_attempt_at", "id"],
                condition=Q(status="pending"),
                name="strait_webhook_due",
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(run__isnull=False) | Q(workflow_run__isnull=False),
                name="strait_webhook_has_subject",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.event} {self.delivery_id} ({self.status})"
