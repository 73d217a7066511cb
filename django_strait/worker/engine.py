"""The worker loop: claim a batch, execute concurrently, record results in batches.

One asyncio loop drives everything. Database work runs on two dedicated
threads, each with its own connection: one claims (and starts) batches, the
other records finished attempts, so claiming and recording overlap. Sync
handlers run on a thread pool of ``concurrency`` threads; HTTP dispatches and
``async def`` handlers run on the loop itself.

Nothing a live worker holds is left behind: an executor that raises, a decision
that fails, or a record that the database refuses all end as a recorded attempt
with a retry decision, and claimed runs that could not start are put back.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import random
import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, TypeVar

from django.db import DatabaseError, connections
from django.utils import timezone

from django_strait import signals
from django_strait.conf import strait_settings
from django_strait.database import alias
from django_strait.dispatch import failover
from django_strait.dispatch.http import HttpDispatcher, HttpRequest
from django_strait.dispatch.python import RunContext, is_async, run_python, settle
from django_strait.duties import default_duties, registry
from django_strait.metrics.worker import WorkerMetrics
from django_strait.models import AttemptOutcome
from django_strait.outcome import Outcome, failure
from django_strait.registry import UNKNOWN_HANDLER
from django_strait.resilience import budgets, limits
from django_strait.resilience import health as endpoint_health
from django_strait.resilience.breaker import Attempted, Candidate, CircuitBreaker
from django_strait.states import Transition
from django_strait.transitions import batch
from django_strait.transitions.batch import Claimed, Hold, Record
from django_strait.wakeup import Listener
from django_strait.worker.catalog import Catalog, JobInfo
from django_strait.worker.decide import Decision, decide, trim
from django_strait.worker.heartbeat import Heartbeats
from django_strait.worker.sync_runner import Done, SyncRunner

logger = logging.getLogger(__name__)

ZERO = Decimal(0)

T = TypeVar("T")

#: Most records written in one statement.
RECORD_BATCH_MAX = 500
#: Retry decision used when deciding itself failed (a bug, not the run's fault).
FALLBACK_RETRY_SECONDS = 60.0
#: Seconds between tries while the database does not answer at start-up: doubling, capped.
DATABASE_RETRY_FIRST = 0.5
DATABASE_RETRY_MAX = 30.0
#: The error type of an attempt whose run's own row cannot be read: it fails, unrun.
INVALID_RUN_ERROR = "run.invalid"
#: The error type of a run held because its job's row is not a valid definition.
INVALID_JOB_ERROR = "job.invalid"
#: How long such a run waits before it is looked at again (a fixed row frees it then).
INVALID_JOB_WAIT = dt.timedelta(seconds=30)


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """How one worker process runs (``run_strait_worker`` options and settings)."""

    worker_id: str
    queues: tuple[str, ...] = ()
    concurrency: int = 50
    batch_size: int = 100
    burst: bool = False
    poll_interval: float = 1.0
    shutdown_timeout: float = 30.0
    heartbeat_interval: float = 30.0
    stats_interval: float = 60.0
    #: DATABASES alias to LISTEN on for wake-ups (PostgreSQL only); None: poll only.
    listen_alias: str | None = None
    #: Run the periodic duties (reaper, scheduler, pruner) in this process.
    duties: bool = True
    #: Serve this worker's Prometheus metrics on 127.0.0.1:<port> (None: off).
    metrics_port: int | None = None
    result_max_bytes: int = 65536
    user_agent: str = "django-strait"
    using: str | None = None


@dataclass(slots=True)
class Stats:
    """Counts since the worker started."""

    claimed: int = 0
    succeeded: int = 0
    retried: int = 0
    dead_lettered: int = 0
    discarded: int = 0
    failed: int = 0
    canceled: int = 0
    lost: int = 0
    started_at: float = field(default_factory=time.monotonic)

    def count(self, status: str) -> None:
        name = _STAT_FOR_STATUS.get(status)
        if name:
            setattr(self, name, getattr(self, name) + 1)

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.started_at, 1e-9)
        finished = self.succeeded + self.retried + self.dead_lettered + self.discarded + self.failed
        return (
            f"claimed={self.claimed} succeeded={self.succeeded} retried={self.retried} "
            f"dead_lettered={self.dead_lettered} discarded={self.discarded} failed={self.failed} "
            f"canceled={self.canceled} lost={self.lost} runs_per_s={finished / elapsed:.1f}"
        )


_STAT_FOR_STATUS = {
    "completed": "succeeded",
    "queued": "retried",
    "dead_letter": "dead_lettered",
    "discarded": "discarded",
    "failed": "failed",
    "canceled": "canceled",
}


class Worker:
    """One worker process's engine; ``run()`` blocks until it stops."""

    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self.stats = Stats()
        self.catalog = Catalog(using=config.using)
        self.circuits = CircuitBreaker(using=config.using)
        self._rng = random.Random()
        #: Runs executing: their task, or None for plain-function handlers on the SyncRunner.
        self._inflight: dict[int, asyncio.Task[None] | None] = {}
        self._pending: list[Record] = []
        self._stopping = False
        self._closing = False
        self._signals = 0
        self._recording = False
        self._singles = 0  # records left to write one at a time after a batch was refused
        #: The last claim failed: claim the next batch job by job (``batch.claim_and_start``).
        self._isolate = False
        #: A claim failed job by job too (the database is down, say): wait before the next.
        self._isolated_claim_failed = False

    # -- lifecycle -------------------------------------------------------------

    def run(self) -> Stats:
        """Run until stopped by a signal, by ``stop()`` or (``burst``) when drained."""
        asyncio.run(self._main())
        return self.stats

    def stop(self) -> None:
        """Stop claiming; finish what is in flight (up to the shutdown timeout).

        Safe to call from any thread.
        """
        loop = getattr(self, "_loop", None)
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._stop_now)
        else:
            self._stopping = True

    def _stop_now(self) -> None:
        self._stopping = True
        self._wake.set()
        self._work.set()

    async def _main(self) -> None:
        cfg = self.config
        self._loop = asyncio.get_running_loop()
        #: A slot freed or a result was recorded.
        self._wake = asyncio.Event()
        #: New runs may be due: a NOTIFY arrived (or the worker is stopping).
        self._work = asyncio.Event()
        self._results = asyncio.Event()
        self._claim_db = ThreadPoolExecutor(1, thread_name_prefix="strait-claim")
        self._record_db = ThreadPoolExecutor(1, thread_name_prefix="strait-record")
        self._all_done = asyncio.Event()
        self._beats = Heartbeats(cfg.worker_id, cfg.using)
        self._sync = SyncRunner(
            self._loop,
            self._sync_done,
            threads=cfg.concurrency,
            max_result_bytes=cfg.result_max_bytes,
        )
        self._install_signal_handlers()
        logger.info(
            "worker %s starting: queues=%s concurrency=%s batch_size=%s%s",
            cfg.worker_id,
            ",".join(cfg.queues) or "*",
            cfg.concurrency,
            cfg.batch_size,
            " burst" if cfg.burst else "",
        )
        self._http = HttpDispatcher(
            max_result_bytes=cfg.result_max_bytes,
            user_agent=cfg.user_agent,
            limit=cfg.concurrency,
            allowed_networks=strait_settings.ALLOWED_PRIVATE_NETWORKS,
        )
        self._duty_db = ThreadPoolExecutor(1, thread_name_prefix="strait-duty")
        if not await self._wait_for_database():
            await self._close_pools()
            logger.info("worker %s stopped before its database answered", cfg.worker_id)
            return
        await self._http.start()
        self._metrics = self._serve_metrics()
        self._listener = self._start_listener()
        await self._db(self._duty_db, self._register)
        recorder = asyncio.create_task(self._record_loop())
        beats = asyncio.create_task(self._periodic())
        duties = asyncio.create_task(self._run_duties()) if cfg.duties else None
        try:
            await self._claim_loop()
        finally:
            if duties is not None:
                duties.cancel()
            await self._shutdown(recorder, beats)

    async def _shutdown(self, recorder: asyncio.Task[None], beats: asyncio.Task[None]) -> None:
        logger.info(
            "worker %s stopping: %s runs in flight", self.config.worker_id, len(self._inflight)
        )
        await self._drain_inflight()
        self._closing = True
        self._results.set()
        await recorder
        beats.cancel()
        await self._http.close()
        if self._listener is not None:
            self._listener.stop()
        if self._metrics is not None:
            self._metrics.close()
        await self._db(self._duty_db, self._unregister)
        await self._close_pools()
        self._sync.close()
        logger.info("worker %s stopped: %s", self.config.worker_id, self.stats.line())

    async def _close_pools(self) -> None:
        for pool in (self._claim_db, self._record_db, self._duty_db):
            await self._db(pool, connections.close_all)
            pool.shutdown(wait=True)

    async def _wait_for_database(self) -> bool:
        """Wait until the database answers, trying again with a capped backoff; False if stopped.

        Workers restart in any order in production: one started before its
        database waits for it, saying so once per try, instead of exiting.
        """
        alias = self.config.using
        delay = DATABASE_RETRY_FIRST
        while not self._stopping:
            try:
                await self._db(self._duty_db, _ping, alias)
                return True
            except Exception as exc:
                logger.warning(
                    "database %r is not answering (%s); trying again in %.1fs",
                    alias,
                    _one_line(exc),
                    delay,
                )
            await _wait_event(self._work, delay)  # a stop sets it
            delay = min(delay * 2, DATABASE_RETRY_MAX)
        return False

    def _install_signal_handlers(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._loop.add_signal_handler(sig, self._on_signal, sig)
            except (NotImplementedError, RuntimeError, ValueError):
                return  # not the main thread (tests drive the worker in a thread)

    def _on_signal(self, sig: signal.Signals) -> None:
        self._signals += 1
        if self._signals > 1:
            logger.warning(
                "second %s: exiting now; runs in flight are left to the reaper", sig.name
            )
            raise SystemExit(1)
        logger.info("%s received: no more claims, finishing runs in flight", sig.name)
        self._stop_now()

    async def _drain_inflight(self) -> None:
        if not self._inflight:
            return
        self._all_done.clear()
        try:
            await asyncio.wait_for(self._all_done.wait(), self.config.shutdown_timeout)
        except TimeoutError:
            logger.warning(
                "%s runs still executing after %ss; left to the reaper",
                len(self._inflight),
                self.config.shutdown_timeout,
            )

    # -- wake-ups, registration, duties ----------------------------------------------

    def _serve_metrics(self) -> WorkerMetrics | None:
        if self.config.metrics_port is None:
            return None
        metrics = WorkerMetrics()
        metrics.watch_in_flight(lambda: len(self._inflight))
        metrics.serve(self.config.metrics_port)
        return metrics

    def _start_listener(self) -> Listener | None:
        alias = self.config.listen_alias
        if alias is None or not Listener.available(alias):
            return None
        listener = Listener(
            alias, self.config.queues, lambda: self._loop.call_soon_threadsafe(self._work.set)
        )
        listener.start()
        return listener

    def _register(self) -> None:
        cfg = self.config
        registry.register(
            cfg.worker_id, queues=list(cfg.queues), concurrency=cfg.concurrency, using=cfg.using
        )

    def _unregister(self) -> None:
        registry.unregister(self.config.worker_id, using=self.config.using)

    def _touch(self, in_flight: int) -> None:
        cfg = self.config
        if not registry.touch(cfg.worker_id, in_flight=in_flight, using=cfg.using):
            # The reaper forgot us (we were silent a long time): say who we are again.
            self._register()

    async def _run_duties(self) -> None:
        """Run each periodic duty every its interval, on the duty thread."""
        duties = default_duties(using=self.config.using)
        due = dict.fromkeys((d.name for d in duties), 0.0)
        while duties:
            for duty in duties:
                if time.monotonic() < due[duty.name]:
                    continue
                try:
                    result = await self._db(self._duty_db, duty.run_once, timezone.now())
                    if result.led and any(result.counts.values()):
                        logger.info("%s: %s", duty.name, result.counts)
                except Exception:
                    logger.exception("duty %s failed; trying again next round", duty.name)
                due[duty.name] = time.monotonic() + duty.interval
            await asyncio.sleep(max(0.05, min(due.values()) - time.monotonic()))

    # -- database thread helper -----------------------------------------------------

    async def _db(self, pool: ThreadPoolExecutor, fn: Callable[..., T], *args: Any) -> T:
        return await self._loop.run_in_executor(pool, _guarded, self.config.using, fn, *args)

    # -- claiming -----------------------------------------------------------------

    async def _claim_loop(self) -> None:
        cfg = self.config
        low_water = max(1, min(cfg.batch_size, cfg.concurrency) // 2)
        while not self._stopping:
            # Clear before looking, never inside the wait: a run finishing, a result
            # recorded or a NOTIFY while the claim below is awaited must still wake
            # the wait (lost, a --burst worker would wait forever).
            self._wake.clear()
            self._work.clear()
            free = cfg.concurrency - len(self._inflight)
            if free < low_water and self._inflight:
                await self._wait(None)
                continue
            want = min(free, cfg.batch_size)
            runs = await self._claim(want)
            if runs is None:  # the claim failed: not a sign that the queue is empty
                if not self._isolated_claim_failed:
                    continue  # claim again at once, job by job
                await asyncio.sleep(cfg.poll_interval)
                continue
            for run in runs:
                self._spawn(run)
            if len(runs) < want:  # nothing more due right now
                if cfg.burst:
                    if not runs and self._drained():
                        return
                    await self._wait(None)  # until something in flight ends
                else:
                    await self._wait_for_work()

    def _drained(self) -> bool:
        return not self._inflight and not self._pending and not self._recording

    async def _wait(self, timeout: float | None) -> None:
        """Sleep until a slot frees, the worker stops, or ``timeout`` passes."""
        await _wait_event(self._wake, timeout)

    async def _wait_for_work(self) -> None:
        """Sleep until a NOTIFY says runs were queued, or the poll interval passes.

        Runs finishing do not wake this wait: the queue was just found empty, and
        claiming again for every finished run would only cost empty claims.
        """
        await _wait_event(self._work, self.config.poll_interval)

    async def _claim(self, limit: int) -> list[Claimed] | None:
        isolate = self._isolate
        try:
            runs = await self._db(self._claim_db, self._claim_and_start, limit, isolate)
        except Exception:
            if isolate:
                logger.exception("claim failed; retrying in %ss", self.config.poll_interval)
            else:
                # Perhaps one job's row or runs: claim again at once, job by job.
                logger.exception("claim failed; claiming again job by job")
            self._isolated_claim_failed = isolate
            self._isolate = True
            return None
        self._isolate = self._isolated_claim_failed = False
        self.stats.claimed += len(runs)
        if self._metrics is not None:
            self._metrics.observe_claimed(len(runs))
        return runs

    def _claim_and_start(self, limit: int, isolate: bool = False) -> list[Claimed]:
        cfg = self.config
        started = batch.claim_and_start(
            cfg.worker_id,
            queues=cfg.queues,
            limit=limit,
            gate=self._gate,
            isolate=isolate,
            using=cfg.using,
        )
        if signals.listened(signals.run_started):
            names = {r.id: self.catalog.get(r.job_id).name for r in started}
            signals.send_started(started, names, using=cfg.using)
        return started

    def _gate(self, claimed: list[Claimed]) -> list[Hold]:
        """Load the claimed runs' jobs; return the runs their limits, circuits or budgets hold back.

        Runs inside the claim transaction, on the claim thread. Limits come
        first: a run they hold does not reach its circuit, so it cannot take a
        half-open probe it would not send; budgets come last, so only runs that
        will start reserve. Python jobs are never held by circuits or health.
        """
        self.catalog.ensure({r.job_id for r in claimed})
        holds: list[Hold] = []
        steps = (self._invalid_holds, self._limit_holds, self._circuit_holds, self._budget_holds)
        for step in steps:
            more = step(claimed)
            if more:
                held = {h.run_id for h in more}
                claimed = [run for run in claimed if run.id not in held]
                holds += more
        return holds

    def _invalid_holds(self, claimed: list[Claimed]) -> list[Hold]:
        """Return the runs of jobs whose row is not a valid definition: held until it is fixed."""
        until = timezone.now() + INVALID_JOB_WAIT
        held = []
        for run in claimed:
            info = self.catalog.get(run.job_id)
            if info.invalid:
                reason = f"job {info.name} is not a valid definition: {info.describe_problems()}"
                held.append(Hold(run.id, until, INVALID_JOB_ERROR, trim(reason), attempt_row=False))
        return held

    def _limit_holds(self, claimed: list[Claimed]) -> list[Hold]:
        """Return the runs their job's concurrency or rate limit holds back (no attempt row)."""
        limited = [
            (run, row)
            for run in claimed
            if limits.is_limited(row := self.catalog.get(run.job_id).row)
        ]
        if not limited:
            return []  # the fast path: no limited job in the batch, no statement
        self.circuits.refresh()  # health scores of degraded endpoints, at most a second old
        pending = [
            limits.Pending(run.id, run.job_id, self.circuits.health_score(row.endpoint_url))
            for run, row in limited
        ]
        return [
            Hold(h.run_id, h.until, h.error_type, h.reason, attempt_row=False)
            for h in limits.enforce(pending, using=self.config.using)
        ]

    def _circuit_holds(self, claimed: list[Claimed]) -> list[Hold]:
        """Pick each HTTP run's endpoint; return the runs that no endpoint's circuit or health admits."""
        candidates = []
        for run in claimed:
            info = self.catalog.get(run.job_id)
            if info.endpoints:
                ordered = failover.order(
                    info.endpoints, last_used=run.endpoint_used, attempts_spent=run.budget_used
                )
                candidates.append(Candidate(run.id, ordered, info.row.timeout_secs))
        if not candidates:
            return []
        cooldown = dt.timedelta(seconds=strait_settings.CIRCUIT_COOLDOWN)
        now = timezone.now()
        gated = self.circuits.gate(candidates, now=now, cooldown=cooldown)
        for run in claimed:
            run.endpoint = gated.chosen.get(run.id, "")
        firsts = {c.run_id: c.endpoints[0] for c in candidates}
        return [
            Hold(rid, admission.until or now, admission.error_type, admission.reason, firsts[rid])
            for rid, admission in gated.held.items()
        ]

    def _budget_holds(self, claimed: list[Claimed]) -> list[Hold]:
        """Reserve the cost of runs whose job has a project; return those that do not fit."""
        pending = []
        for run in claimed:
            row = self.catalog.get(run.job_id).row
            if row.project_id is not None and row.estimated_cost is not None:
                pending.append(budgets.Pending(run.id, row.project_id, row.estimated_cost))
        if not pending:
            return []  # the fast path: no budgeted job in the batch, no statement
        reserved, held = budgets.reserve(pending, now=timezone.now(), using=self.config.using)
        for run in claimed:
            run.reserved_cost = reserved.get(run.id)
        return [Hold(h.run_id, h.until, budgets.BUDGET_ERROR, h.reason) for h in held]

    # -- executing -----------------------------------------------------------------

    def _spawn(self, run: Claimed) -> None:
        info = self.catalog.get(run.job_id)
        handler = info.handler
        if handler is not None and not is_async(handler) and not run.row_error:
            self._inflight[run.id] = None
            context = self._context(run, info)
            self._sync.submit((run, time.monotonic()), handler, run.payload, context)
        else:
            self._inflight[run.id] = self._loop.create_task(self._execute(run))

    def _sync_done(self, done: list[Done]) -> None:
        for (run, begun), result in done:
            if isinstance(result, Outcome):
                self._finish(run, self.catalog.get(run.job_id), result, begun)
            else:  # the plain function returned an awaitable: finish it on the loop
                self._inflight[run.id] = self._loop.create_task(self._settle(run, result, begun))

    async def _settle(self, run: Claimed, awaitable: Any, begun: float) -> None:
        outcome = await settle(awaitable, max_result_bytes=self.config.result_max_bytes)
        self._finish(run, self.catalog.get(run.job_id), outcome, begun)

    async def _execute(self, run: Claimed) -> None:
        begun = time.monotonic()
        info: JobInfo | None = None
        try:
            info = self.catalog.get(run.job_id)
            outcome = await self._dispatch(info, run)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # executors should not raise; if one does, it is a failed attempt
            logger.exception(
                "executing run %s failed inside the worker", run.id, extra=_extra(run, info)
            )
            outcome = failure("worker.internal", f"{type(exc).__name__}: {exc}")
        self._finish(run, info, outcome, begun)

    async def _dispatch(self, info: JobInfo, run: Claimed) -> Outcome:
        row = info.row
        if run.row_error:
            return failure(INVALID_RUN_ERROR, run.row_error, retryable=False)
        if row.endpoint_url:
            return await self._http.dispatch(
                HttpRequest(
                    run_id=run.id,
                    job=row.name,
                    attempt=run.attempt,
                    payload=run.payload,
                    url=run.endpoint or row.endpoint_url,
                    method=row.http_method,
                    headers=row.headers or {},
                    signing_secret=row.signing_secret,
                    timeout=row.timeout_secs,
                )
            )
        if info.handler is None:
            return failure(UNKNOWN_HANDLER, f"handler {info.handler_error}", retryable=False)
        try:
            # Only coroutines can be interrupted: plain functions run to their end.
            return await asyncio.wait_for(
                run_python(
                    info.handler,
                    run.payload,
                    self._context(run, info),
                    executor=None,
                    max_result_bytes=self.config.result_max_bytes,
                ),
                row.timeout_secs,
            )
        except TimeoutError:
            return failure(
                "python.timeout",
                f"the handler ran past the job's timeout of {row.timeout_secs:g}s and was cancelled",
                attempt_outcome="timed_out",
            )

    def _context(self, run: Claimed, info: JobInfo) -> RunContext:
        return RunContext(
            run_id=run.id,
            attempt=run.attempt,
            job=info.name,
            payload=run.payload,
            heartbeat=self._beats.for_run(run.id),
        )

    def _finish(self, run: Claimed, info: JobInfo | None, outcome: Outcome, begun: float) -> None:
        now = timezone.now()
        decision = self._decide(run, info, outcome, now)
        self._pending.append(
            Record(
                run_id=run.id,
                attempt=run.attempt,
                transition=decision.transition,
                started_at=run.started_at or now,
                finished_at=now,
                duration_ms=outcome.duration_ms or int((time.monotonic() - begun) * 1000),
                outcome=outcome.attempt_outcome,
                available_at=decision.available_at,
                result=outcome.result if outcome.succeeded else None,
                error=trim(outcome.error),
                error_type=outcome.error_type,
                endpoint=outcome.endpoint,
                status_code=outcome.status_code,
                response_excerpt=trim(outcome.response_excerpt, 1000),
                job=info.name if info is not None else "",
                job_id=run.job_id,
                project_id=info.row.project_id if info is not None else None,
                reserved_cost=run.reserved_cost,
                cost=_cost(run, info, outcome),
            )
        )
        del self._inflight[run.id]
        self._beats.forget(run.id)
        if not self._inflight:
            self._all_done.set()
        self._results.set()
        self._wake.set()

    def _decide(
        self, run: Claimed, info: JobInfo | None, outcome: Outcome, now: dt.datetime
    ) -> Decision:
        try:
            assert info is not None, "job not loaded"
            policy = self.catalog.policy(info, run.max_attempts, run.retry_overrides)
            return decide(
                outcome,
                budget_used=run.budget_used,
                policy=policy,
                now=now,
                rng=self._rng,
                endpoints=info.endpoints,
            )
        except Exception:
            logger.exception(
                "deciding run %s failed; retrying it later", run.id, extra=_extra(run, info)
            )
            later = now + dt.timedelta(seconds=FALLBACK_RETRY_SECONDS)
            return Decision(Transition.RETRY, later, FALLBACK_RETRY_SECONDS)

    # -- recording -------------------------------------------------------------------

    async def _record_loop(self) -> None:
        failures = 0
        while True:
            if not self._pending:
                if self._closing:
                    return
                self._results.clear()
                await self._results.wait()
                continue
            size = 1 if self._singles else RECORD_BATCH_MAX
            self._singles = max(0, self._singles - 1)
            chunk = self._pending[:size]
            del self._pending[: len(chunk)]
            self._recording = True
            try:
                done = await self._db(self._record_db, self._record_and_announce, chunk)
                failures = 0
                self._account(done, chunk)
            except Exception as exc:
                failures += 1
                if not await self._after_record_error(chunk, exc, failures):
                    return
            finally:
                self._recording = False
                self._wake.set()

    def _record_and_announce(self, chunk: list[Record]) -> batch.Recorded:
        """Record a batch, then send its signals (on the record thread: receivers may use the ORM)."""
        cfg = self.config
        health = self._health_samples(chunk)
        done = batch.record(cfg.worker_id, chunk, health=health, using=cfg.using)
        if done.moved:
            signals.send_recorded(chunk, done, {r.run_id: r.job for r in chunk}, using=cfg.using)
        self._account_circuits(chunk)
        return done

    def _health_samples(self, chunk: list[Record]) -> list[endpoint_health.Sample]:
        """Summarize the batch's HTTP answers per endpoint (written with the results)."""
        answers = [
            endpoint_health.Answer(
                r.endpoint,
                r.outcome == AttemptOutcome.SUCCEEDED,
                r.error_type,
                r.status_code,
                r.duration_ms,
                self.catalog.timeout_of(r.job_id),
            )
            for r in chunk
            if r.endpoint
        ]
        if not answers:
            return []
        return endpoint_health.summarize(answers, alpha=strait_settings.HEALTH_EWMA_ALPHA)

    def _account_circuits(self, chunk: list[Record]) -> None:
        """Count the batch's HTTP outcomes against their endpoints' circuits."""
        try:
            self.circuits.account(
                (Attempted(r.endpoint, r.error_type, r.status_code) for r in chunk if r.endpoint),
                now=timezone.now(),
                threshold=strait_settings.CIRCUIT_FAILURE_THRESHOLD,
            )
        except Exception:
            # The results are recorded: a missed count only delays a circuit's opening.
            logger.exception("counting %s results against circuits failed", len(chunk))

    def _account(self, done: batch.Recorded, chunk: list[Record]) -> None:
        if self._metrics is not None:
            self._metrics.observe_recorded(chunk, done, {r.run_id: r.job for r in chunk})
        if logger.isEnabledFor(logging.INFO):
            for rec in chunk:
                _log_attempt(rec, done.moved.get(rec.run_id))
        for status in done.moved.values():
            self.stats.count(status)
        if done.lost:
            self.stats.lost += len(done.lost)
            logger.warning(
                "results of runs %s not recorded: no longer executing under this worker "
                "(canceled, replayed or reaped meanwhile)",
                done.lost,
            )

    async def _after_record_error(self, chunk: list[Record], exc: Exception, failures: int) -> bool:
        """Put ``chunk`` back in a form that can be recorded; False to give up (closing)."""
        refused = isinstance(exc, DatabaseError) and not _is_connection_error(exc)
        if refused and len(chunk) > 1:
            # One bad row spoils the statement: find it by writing them one at a time.
            logger.exception("recording %s results failed; recording them one by one", len(chunk))
            self._pending[:0] = chunk
            self._singles = len(chunk)
        elif refused and chunk[0].error_type != "worker.record_failed":
            logger.exception(
                "recording run %s failed; recording it as a failed attempt", chunk[0].run_id
            )
            self._pending[:0] = [_as_record_failure(chunk[0], exc)]
        elif refused:
            logger.critical("run %s cannot be recorded at all; the reaper will", chunk[0].run_id)
        else:
            delay = min(0.1 * 2**failures, 5.0)
            logger.exception("recording %s results failed; retrying in %.1fs", len(chunk), delay)
            self._pending[:0] = chunk
            if self._closing and failures * delay > self.config.shutdown_timeout:
                logger.critical(
                    "giving up on recording runs %s; the reaper will", [r.run_id for r in chunk]
                )
                return False
            await asyncio.sleep(delay)
        return True

    # -- periodic duties -----------------------------------------------------------

    async def _periodic(self) -> None:
        cfg = self.config
        last_stats = last_beat = time.monotonic()
        while True:
            # Wake often enough to flush heartbeats that async handlers asked for.
            await asyncio.sleep(min(cfg.heartbeat_interval, 5.0))
            due = time.monotonic() - last_beat >= cfg.heartbeat_interval
            if due or (self._inflight and self._beats.marked):
                last_beat = time.monotonic()
                self._beats.marked.clear()
                try:
                    await self._db(
                        self._record_db, batch.heartbeat, cfg.worker_id, list(self._inflight)
                    )
                    await self._db(self._duty_db, self._touch, len(self._inflight))
                except Exception:
                    logger.exception("heartbeat failed")
            if time.monotonic() - last_stats >= cfg.stats_interval:
                logger.info("worker %s: %s", cfg.worker_id, self.stats.line())
                last_stats = time.monotonic()


def _cost(run: Claimed, info: JobInfo | None, outcome: Outcome) -> Decimal | None:
    """What an attempt of a budgeted job cost: the endpoint's word, else the estimate.

    A call that never reached its endpoint (refused, no connection) costs nothing.
    """
    if run.reserved_cost is None or info is None:
        return None
    if outcome.cost is not None:
        return outcome.cost
    reached = (
        not info.row.endpoint_url
        or outcome.status_code is not None
        or outcome.attempt_outcome == AttemptOutcome.TIMED_OUT
    )
    return info.row.estimated_cost if reached else ZERO


def _extra(run: Claimed, info: JobInfo | None) -> dict[str, Any]:
    """What every log line about one run carries in ``extra``."""
    return {"run_id": run.id, "job": info.name if info else "", "attempt": run.attempt}


#: Where an attempt that did not complete left its run, and how loudly to say so.
_LOG_LEVEL_FOR_STATUS = {
    "queued": logging.INFO,
    "canceled": logging.INFO,
    "discarded": logging.WARNING,
    "dead_letter": logging.WARNING,
    "failed": logging.WARNING,
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
        rec.error[:200],
        status,
        f" until {rec.available_at:%Y-%m-%d %H:%M:%S}Z"
        if status == "queued" and rec.available_at
        else "",
        extra={
            "run_id": rec.run_id,
            "job": rec.job,
            "attempt": rec.attempt,
            "error_type": rec.error_type,
        },
    )


async def _wait_event(event: asyncio.Event, timeout: float | None) -> None:
    """Wait for ``event`` (set since the caller last cleared it), at most ``timeout``."""
    try:
        await asyncio.wait_for(event.wait(), timeout)
    except TimeoutError:
        pass


def _ping(alias: str) -> None:
    """Open (or check) this thread's connection to ``alias``; raise if the database is away."""
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT 1")


def _one_line(exc: BaseException) -> str:
    """An exception as one short line: its type and the first line of its message."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first}"[:300]


def _guarded(using: str, fn: Callable[..., T], *args: Any) -> T:
    """Call ``fn`` on a DB thread, dropping a broken connection so the next call reconnects."""
    try:
        return fn(*args)
    except Exception:
        connections[alias(using)].close_if_unusable_or_obsolete()
        raise


def _is_connection_error(exc: Exception) -> bool:
    from django.db import InterfaceError, OperationalError

    return isinstance(exc, InterfaceError | OperationalError)


def _as_record_failure(rec: Record, exc: Exception) -> Record:
    """A record the database refused, turned into a failed attempt that retries."""
    from dataclasses import replace

    later = timezone.now() + dt.timedelta(seconds=FALLBACK_RETRY_SECONDS)
    return replace(
        rec,
        transition=Transition.RETRY,
        available_at=later,
        result=None,
        outcome="failed",
        error_type="worker.record_failed",
        error=trim(f"the database refused this attempt's result: {type(exc).__name__}: {exc}"),
        response_excerpt="",
    )
