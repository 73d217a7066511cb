"""The worker: claim a batch, execute concurrently, record results in batches.

It composes the parts (docs/architecture.md draws them):

- the **producer** (``worker.producer``) claims runs while slots are free,
  through the **gate** (``worker.gate``) inside the claim's transaction;
- the **executors** (``worker.executors``) run each claimed run: HTTP calls and
  ``async def`` handlers on the event loop, plain functions on threads;
- each ended attempt becomes a record (``worker.outcomes``) that the
  **completer** (``worker.completer``) writes in batches;
- the **duty runner** (``worker.duty_runner``) runs the periodic duties;
- the **deliverer** (``worker.webhooks``) sends the completion webhooks that
  ended runs owe, over an HTTP pool of its own;
- the **lifecycle** (``worker.lifecycle``) waits for the database, handles
  signals, heartbeats and drains.

One asyncio loop drives everything. Database work runs on four dedicated
threads, each with its own connection: one claims, one records (so claiming
and recording overlap), one runs the duties, one delivers webhooks (so a
delivery never waits for, nor delays, a claim).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from django.conf import settings as django_settings
from django.db import connections
from django.utils import timezone

from django_strait import syncing
from django_strait.conf import strait_settings
from django_strait.database import alias
from django_strait.dispatch.http import HttpDispatcher
from django_strait.duties import default_duties
from django_strait.metrics.worker import WorkerMetrics
from django_strait.models import Execution, Job
from django_strait.outcome import Outcome
from django_strait.resilience import health as endpoint_health
from django_strait.resilience.breaker import CircuitBreaker
from django_strait.sql import keep_plans
from django_strait.states import TERMINAL, RunStatus
from django_strait.storage import Claimed, Record, RecordBatch, Recorded, backend
from django_strait.storage.floors import ClaimFloors
from django_strait.storage.values import PresetsOf
from django_strait.transitions import claim_and_start, record
from django_strait.wakeup import Listener
from django_strait.worker import burst
from django_strait.worker.accounting import account_circuits, health_samples
from django_strait.worker.catalog import Catalog
from django_strait.worker.completer import Completer, record_batch
from django_strait.worker.config import Stats, WorkerConfig
from django_strait.worker.duty_runner import DutyRunner
from django_strait.worker.executors import Executors
from django_strait.worker.gate import Gate
from django_strait.worker.heartbeat import Heartbeats
from django_strait.worker.lifecycle import Lifecycle
from django_strait.worker.outcomes import to_record
from django_strait.worker.probes import Answer
from django_strait.worker.process.pool import ProcessPool
from django_strait.worker.producer import Producer
from django_strait.worker.webhooks import ANSWER_READ_BYTES, Deliverer, Sent, announce

__all__ = ["Stats", "Worker", "WorkerConfig"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Seconds between checks that the worker still holds its process runs (cancel, reaper).
PROCESS_WATCH_INTERVAL = 0.5


class Worker:
    """One worker process's engine; ``run()`` blocks until it stops."""

    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self.alias = alias(config.using)
        self.storage = backend(self.alias)
        self.stats = Stats()
        self.catalog = Catalog(using=self.alias)
        self.circuits = CircuitBreaker(self.storage)
        self.gate = Gate(self.storage, self.catalog, self.circuits)
        # Where this worker's claims start (PostgreSQL): see storage.floors.
        self.floors = ClaimFloors(rescan=strait_settings.CLAIM_RESCAN_INTERVAL)
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
        self._claim_db = ThreadPoolExecutor(1, thread_name_prefix="strait-claim")
        self._record_db = ThreadPoolExecutor(1, thread_name_prefix="strait-record")
        self._duty_db = ThreadPoolExecutor(1, thread_name_prefix="strait-duty")
        self._webhook_db = ThreadPoolExecutor(1, thread_name_prefix="strait-webhook")
        self._all_done = asyncio.Event()
        self.beats = Heartbeats(cfg.worker_id, self.storage)
        self.http = HttpDispatcher(
            max_result_bytes=cfg.result_max_bytes,
            user_agent=cfg.user_agent,
            limit=cfg.concurrency,
            allowed_networks=strait_settings.ALLOWED_PRIVATE_NETWORKS,
        )
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
            self._write, on_recorded=self._recorded, wake=self.producer.wake.set,
            shutdown_timeout=cfg.shutdown_timeout, max_batch=record_batch(cfg.concurrency),
        )  # fmt: skip
        self.webhook_http = HttpDispatcher(
            max_result_bytes=ANSWER_READ_BYTES,
            user_agent=cfg.user_agent,
            limit=cfg.webhook_concurrency,
            allowed_networks=strait_settings.ALLOWED_PRIVATE_NETWORKS,
        )
        self.deliverer = Deliverer(
            self.storage, self.circuits, self.webhook_http,
            lambda fn, *args: self._call(self._webhook_db, fn, *args),
            worker_id=cfg.worker_id, batch_size=cfg.webhook_concurrency,
            poll_interval=cfg.poll_interval, timeout=cfg.webhook_timeout, on_sent=self._sent,
        )  # fmt: skip
        self.lifecycle = Lifecycle(
            cfg, self.stats, self.beats,
            on_stop=self.producer.stop, in_flight=lambda: list(self.executors.in_flight),
        )  # fmt: skip

    async def _main(self) -> None:
        cfg = self.config
        self._build()
        self.lifecycle.install_signal_handlers(self._loop)
        if self._stop_asked:
            self.lifecycle.stop()
        stamp = asyncio.create_task(self.lifecycle.keep_loop_stamp())
        # Before the database answers: /livez says alive, /readyz that it waits for it.
        self._metrics = self._serve_metrics()
        logger.info(
            "worker %s starting: queues=%s concurrency=%s batch_size=%s%s",
            cfg.worker_id, ",".join(cfg.queues) or "*", cfg.concurrency, cfg.batch_size,
            " burst" if cfg.burst else "",
        )  # fmt: skip
        if not await self.lifecycle.wait_for_database(self._duty):
            stamp.cancel()
            await self._close_pools()
            if self._metrics is not None:
                self._metrics.close()
            logger.info("worker %s stopped before its database answered", cfg.worker_id)
            return
        await self.http.start()
        await self.webhook_http.start()
        self._listener = self._start_listener()
        await self._duty(self.lifecycle.register)
        # Before the duties start: the scheduler fires what the rows say.
        await self._duty(syncing.sync_schedules)
        self.lifecycle.started()
        if await self._duty(_has_process_jobs, self.alias, cfg.queues):
            self.processes.start_warming()
        tasks = [
            asyncio.create_task(self.completer.run()),
            asyncio.create_task(self.lifecycle.periodic(self._record, self._duty, self.storage)),
            asyncio.create_task(self.deliverer.run() if cfg.webhooks else asyncio.sleep(0)),
            asyncio.create_task(self._watch_processes()),
        ]
        duties = (
            asyncio.create_task(DutyRunner(default_duties(using=self.alias), self._duty).run())
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
        await self._duty(self.lifecycle.unregister)
        await self._close_pools()
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

    async def _close_pools(self) -> None:
        for pool in (self._claim_db, self._record_db, self._duty_db, self._webhook_db):
            await self._call(pool, connections.close_all)
            pool.shutdown(wait=True)

    async def _leftover(self) -> float | None:
        """A drained burst worker: nap while limit holds clear; else say what is left, and stop."""
        waiting = await self._call(
            self._claim_db, self.storage.waiting, queues=self.config.queues, now=timezone.now()
        )
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

    # -- database threads ---------------------------------------------------------------

    async def _call(
        self, pool: ThreadPoolExecutor, fn: Callable[..., T], *args: Any, **kw: Any
    ) -> T:
        return await self._loop.run_in_executor(pool, _guarded, self.alias, fn, args, kw)

    async def _hot(
        self, pool: ThreadPoolExecutor, fn: Callable[..., T], *args: Any, **kw: Any
    ) -> T:
        """Call on the claim or record thread, whose connection prepares the hot statements."""
        return await self._loop.run_in_executor(pool, _hot, self.alias, fn, args, kw)

    async def _duty(self, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        return await self._call(self._duty_db, fn, *args, **kw)

    async def _record(self, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        return await self._hot(self._record_db, fn, *args, **kw)

    # -- claiming -----------------------------------------------------------------------

    async def _claim(self, limit: int, isolate: bool) -> list[Claimed]:
        runs = await self._hot(self._claim_db, self._claim_and_start, limit, isolate)
        self.stats.claimed += len(runs)
        logger.debug("claimed and started %s runs (asked for %s%s)", len(runs), limit,
                     ", job by job" if isolate else "")  # fmt: skip
        if self._metrics is not None:
            self._metrics.observe_claimed(len(runs))
        return runs

    def _claim_and_start(self, limit: int, isolate: bool = False) -> list[Claimed]:
        runs = self._claim_and_start_runs(limit, isolate)
        self._choose_presets(runs)
        return runs

    def _choose_presets(self, runs: list[Claimed]) -> None:
        """Give each process run the preset its attempt runs at (docs/process-execution.md).

        Read after the claim, and only when the batch has process runs: the run's
        own preset (after an OOM), else its job's, raised to the job's recommendation.
        """
        process = [r for r in runs if self._is_process(r.job_id)]
        if not process:
            return
        try:
            found = self.storage.presets_of(
                [r.id for r in process], {r.job_id for r in process}, now=timezone.now()
            )
        except Exception:
            # The runs are started: they must run. At their jobs' own presets, then.
            logger.exception("reading the presets of runs %s failed", [r.id for r in process])
            found = PresetsOf()
        chain = strait_settings.PRESETS
        for run in process:
            job = self.catalog.get(run.job_id).row
            run.preset = chain.start(
                job.preset, found.runs.get(run.id, ""), found.recommended.get(run.job_id)
            )

    def _is_process(self, job_id: int) -> bool:
        try:
            info = self.catalog.get(job_id)
        except KeyError:
            return False
        return info.row.execution == Execution.PROCESS and info.handler is not None

    def _claim_and_start_runs(self, limit: int, isolate: bool) -> list[Claimed]:
        cfg = self.config
        return claim_and_start(
            cfg.worker_id,
            queues=cfg.queues,
            limit=limit,
            gate=self.gate,
            isolate=isolate,
            job_names=lambda job_id: self.catalog.get(job_id).name,
            storage=self.storage,
            floors=self.floors,
        )

    # -- an attempt ended ---------------------------------------------------------------

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

    async def _write(self, chunk: list[Record]) -> Recorded:
        return await self._record(self._record_and_account, chunk)

    def _record_and_account(self, chunk: list[Record]) -> Recorded:
        """Record a batch (which sends its signals), then count its HTTP answers against circuits."""
        batch = RecordBatch(self.config.worker_id, chunk, self._health_samples(chunk))
        done = record(batch, storage=self.storage)
        logger.debug("recorded %s results in one batch: %s moved, %s lost",
                     len(chunk), len(done.moved), len(done.lost))  # fmt: skip
        self._account_circuits(chunk)
        return done

    def _health_samples(self, chunk: list[Record]) -> list[endpoint_health.Sample]:
        return health_samples(chunk, self.catalog)

    def _account_circuits(self, chunk: list[Record]) -> None:
        account_circuits(self.circuits, chunk)

    def _recorded(self, chunk: list[Record], done: Recorded) -> None:
        if done.workflows_ended or any(
            done.moved.get(r.run_id) in TERMINAL and self._may_owe(r) for r in chunk
        ):
            self.deliverer.wake.set()
        if self._metrics is not None:
            self._metrics.observe_recorded(chunk, done, {r.run_id: r.job for r in chunk})
        if logger.isEnabledFor(logging.INFO):
            for rec in chunk:
                _log_attempt(rec, done.moved.get(rec.run_id))
        for status in done.moved.values():
            self.stats.count(status)
        self.stats.lost += len(done.lost)
        say_unmoved(done)

    def _may_owe(self, rec: Record) -> bool:
        """Whether an ended run may owe its job's webhook (its workflow's: ``workflows_ended``)."""
        try:
            return bool(self.catalog.get(rec.job_id).row.webhook_url)
        except KeyError:
            return True  # not loaded here: a wasted round costs one query, a raise re-records

    def _sent(self, sent: list[Sent]) -> None:
        announce(sent)
        if self._metrics is not None:
            self._metrics.observe_webhooks(sent)

    # -- process runs -------------------------------------------------------------------

    async def _watch_processes(self) -> None:
        """Kill the child of every process run this worker no longer holds, or that was canceled.

        Every ``PROCESS_WATCH_INTERVAL`` while process runs are in flight: one
        indexed read by primary key. A canceled run's child dies within about that.
        """
        while True:
            await asyncio.sleep(PROCESS_WATCH_INTERVAL)
            ids = list(self.executors.process_runs)
            if not ids:
                continue
            try:
                gone = await self._record(self.storage.let_go, self.config.worker_id, ids)
            except Exception:
                logger.exception("checking the process runs' status failed")
                continue
            for run_id in gone:
                if run_id in self.executors.process_runs:
                    logger.info(
                        "run %s was canceled or is no longer this worker's: stopping its child",
                        run_id, extra={"run_id": run_id},
                    )  # fmt: skip
                    self.processes.stop_run(
                        run_id, "the run was canceled or taken from this worker"
                    )

    # -- wake-ups and metrics -----------------------------------------------------------

    def _serve_metrics(self) -> WorkerMetrics | None:
        cfg = self.config
        if cfg.metrics_port is None:
            return None
        metrics = WorkerMetrics()
        metrics.watch_in_flight(lambda: len(self.executors.in_flight))
        metrics.watch_processes(lambda: len(self.processes.pids))
        metrics.watch_workflows()
        probes = self.lifecycle.probes
        self.metrics_port = metrics.serve(
            cfg.metrics_port,
            cfg.metrics_bind,
            probes={
                "/livez": lambda: _answered(probes.live(time.monotonic())),
                "/readyz": lambda: _answered(probes.ready(time.monotonic())),
            },
        )
        return metrics

    def _start_listener(self) -> Listener | None:
        listen = self.config.listen_alias
        if listen is None or not backend(listen).can_listen:
            logger.info("polling for new runs every %ss", self.config.poll_interval)
            return None
        work = self.producer.work
        listener = Listener(
            listen, self.config.queues, lambda: self._loop.call_soon_threadsafe(work.set)
        )
        listener.start()
        return listener


#: Where an attempt that did not complete left its run, and how loudly to say so.
_LOG_LEVEL_FOR_STATUS = {
    RunStatus.QUEUED: logging.INFO,
    RunStatus.CANCELED: logging.INFO,
    RunStatus.DISCARDED: logging.WARNING,
    RunStatus.DEAD_LETTER: logging.WARNING,
    RunStatus.FAILED: logging.WARNING,
}


def _log_attempt(rec: Record, status: str | None) -> None:
    level = _LOG_LEVEL_FOR_STATUS.get(status or "")
    if level is None or not logger.isEnabledFor(level):
        return
    logger.log(
        level,
        "run %s (%s) attempt %s: %s %s -> %s%s",
        rec.run_id,
        rec.job,
        rec.attempt,
        rec.error_type or rec.outcome,
        first_line(rec.error),
        status,
        f" until {rec.available_at:%Y-%m-%d %H:%M:%S}Z"
        if status == RunStatus.QUEUED and rec.available_at
        else "",
        extra={
            "run_id": rec.run_id,
            "job": rec.job,
            "attempt": rec.attempt,
            "error_type": rec.error_type,
        },
    )


#: The longest error a worker's log line shows; the attempt keeps the whole of it.
LOG_ERROR_CHARS = 200


def first_line(error: str, limit: int = LOG_ERROR_CHARS) -> str:
    """Return an attempt's error as a log line shows it: its first line, cut with "…".

    A task's error is its ``path: message`` line, then its traceback: the traceback
    stays in the attempt (the admin, the API), never half of it in the log.
    """
    line = error.split("\n", 1)[0]
    return line if len(line) <= limit else line[: limit - 1] + "…"


def say_unmoved(done: Recorded) -> None:
    """Log the runs a record did not move: lost to this worker, or recorded by an earlier try."""
    if done.lost:
        logger.warning(
            "results of runs %s not recorded: no longer executing under this worker "
            "(canceled, replayed or reaped meanwhile)",
            done.lost,
        )
    if done.already:
        logger.info(
            "results of runs %s already recorded: an earlier try's commit had landed "
            "before its connection was lost",
            done.already,
        )


def _answered(answer: Answer) -> tuple[int, str]:
    return answer.status, answer.why


def _settings_module() -> str:
    # Under override_settings, SETTINGS_MODULE is None: the module is still in the environment.
    return django_settings.SETTINGS_MODULE or os.environ.get("DJANGO_SETTINGS_MODULE", "")


def _has_process_jobs(using: str, queues: tuple[str, ...]) -> bool:
    """Whether an enabled job of the worker's queues runs in processes (the pool then
    starts with the worker)."""
    jobs = Job.objects.using(using).filter(execution=Execution.PROCESS, enabled=True)
    return (jobs.filter(queue__in=queues) if queues else jobs).exists()


def _hot(using: str, fn: Callable[..., T], args: tuple, kwargs: dict) -> T:
    """:func:`_guarded`, on a connection let prepare the worker's hot statements."""

    def call(*args: Any, **kwargs: Any) -> T:
        if strait_settings.PREPARE_STATEMENTS and connections[using].vendor == "postgresql":
            keep_plans(connections[using], time.monotonic(), strait_settings.PLAN_LIFETIME)
        return fn(*args, **kwargs)

    return _guarded(using, call, args, kwargs)


def _guarded(using: str, fn: Callable[..., T], args: tuple, kwargs: dict) -> T:
    """Call ``fn`` on a database thread, dropping a broken connection so the next call reconnects."""
    try:
        return fn(*args, **kwargs)
    except Exception:
        connections[using].close_if_unusable_or_obsolete()
        raise
