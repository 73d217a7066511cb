"""The worker: claim a batch, execute concurrently, record results in batches.

``Worker`` composes the parts (docs/architecture.md draws them) and holds no
step of its own:

- the **claimer** (``worker.claimer``) claims, gates (``worker.gate``) and
  starts runs in one transaction, each run with what executing it needs, its
  preset included; the **producer** (``worker.producer``) calls it while slots
  are free;
- the **executors** (``worker.executors``) run each claimed run: HTTP calls and
  ``async def`` handlers on the event loop, plain functions on threads, process
  runs in the pool (``worker.process``), whose runs ``worker.watch`` lets go;
- each ended attempt becomes a record (``worker.outcomes``) that the
  **completer** (``worker.completer``) hands in batches to the **recorder**
  (``worker.recorder``): one round trip per batch, circuits included;
- the **duty runner** (``worker.duty_runner``) runs the periodic duties;
- the **deliverer** (``worker.webhooks``) sends the completion webhooks that
  ended runs owe, over an HTTP pool of its own;
- the **lifecycle** (``worker.lifecycle``) waits for the database, handles
  signals, heartbeats and drains.

One asyncio loop drives everything. Database work runs on four dedicated
threads (``worker.threads``), each with its own connection: one claims, one
records (so claiming and recording overlap), one runs the duties, one delivers
webhooks (so a delivery never waits for, nor delays, a claim).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random

from django.conf import settings as django_settings
from django.db import connections
from django.utils import timezone

from django_strait.conf import strait_settings
from django_strait.database import alias, control_alias, control_elsewhere
from django_strait.dispatch.http import HttpDispatcher
from django_strait.duties import default_duties
from django_strait.models import Execution, Job
from django_strait.rules.outcome import Outcome
from django_strait.rules.states import TERMINAL
from django_strait.services import syncing
from django_strait.services.breaker import CircuitBreaker
from django_strait.storage import Claimed, Record, Recorded, backend
from django_strait.worker import burst
from django_strait.worker.catalog import Catalog
from django_strait.worker.claimer import Claimer
from django_strait.worker.completer import Completer, record_batch
from django_strait.worker.config import Stats, WorkerConfig
from django_strait.worker.duty_runner import DutyRunner
from django_strait.worker.executors import Executors
from django_strait.worker.gate import Gate
from django_strait.worker.heartbeat import Heartbeats
from django_strait.worker.lifecycle import Lifecycle
from django_strait.worker.outcomes import to_record
from django_strait.worker.outside import listen, serve_metrics
from django_strait.worker.process.pool import ProcessPool
from django_strait.worker.producer import Producer
from django_strait.worker.recorder import Recorder
from django_strait.worker.threads import DatabaseThreads
from django_strait.worker.watch import watch_processes
from django_strait.worker.webhooks import ANSWER_READ_BYTES, Deliverer, Sent, announce

__all__ = ["Stats", "Worker", "WorkerConfig"]

logger = logging.getLogger(__name__)


class Worker:
    """One worker process's engine; ``run()`` blocks until it stops."""

    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self.alias = alias(config.using)
        self.storage = backend(self.alias)
        self.stats = Stats()
        self.catalog = Catalog(using=self.alias)
        # Circuits, endpoint health and budgets: one home for the fleet on several databases.
        shared = control_elsewhere(self.alias)
        self.ledger = backend(control_alias()) if shared else None
        self.circuits = CircuitBreaker(self.ledger or self.storage)
        self.gate = Gate(self.storage, self.catalog, self.circuits, ledger=self.ledger)
        self.claimer = Claimer(self.storage, self.gate, self.catalog,
                               worker_id=config.worker_id, queues=config.queues)  # fmt: skip
        self.recorder = Recorder(self.storage, self.catalog, self.circuits, self.stats,
                                 worker_id=config.worker_id, control=shared,
                                 ledger=self.ledger)  # fmt: skip
        self._rng = random.Random()
        self._stop_asked = False
        #: What a burst worker left queued, and why (set when it drained).
        self.left_waiting = ""
        #: The port its metrics and probes are served on, once bound (None: not served).
        self.metrics_port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def run(self) -> Stats:
        """Run until stopped by a signal, by ``stop()`` or (``burst``) when drained."""
        asyncio.run(self._main())
        return self.stats

    def stop(self) -> None:
        """Stop claiming; finish what is in flight (up to the shutdown timeout). Thread-safe."""
        self._stop_asked = True
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.lifecycle.stop)

    # -- the parts --------------------------------------------------------------------

    def _build(self) -> None:
        cfg = self.config
        self._loop = loop = asyncio.get_running_loop()
        self.db = DatabaseThreads(loop, self.storage)
        self._all_done = asyncio.Event()
        self.beats = Heartbeats(cfg.worker_id, self.storage)
        self.http = _http(cfg, cfg.result_max_bytes, cfg.concurrency)
        self.processes = ProcessPool(
            loop, size=cfg.processes or os.cpu_count() or 1, max_runs=cfg.process_max_runs,
            max_result_bytes=cfg.result_max_bytes, settings_module=_settings_module(),
            databases={a: connections[a].settings_dict["NAME"] for a in connections},
        )  # fmt: skip
        self.executors = Executors(
            loop, self.catalog, self.http, self.beats,
            threads=cfg.concurrency, result_max_bytes=cfg.result_max_bytes, finished=self._finished,
            processes=self.processes,
        )  # fmt: skip
        self.producer = Producer(
            self._claim, self.executors.start,
            in_flight=self._occupied, drained=self._drained,
            concurrency=cfg.concurrency, batch_size=cfg.batch_size, burst=cfg.burst,
            poll_interval=cfg.poll_interval, leftover=self._leftover,
        )  # fmt: skip
        self.completer = Completer(
            lambda chunk: self.db.record(self.recorder.write, chunk),
            on_recorded=self._recorded, wake=self.producer.wake.set,
            shutdown_timeout=cfg.shutdown_timeout, max_batch=record_batch(cfg.concurrency),
        )  # fmt: skip
        self.webhook_http = _http(cfg, ANSWER_READ_BYTES, cfg.webhook_concurrency)
        self.deliverer = Deliverer(
            self.storage, self.circuits, self.webhook_http, self.db.webhook,
            worker_id=cfg.worker_id, batch_size=cfg.webhook_concurrency,
            poll_interval=cfg.poll_interval, timeout=cfg.webhook_timeout, on_sent=self._sent,
        )  # fmt: skip
        self.lifecycle = Lifecycle(
            cfg, self.stats, self.beats,
            on_stop=self.producer.stop, in_flight=lambda: list(self.executors.in_flight),
        )  # fmt: skip

    async def _main(self, *, signals: bool = True) -> None:
        cfg = self.config
        self._build()
        if signals:  # else the fleet serving several aliases handles them (worker.fleet)
            self.lifecycle.install_signal_handlers(self._loop)
        if self._stop_asked:
            self.lifecycle.stop()
        stamp = asyncio.create_task(self.lifecycle.keep_loop_stamp())
        # Before the database answers: /livez says alive, /readyz that it waits for it.
        self._metrics, self.metrics_port = serve_metrics(
            cfg, self.lifecycle.probes, in_flight=lambda: len(self.executors.in_flight),
            children=lambda: len(self.processes.pids),
        )  # fmt: skip
        logger.info(
            "worker %s starting: queues=%s concurrency=%s batch_size=%s%s",
            cfg.worker_id, ",".join(cfg.queues) or "*", cfg.concurrency, cfg.batch_size,
            " burst" if cfg.burst else "",
        )  # fmt: skip
        if not await self.lifecycle.wait_for_database(self.db.duty):
            stamp.cancel()
            await self.db.close()
            if self._metrics is not None:
                self._metrics.close()
            logger.info("worker %s stopped before its database answered", cfg.worker_id)
            return
        await self._open()
        tasks = [
            asyncio.create_task(self.completer.run()),
            asyncio.create_task(self.lifecycle.periodic(self.db.record, self.db.duty, self.storage)),
            asyncio.create_task(self.deliverer.run() if cfg.webhooks else asyncio.sleep(0)),
            asyncio.create_task(watch_processes(
                lambda ids: self.db.record(self.storage.let_go, cfg.worker_id, ids),
                lambda: self.executors.process_runs, self.processes,
            )),
        ]  # fmt: skip
        duties = (
            asyncio.create_task(DutyRunner(default_duties(using=self.alias), self.db.duty).run())
            if cfg.duties
            else None
        )
        try:
            await self.producer.run()
        finally:
            if duties is not None:
                duties.cancel()
            await self._shutdown(*tasks)
            stamp.cancel()

    async def _open(self) -> None:
        """Once the database answers: the HTTP pools, the wake-ups, the registration."""
        cfg = self.config
        await self.http.start()
        await self.webhook_http.start()
        work = self.producer.work
        self._listener = listen(cfg, lambda: self._loop.call_soon_threadsafe(work.set))
        await self.db.duty(self.lifecycle.register)
        # Before the duties start: the scheduler fires what the rows say.
        await self.db.duty(syncing.sync_schedules, self.alias)
        self.lifecycle.started()
        if await self.db.duty(_has_process_jobs, self.alias, cfg.queues):
            self.processes.start_warming()

    async def _shutdown(
        self,
        completer: asyncio.Task[None],
        periodic: asyncio.Task[None],
        deliverer: asyncio.Task[None],
        watch: asyncio.Task[None],
    ) -> None:
        in_flight = self.executors.in_flight
        logger.info("worker %s stopping: %s runs in flight", self.config.worker_id, len(in_flight))
        await self._drain()
        watch.cancel()
        await self.processes.close()
        self.completer.close()
        await completer
        periodic.cancel()
        self.deliverer.stop()
        await deliverer
        if self.config.burst and self.config.webhooks:
            await self.deliverer.drain()  # what the drained runs owe, due now
        await self.http.close()
        await self.webhook_http.close()
        if self._listener is not None:
            self._listener.stop()
        if self._metrics is not None:
            self._metrics.close()
        await self.db.duty(self.lifecycle.unregister)
        await self.db.close()
        self.executors.close()
        logger.info("worker %s stopped: %s", self.config.worker_id, self.stats.line())

    async def _drain(self) -> None:
        if not self.executors.in_flight:
            return
        self._all_done.clear()
        try:
            await asyncio.wait_for(self._all_done.wait(), self.config.shutdown_timeout)
        except TimeoutError:
            logger.warning(
                "%s runs still executing after %ss; left to the reaper",
                len(self.executors.in_flight),
                self.config.shutdown_timeout,
            )

    async def _leftover(self) -> float | None:
        """A drained burst worker: nap while limit holds clear; else say what is left, and stop."""
        waiting = await self.db.claim(self.storage.waiting, queues=self.config.queues,
                                      now=timezone.now())  # fmt: skip
        decision = burst.verdict(waiting, timezone.now())
        if decision.wait is None:
            self.left_waiting = decision.describe()
            logger.info("worker %s drained: %s", self.config.worker_id, self.left_waiting)
        else:
            logger.debug("burst: runs held by limits clear soon; claiming in %.2fs", decision.wait)
        return decision.wait

    def _drained(self) -> bool:
        return not self.executors.in_flight and self.completer.idle

    def _occupied(self) -> int:
        """The slots the producer counts as taken: the runs executing, and the ended ones
        whose records wait beyond one record batch.

        Without the second term, a drain whose records lag (a slow disk, a bloated
        table) kept claiming: minutes of records piled up, their runs, no longer
        heartbeaten, were rescued by the reaper and run again, and the claim and the
        record slowed each other down (30 minutes of drain fell to 0.36x). One batch
        of records waiting is the normal pipeline and costs no claims. A claim never
        takes more than the free slots, so executing and unrecorded runs together stay
        within the concurrency plus one record batch: what a kill -9 runs again.
        """
        behind = self.completer.unrecorded - self.completer.max_batch
        return len(self.executors.in_flight) + max(0, behind)

    # -- a run's way through --------------------------------------------------------------

    async def _claim(self, limit: int, isolate: bool) -> list[Claimed]:
        runs = await self.db.claim(self.claimer.claim_and_start, limit, isolate)
        self.stats.claimed += len(runs)
        logger.debug("claimed and started %s runs (asked for %s%s)", len(runs), limit,
                     ", job by job" if isolate else "")  # fmt: skip
        if self._metrics is not None:
            self._metrics.observe_claimed(len(runs))
        return runs

    def _finished(self, run: Claimed, outcome: Outcome, begun: float) -> None:
        info = self.catalog.get(run.job_id)
        rec = to_record(
            run, info, outcome, begun=begun, now=timezone.now(), catalog=self.catalog, rng=self._rng
        )
        self.completer.add(rec)
        self.executors.done(run.id)
        if not self.executors.in_flight:
            self._all_done.set()
        self.producer.wake.set()

    def _recorded(self, chunk: list[Record], done: Recorded) -> None:
        if done.workflows_ended or any(
            done.moved.get(r.run_id) in TERMINAL and self.recorder.may_owe(r) for r in chunk
        ):
            self.deliverer.wake.set()
        if self._metrics is not None:
            self._metrics.observe_recorded(chunk, done, {r.run_id: r.job for r in chunk})
        self.recorder.told(chunk, done)

    def _sent(self, sent: list[Sent]) -> None:
        announce(sent)
        if self._metrics is not None:
            self._metrics.observe_webhooks(sent)


def _http(cfg: WorkerConfig, max_result_bytes: int, limit: int) -> HttpDispatcher:
    return HttpDispatcher(
        max_result_bytes=max_result_bytes,
        user_agent=cfg.user_agent,
        limit=limit,
        allowed_networks=strait_settings.ALLOWED_PRIVATE_NETWORKS,
    )


def _settings_module() -> str:
    # Under override_settings, SETTINGS_MODULE is None: the module is still in the environment.
    return django_settings.SETTINGS_MODULE or os.environ.get("DJANGO_SETTINGS_MODULE", "")


def _has_process_jobs(using: str, queues: tuple[str, ...]) -> bool:
    """Whether an enabled job of the worker's queues runs in processes (the pool then
    starts with the worker)."""
    jobs = Job.objects.using(using).filter(execution=Execution.PROCESS, enabled=True)
    return (jobs.filter(queue__in=queues) if queues else jobs).exists()
