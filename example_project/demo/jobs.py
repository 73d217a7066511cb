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


# The demo workflow's jobs (see workflow.py): an order checked, then stock reserved and
# the payment taken side by side, then shipped once both are done (a fan-in).


@job(name="check-order", description="Workflow step: check an order. Always succeeds.")
def check_order(payload: dict[str, Any]) -> dict[str, Any]:
    """Return the order's lines, as the later steps need them."""
    return {"order": payload.get("order"), "lines": int(payload.get("lines", 2))}


@job(name="reserve-stock", description="Workflow step: reserve the order's stock.")
def reserve_stock(payload: dict[str, Any], context: Any) -> dict[str, Any]:
    """Reserve as many items as the checked order has lines."""
    return {"reserved": context.parents["check"]["lines"]}


@job(
    name="take-payment",
    max_attempts=1,
    retry={"initial_delay": "30s", "jitter": 0},
    description="Workflow step: take the payment; the gateway is busy twice, then accepts.",
)
def take_payment(payload: dict[str, Any], context: Any) -> dict[str, Any]:
    """Fail the first two attempts (retryable); alone, this job would not retry at all."""
    if context.attempt <= 2:
        raise Error(
            f"payment gateway busy on attempt {context.attempt}", type="payment.gateway_busy"
        )
    return {"paid": payload.get("amount", 0), "attempt": context.attempt}


@job(name="ship-order", description="Workflow step: ship once stock and payment are done.")
def ship_order(payload: dict[str, Any], context: Any) -> dict[str, Any]:
    """Ship what the two parents reserved and charged."""
    parents = context.parents
    return {"shipped": parents["reserve"]["reserved"], "paid": parents["charge"]["paid"]}
