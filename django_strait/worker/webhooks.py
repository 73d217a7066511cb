"""The deliverer: a worker's completion webhooks, sent beside its runs, never before them.

Each round claims due deliveries (``storage.webhooks.claim_due``, on a database
thread of its own, so a slow round never delays a claim of runs), passes them
through the endpoints' circuits and health (the same ``CircuitBreaker`` as
dispatches: an open circuit holds a delivery without spending an attempt),
POSTs them concurrently over an HTTP pool of their own (the SSRF guard of
dispatches, ``HttpDispatcher.post``), and settles them: delivered, due again
after the retry policy's delay, or failed. The answers count against the
receivers' circuits and health as dispatches do.

It knows the database only through ``db``, which the worker gives (a call on
the deliverer's own thread).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from django.db import transaction
from django.utils import timezone

from django_strait import signals
from django_strait.conf import strait_settings
from django_strait.decisions import decide, trim
from django_strait.dispatch.http import HttpDispatcher, HttpRequest
from django_strait.dispatch.results import EXCERPT_CHARS
from django_strait.models import DeliveryStatus
from django_strait.outcome import Outcome, failure
from django_strait.resilience import health as endpoint_health
from django_strait.resilience.breaker import Attempted, Candidate, CircuitBreaker
from django_strait.retry import PolicyError
from django_strait.states import Transition
from django_strait.storage import RecordBatch, Storage
from django_strait.storage import webhooks as outbox
from django_strait.storage.parts import Health
from django_strait.webhooks import events

logger = logging.getLogger(__name__)

T = TypeVar("T")
Db = Callable[..., Awaitable[Any]]

#: How far past its timeout a claimed delivery stays leased to the worker sending it.
LEASE_MARGIN = dt.timedelta(seconds=5)


@dataclass(frozen=True, slots=True)
class Sent:
    """One delivery attempt and what became of the delivery."""

    due: outbox.Due
    outcome: Outcome
    settled: outbox.Settled


class Deliverer:
    """Claims due deliveries, sends them, settles them; ``run()`` until stopped."""

    def __init__(
        self,
        storage: Storage,
        circuits: CircuitBreaker,
        http: HttpDispatcher,
        db: Db,
        *,
        worker_id: str,
        batch_size: int = 100,
        poll_interval: float = 1.0,
        timeout: float = 10.0,
        on_sent: Callable[[Sequence[Sent]], None] = lambda sent: None,
        rng: random.Random | None = None,
    ) -> None:
        self.storage = storage
        self.circuits = circuits
        self.http = http
        self._db = db
        self.worker_id = worker_id
        self.batch_size = batch_size
        self.poll_interval = poll_interval
        self.timeout = timeout
        self.lease = dt.timedelta(seconds=timeout) + LEASE_MARGIN
        self._on_sent = on_sent
        self._rng = rng or random.Random()
        #: Deliveries may be due: a run with a webhook ended here (or the worker is stopping).
        self.wake = asyncio.Event()
        self.stopping = False

    def stop(self) -> None:
        """Start no new round; ``run`` returns once the round in flight has settled."""
        self.stopping = True
        self.wake.set()

    async def run(self) -> None:
        """Deliver rounds until stopped; wait for a wake-up or the poll interval when none is due."""
        while not self.stopping:
            self.wake.clear()
            if await self.round_guarded() < self.batch_size:
                await _wait(self.wake, self.poll_interval)

    async def drain(self) -> None:
        """Deliver what is due now, round after round, until nothing is (a ``--burst`` worker's end)."""
        while await self.round_guarded():
            pass

    async def round_guarded(self) -> int:
        """One round; a failure is logged (the claimed rows wait for their lease), never raised."""
        try:
            return await self.round()
        except Exception:
            logger.exception("delivering webhooks failed; trying again in %ss", self.poll_interval)
            return 0

    async def round(self) -> int:
        """Claim, gate, send and settle one batch; return how many were claimed."""
        now = timezone.now()
        due = await self._db(outbox.claim_due, self.storage.alias, self.batch_size, now, self.lease)
        if not due:
            return 0
        sending = await self._db(self._gate, due, now)
        results = await asyncio.gather(*(self._send(d) for d in sending))
        # One clock for the round: deliveries that ended alike are settled by one statement.
        ended = timezone.now()
        sent = [
            Sent(d, o, self._settle_one(d, o, ended)) for d, o in zip(sending, results, strict=True)
        ]
        await self._db(self._write, sent)
        self._on_sent(sent)
        return len(due)

    # -- gate ------------------------------------------------------------------------

    def _gate(self, due: list[outbox.Due], now: dt.datetime) -> list[outbox.Due]:
        """Return the deliveries their receivers' circuits admit; hold the others, no attempt spent."""
        candidates = [Candidate(d.pk, (d.url,), self.timeout) for d in due if not d.row_error]
        cooldown = dt.timedelta(seconds=strait_settings.CIRCUIT_COOLDOWN)
        gated = self.circuits.gate(candidates, now=now, cooldown=cooldown)
        for pk, admission in gated.held.items():
            until = admission.until or now + dt.timedelta(seconds=self.poll_interval)
            outbox.hold(self.storage.alias, [pk], until)
        return [d for d in due if d.row_error or d.pk in gated.chosen]

    # -- send ------------------------------------------------------------------------

    async def _send(self, due: outbox.Due) -> Outcome:
        if due.row_error:
            return failure("webhook.invalid_row", due.row_error, retryable=False, endpoint=due.url)
        notice = events.Notice(
            due.event, due.delivery_id, due.run_id, due.job, events.STATUS_OF_EVENT[due.event],
            due.run_attempt, due.result, due.error_type, due.error, due.finished_at, due.workflow,
        )  # fmt: skip
        body = notice.body()
        req = HttpRequest(
            run_id=due.run_id, job=due.job or due.workflow or "", attempt=due.attempt + 1,
            payload=None, url=due.url, timeout=self.timeout,
        )  # fmt: skip
        return await self.http.post(req, body, notice.headers(body, due.secret, time.time()))

    def _settle_one(self, due: outbox.Due, outcome: Outcome, now: dt.datetime) -> outbox.Settled:
        attempt = due.attempt + 1
        decision = decide(
            outcome, budget_used=attempt, policy=self._policy(due), now=now, rng=self._rng
        )
        common: dict[str, Any] = {
            "status_code": outcome.status_code,
            "error": trim(outcome.error),
            "response": outcome.response_excerpt or _excerpt(outcome.result),
        }
        if decision.transition is Transition.COMPLETE:
            status, next_at, common["delivered_at"] = DeliveryStatus.DELIVERED, now, now
        elif decision.transition is Transition.RETRY and decision.available_at is not None:
            status, next_at = DeliveryStatus.PENDING, decision.available_at
        else:
            status, next_at = DeliveryStatus.FAILED, now
        return outbox.Settled(due.pk, status, attempt, next_at, **common)

    def _policy(self, due: outbox.Due) -> Any:
        try:
            return events.policy(due.retry)
        except PolicyError as exc:
            # A row written around validation must not stop deliveries: the default applies.
            logger.error("delivery %s: %s; using the default policy", due.delivery_id, exc)
            return events.DEFAULT_POLICY

    # -- settle ----------------------------------------------------------------------

    def _write(self, sent: list[Sent]) -> None:
        """Settle the deliveries, then count the answers against circuits and health."""
        outbox.settle(self.storage.alias, [s.settled for s in sent])
        now = timezone.now()
        called = [s for s in sent if not s.due.row_error]
        try:
            self.circuits.account(
                (Attempted(s.due.url, s.outcome.error_type, s.outcome.status_code) for s in called),
                now=now,
                threshold=strait_settings.CIRCUIT_FAILURE_THRESHOLD,
            )
            self._fold_health(called)
        except Exception:
            # The deliveries are settled: a missed count only delays a circuit's opening.
            logger.exception("counting %s webhook answers against circuits failed", len(called))

    def _fold_health(self, sent: list[Sent]) -> None:
        answers = [
            endpoint_health.Answer(
                s.due.url,
                s.outcome.succeeded,
                s.outcome.error_type,
                s.outcome.status_code,
                s.outcome.duration_ms,
                self.timeout,
            )  # fmt: skip
            for s in sent
        ]
        samples = endpoint_health.summarize(answers, alpha=strait_settings.HEALTH_EWMA_ALPHA)
        if samples:
            # The record's health part, fed a batch of samples and no records.
            with transaction.atomic(using=self.storage.alias):
                Health().apply(RecordBatch(self.worker_id, (), samples), {}, self.storage.alias)


def announce(sent: Sequence[Sent]) -> None:
    """Send ``webhook_delivered`` / ``webhook_failed`` for each attempt, and log the failures."""
    for s in sent:
        d, settled = s.due, s.settled
        if settled.status != DeliveryStatus.DELIVERED:
            logger.warning(
                "webhook %s (%s) to %s attempt %s: %s %s -> %s",
                d.delivery_id, d.event, d.url, settled.attempt, s.outcome.error_type,
                s.outcome.error[:200], settled.status,
                extra={"run_id": d.run_id, "delivery_id": d.delivery_id},
            )  # fmt: skip
    signals.send_webhooks(sent)


def _excerpt(result: Any) -> str:
    if result is None:
        return ""
    text = result if isinstance(result, str) else json.dumps(result)
    return text[:EXCERPT_CHARS]


async def _wait(event: asyncio.Event, timeout: float | None) -> None:
    try:
        await asyncio.wait_for(event.wait(), timeout)
    except TimeoutError:
        pass
