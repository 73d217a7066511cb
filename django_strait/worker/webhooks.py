"""The deliverer: a worker's completion webhooks, sent beside its runs, never before them.

It claims due deliveries (``Storage.claim_deliveries``, on a database
thread of its own, so a slow delivery never delays a claim of runs), passes them
through the endpoints' circuits and health (the same ``CircuitBreaker`` as
dispatches: an open circuit holds a delivery without spending an attempt),
POSTs them concurrently over an HTTP pool of their own (the SSRF guard of
dispatches, ``HttpDispatcher.post``), and settles them: delivered, due again
after the retry policy's delay, or failed. The answers count against the
receivers' circuits and health as dispatches do.

Deliveries do not go in lockstep rounds: each free slot (``batch_size``, the
worker's ``WEBHOOK_CONCURRENCY``) is refilled as soon as an answer is settled,
so one receiver that hangs until its timeout holds only its own slots, never
the deliveries to other receivers.

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
from typing import Any, TypeVar

from django.utils import timezone

from django_strait.conf import strait_settings
from django_strait.dispatch import events
from django_strait.dispatch.http import HttpDispatcher, HttpRequest
from django_strait.dispatch.results import EXCERPT_CHARS
from django_strait.models import DeliveryStatus
from django_strait.rules.outcome import Outcome, failure
from django_strait.rules.resilience import health as endpoint_health
from django_strait.rules.retry import PolicyError
from django_strait.rules.states import Transition
from django_strait.services.breaker import Attempted, Candidate, CircuitBreaker
from django_strait.storage import Storage
from django_strait.storage import webhooks as outbox
from django_strait.transitions import sending
from django_strait.transitions.decisions import after_delivery, trim
from django_strait.transitions.sending import Sent

logger = logging.getLogger(__name__)

T = TypeVar("T")
Db = Callable[..., Awaitable[Any]]

#: How far past its timeout a claimed delivery stays leased to the worker sending it.
LEASE_MARGIN = dt.timedelta(seconds=5)
#: The most attempts ``WebhookDelivery.attempt`` holds (a PostgreSQL integer).
ATTEMPT_MAX = 2**31 - 1


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
        #: Deliveries may be due (a run with a webhook ended here), one was answered, or the
        #: worker is stopping.
        self.wake = asyncio.Event()
        self.stopping = False
        self._in_flight: set[asyncio.Task[None]] = set()
        #: Answered deliveries waiting to be settled, with the answer.
        self._answered: list[tuple[outbox.Due, Outcome]] = []

    @property
    def in_flight(self) -> int:
        """Deliveries sent and not answered yet."""
        return len(self._in_flight)

    def stop(self) -> None:
        """Claim nothing more; ``run`` returns once the deliveries in flight are settled."""
        self.stopping = True
        self.wake.set()

    async def run(self) -> None:
        """Deliver until stopped: settle answers, claim what free slots allow, wait when idle."""
        while not self.stopping:
            self.wake.clear()
            claimed, asked = await self.step()
            if claimed < asked or not asked:  # nothing more is due, or every slot is busy
                await _wait(self.wake, self.poll_interval)
        await self._finish()

    async def drain(self) -> None:
        """Deliver what is due now until nothing is and nothing is in flight (``--burst``'s end)."""
        while True:
            claimed, _ = await self.step()
            if self._in_flight:
                await asyncio.wait(set(self._in_flight), return_when=asyncio.FIRST_COMPLETED)
            elif not claimed and not self._answered:
                return

    async def step(self) -> tuple[int, int]:
        """Settle the answered deliveries, then claim and send as many as there are free slots.

        Returns how many were claimed and how many were asked for. A failure is
        logged, never raised: claimed rows wait for their lease, answers not
        settled are sent again (at least once).
        """
        try:
            await self._settle_answered()
            asked = self.batch_size - len(self._in_flight)
            return (await self._claim_and_send(asked) if asked > 0 else 0), asked
        except Exception:
            logger.exception("delivering webhooks failed; trying again in %ss", self.poll_interval)
            return 0, 0

    async def _claim_and_send(self, limit: int) -> int:
        now = timezone.now()
        due = await self._db(self._claim, limit, now)
        if not due:
            return 0
        for d in await self._db(self._gate, due, now):
            task = asyncio.create_task(self._send_one(d))
            self._in_flight.add(task)
            task.add_done_callback(self._in_flight.discard)
        return len(due)

    def _claim(self, limit: int, now: dt.datetime) -> list[outbox.Due]:
        return self.storage.claim_deliveries(limit=limit, now=now, lease=self.lease)

    async def _send_one(self, due: outbox.Due) -> None:
        try:
            outcome = await self._send(due)
        except Exception as exc:  # building the notice failed: this row's fault, not the loop's
            logger.exception("delivery %s could not be sent", due.delivery_id)
            error = f"{type(exc).__name__}: {exc}"
            outcome = failure("webhook.internal", error, retryable=False, endpoint=due.url)
        self._answered.append((due, outcome))
        self.wake.set()

    async def _settle_answered(self) -> None:
        if not self._answered:
            return
        answered, self._answered = self._answered, []
        # One clock for the lot: deliveries that ended alike are settled by one statement.
        ended = timezone.now()
        sent = [Sent(d, o, self._settle_one(d, o, ended)) for d, o in answered]
        await self._db(self._write, sent)
        self._on_sent(sent)

    async def _finish(self) -> None:
        """Wait for the deliveries in flight (each within its timeout) and settle them."""
        if self._in_flight:
            await asyncio.wait(set(self._in_flight))
        try:
            await self._settle_answered()
        except Exception:
            logger.exception("settling webhook answers failed; they will be sent again")

    # -- gate ------------------------------------------------------------------------

    def _gate(self, due: list[outbox.Due], now: dt.datetime) -> list[outbox.Due]:
        """Return the deliveries their receivers' circuits admit; hold the others, no attempt spent."""
        candidates = [Candidate(d.pk, (d.url,), self.timeout) for d in due if not d.row_error]
        cooldown = dt.timedelta(seconds=strait_settings.CIRCUIT_COOLDOWN)
        gated = self.circuits.gate(candidates, now=now, cooldown=cooldown)
        for pk, admission in gated.held.items():
            until = admission.until or now + dt.timedelta(seconds=self.poll_interval)
            self.storage.hold_deliveries([pk], until=until)
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
        attempt = min(due.attempt + 1, ATTEMPT_MAX)  # a row written at the column's limit
        decision = after_delivery(
            outcome, attempt=attempt, policy=self._policy(due), now=now, rng=self._rng
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
        self.storage.settle_deliveries([s.settled for s in sent])
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
        self.circuits.storage.fold_health(samples)  # where circuits live: the control database


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
    sending.send_webhooks(sent)


#: How much of a receiver's 2xx answer the webhook client reads: room for the
#: excerpt a delivery keeps (a UTF-8 character is at most 4 bytes). Nothing else
#: reads it; a longer answer is cut, as a failure's body is.
ANSWER_READ_BYTES = EXCERPT_CHARS * 4


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
