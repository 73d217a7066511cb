"""The worker's steps on the calling thread: claim and start, execute, record, deliver.

For a project's tests (``django_strait.testing``). A Django ``TestCase`` keeps
its rows in a transaction of the test's own connection, which a worker's
threads never see; this runs the steps a worker runs, one after another, on
the caller's connection: the claim with its gate (limits, circuits, budgets,
held runs), the executors' attempt, ``worker.outcomes.to_record`` (the retry
policy, dead letters), the record with every part it writes (the webhook
outbox, workflows, rollups, health), and the webhook deliverer.

Plain-function handlers run on this thread; HTTP calls, ``async def`` handlers
and webhook deliveries run on an event loop (``async_to_sync``) whose database
calls come back to this thread. Process jobs run on this thread too: the memory
limit and the hard timeout of a child process are the worker's, not the test's.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.utils import timezone

from django_strait.conf import strait_settings
from django_strait.database import alias, control_alias, placed
from django_strait.dispatch.http import HttpDispatcher
from django_strait.dispatch.python import call_sync, is_async, settle
from django_strait.rules.outcome import Outcome
from django_strait.rules.states import Transition
from django_strait.services.breaker import CircuitBreaker
from django_strait.storage import Claimed, OrmStorage, Record, RecordBatch
from django_strait.transitions import claim_and_start, record
from django_strait.worker.accounting import accounted, batch_of, write_shared
from django_strait.worker.catalog import Catalog, JobInfo
from django_strait.worker.executors import attempt, context_of
from django_strait.worker.gate import Gate
from django_strait.worker.heartbeat import Heartbeats
from django_strait.worker.outcomes import to_record
from django_strait.worker.webhooks import ANSWER_READ_BYTES, Deliverer, announce

#: Runs claimed per round (a worker's default batch).
BATCH_SIZE = 100


@dataclass
class Drained:
    """What one drain did: its attempts, where each left its run, the webhooks it settled."""

    attempts: int = 0
    #: The run's status after each attempt ("queued" is a retry), counted.
    ended: Counter[str] = field(default_factory=Counter)
    #: Webhook deliveries settled (delivered, failed, or due again later).
    webhooks: int = 0
    #: The ids of the runs it attempted, in order (a run retried shows more than once).
    run_ids: list[int] = field(default_factory=list)

    @property
    def completed(self) -> int:
        return self.ended["completed"]

    @property
    def retried(self) -> int:
        return self.ended["queued"]

    @property
    def dead_lettered(self) -> int:
        return self.ended["dead_letter"]

    @property
    def failed(self) -> int:
        return self.ended["failed"]

    def add(self, other: Drained) -> None:
        """Count what ``other`` did too."""
        self.attempts += other.attempts
        self.ended.update(other.ended)
        self.webhooks += other.webhooks
        self.run_ids += other.run_ids


class InlineWorker:
    """A worker without threads of its own: ``drain()`` runs what is due, here and now."""

    def __init__(
        self,
        *,
        worker_id: str = "inline",
        queues: Sequence[str] = (),
        skip_retry_delays: bool = True,
        webhooks: bool = True,
        max_rounds: int = 1000,
        using: str | None = None,
    ) -> None:
        self.worker_id = worker_id
        self.queues = tuple(queues)
        self.skip_retry_delays = skip_retry_delays
        self.webhooks = webhooks
        self.max_rounds = max_rounds
        # The portable backend, whose clock is Python's: PostgreSQL's now(), which its
        # statements compare with, stands still for a test's whole transaction (runs
        # triggered after the test began would never be due).
        self.storage = OrmStorage(alias(using))
        # Rows read afresh at each drain: a test edits jobs between two.
        self.catalog = Catalog(ttl=0.0, using=self.storage.alias)
        # Circuits and endpoint health on the control database, as a worker's engine keeps them.
        self.shared = placed() and control_alias() != self.storage.alias
        self.circuits = CircuitBreaker(OrmStorage(control_alias()) if self.shared else self.storage)
        # No other worker here to leave a run to: an unknown handler fails at once.
        self.gate = Gate(self.storage, self.catalog, self.circuits, handler_grace=0)
        self.beats = Heartbeats(worker_id, self.storage)
        self.rng = random.Random()

    def drain(self) -> Drained:
        """Run every due run, and what those runs make due, until none is left.

        A retry is due again at once when ``skip_retry_delays`` (its delay is what
        the policy says, skipped); a run delayed or held (a limit, a circuit, a
        paused job) stays queued, as with a worker.
        """
        drained = Drained()
        for _ in range(self.max_rounds):
            started = claim_and_start(
                self.worker_id, queues=self.queues, limit=BATCH_SIZE, gate=self.gate,
                job_names=lambda job_id: self.catalog.get(job_id).name, storage=self.storage,
            )  # fmt: skip
            if not started:
                break
            drained.add(self._round(started))
        else:
            raise RuntimeError(
                f"runs were still due after {self.max_rounds} rounds of {BATCH_SIZE}: a job "
                "that keeps retrying at once (skip_retry_delays) or keeps triggering itself?"
            )
        if self.webhooks:
            drained.webhooks += async_to_sync(self._deliver)()
        return drained

    def _round(self, started: list[Claimed]) -> Drained:
        records = [self._attempt(run) for run in started]
        if self.shared:  # the runs on their alias, then health and circuits on the control one
            done = record(RecordBatch(self.worker_id, records), storage=self.storage)
            write_shared(self.circuits.storage, self.circuits, records, self.catalog)
        else:
            done = record(batch_of(self.worker_id, records, self.catalog, self.circuits),
                          storage=self.storage)  # fmt: skip
            accounted(self.circuits, done)
        moved = [done.moved[r.run_id] for r in records if r.run_id in done.moved]
        return Drained(len(records), Counter(moved), run_ids=[r.run_id for r in records])

    def _attempt(self, run: Claimed) -> Record:
        info = self.catalog.get(run.job_id)
        begun = time.monotonic()
        outcome = self._execute(info, run)
        rec = to_record(
            run, info, outcome, begun=begun, now=timezone.now(), catalog=self.catalog, rng=self.rng
        )
        if self.skip_retry_delays and rec.transition is Transition.RETRY:
            rec = dataclasses.replace(rec, available_at=rec.finished_at)
        return rec

    def _execute(self, info: JobInfo, run: Claimed) -> Outcome:
        handler = info.handler
        if handler is None or run.row_error or info.row.endpoint_url or is_async(handler):
            return async_to_sync(self._on_the_loop)(info, run)
        # A plain function on this thread, on the test's connection, left open after.
        done = call_sync(
            handler, run.payload, context_of(run, info, self.beats),
            max_result_bytes=strait_settings.RESULT_MAX_BYTES, close_connections=False,
        )  # fmt: skip
        if isinstance(done, Outcome):
            return done
        return async_to_sync(settle)(done, max_result_bytes=strait_settings.RESULT_MAX_BYTES)

    async def _on_the_loop(self, info: JobInfo, run: Claimed) -> Outcome:
        http = _http(strait_settings.RESULT_MAX_BYTES, limit=1)
        await http.start()
        try:
            return await attempt(
                info, run, http=http, beats=self.beats,
                max_result_bytes=strait_settings.RESULT_MAX_BYTES,
            )  # fmt: skip
        finally:
            await http.close()

    async def _deliver(self) -> int:
        """Deliver the webhooks due now; return how many deliveries were settled."""
        http = _http(ANSWER_READ_BYTES, limit=strait_settings.WEBHOOK_CONCURRENCY)
        settled: list[Any] = []

        def sent(batch: Sequence[Any]) -> None:
            settled.extend(batch)
            announce(batch)

        await http.start()
        try:
            deliverer = Deliverer(
                self.storage, self.circuits, http, _on_this_thread, worker_id=self.worker_id,
                batch_size=strait_settings.WEBHOOK_CONCURRENCY,
                timeout=strait_settings.WEBHOOK_TIMEOUT, on_sent=sent,
            )  # fmt: skip
            await deliverer.drain()
        finally:
            await http.close()
        return len(settled)


def _http(max_result_bytes: int, *, limit: int) -> HttpDispatcher:
    return HttpDispatcher(
        max_result_bytes=max_result_bytes,
        user_agent=strait_settings.HTTP_USER_AGENT,
        limit=limit,
        allowed_networks=strait_settings.ALLOWED_PRIVATE_NETWORKS,
    )


def _on_this_thread(fn: Callable[..., Any], *args: Any) -> Awaitable[Any]:
    # Back on the thread that called async_to_sync: its connection, its transaction.
    return sync_to_async(fn, thread_sensitive=True)(*args)
