"""The demo's Python jobs: one per kind of ending a run can have.

``charge-card`` takes its "randomness" from the payload (``declines``: how many
attempts the fake card network declines; ``expired``: the card is expired), so
that ``strait_demo --seed S`` replays the same story and a test can check each
run against what its payload says should happen.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

from django_strait import Error, Fail, job


class CrmUnavailable(Exception):
    """The (imaginary) CRM refused the connection."""


@job(name="send-welcome-email", description="Send a welcome email. Always succeeds.")
def send_welcome_email(payload: dict[str, Any]) -> dict[str, Any]:
    """Pretend to send an email; the result is what a mail API would return."""
    address = payload.get("to", "someone@example.com")
    message_id = hashlib.sha256(address.encode()).hexdigest()[:16]
    return {"sent_to": address, "message_id": f"<{message_id}@example.com>"}


@job(name="resize-image", description="Make thumbnails (an async handler). Always succeeds.")
async def resize_image(payload: dict[str, Any]) -> dict[str, Any]:
    """Pretend to resize an image without blocking the worker's event loop."""
    await asyncio.sleep(0.01)
    width = int(payload.get("width", 1024))
    return {"image": payload.get("image", "photo.jpg"), "thumbnails": [width // 4, width // 8]}


@job(
    name="charge-card",
    max_attempts=3,
    description="Charge a card: declined now and then (retried), sometimes expired (failed).",
)
def charge_card(payload: dict[str, Any], context: Any) -> dict[str, Any]:
    """Charge ``amount``; a declined attempt retries, an expired card fails for good."""
    if payload.get("expired"):
        raise Fail(f"card {payload.get('card', '?')} expired: asking the customer is the only fix")
    if context.attempt <= int(payload.get("declines", 0)):
        raise Error(
            f"card declined on attempt {context.attempt} (issuer busy)", type="card.declined"
        )
    return {"charged": payload.get("amount", 0), "attempt": context.attempt}


@job(name="sync-crm", max_attempts=3, description="Push a contact to the CRM, which is down.")
def sync_crm(payload: dict[str, Any]) -> None:
    """Always fail, so that every run ends in the dead-letter queue."""
    raise CrmUnavailable(
        f"connection refused by crm.invalid while syncing {payload.get('contact')}"
    )
