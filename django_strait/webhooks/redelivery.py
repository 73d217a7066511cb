"""Redelivering completion webhooks from code: what the admin's action and the REST API call."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from django.utils import timezone

from django_strait.storage import Storage, backend

logger = logging.getLogger(__name__)


def redeliver(delivery_ids: Iterable[int], *, by: str = "", storage: Storage | None = None) -> int:
    """Make deliveries due now with a fresh attempt budget (any status); return how many.

    The receiver gets the same ``Strait-Delivery-Id`` again: to it, a repeat.
    """
    storage = storage or backend()
    ids = list(delivery_ids)
    moved = storage.redeliver(ids, now=timezone.now())
    logger.info("redelivering %s webhook(s) (asked by %s)", moved, by or "unknown")
    return moved
