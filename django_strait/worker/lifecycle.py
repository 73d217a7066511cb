"""A worker process's life around its work: start-up, signals, heartbeats, drain.

- start-up waits for the database (workers restart in any order in production:
  one started first waits, saying so once per try, with a capped backoff) and
  registers the worker (``duties.registry``);
- SIGINT/SIGTERM stop claiming and drain the runs in flight up to the shutdown
  timeout; a second signal exits at once, leaving them to the reaper;
- every heartbeat interval, the runs in flight are heartbeaten in one statement
  and the worker's registry row touched; every stats interval, one log line;
- it keeps the stamps the health probes answer from (``worker.probes``).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

from django.db import connections

from django_strait.database import alias as strait_alias
from django_strait.duties import registry
from django_strait.transitions import heartbeat
from django_strait.worker.config import Stats, WorkerConfig
from django_strait.worker.heartbeat import Heartbeats
from django_strait.worker.probes import Probes

logger = logging.getLogger(__name__)

#: Seconds between tries while the database does not answer at start-up: doubling, capped.
DATABASE_RETRY_FIRST = 0.5
DATABASE_RETRY_MAX = 30.0

#: ``call(fn, *args)``: run ``fn`` on a database thread.
DbCall = Callable[..., Awaitable[Any]]


class StopOnSignal:
    """SIGINT or SIGTERM: the first stops claiming and drains; the second exits at once."""

    def __init__(self, stop: Callable[[], None], what: str) -> None:
        self._stop = stop
        self._what = what
        self._signals = 0

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, self, sig)
            except (NotImplementedError, RuntimeError, ValueError):
                return  # not the main thread (tests drive the worker in a thread)

    def __call__(self, sig: signal.Signals) -> None:
        self._signals += 1
        if self._signals > 1:
            logger.warning(
                "second %s: exiting now; runs in flight are left to the reaper", sig.name
            )
            raise SystemExit(1)
        logger.info("%s received: %s, finishing runs in flight", sig.name, self._what)
        self._stop()


class Lifecycle:
    """Start-up, signals, heartbeats and stats of one worker process."""

    def __init__(
        self,
        config: WorkerConfig,
        stats: Stats,
        beats: Heartbeats,
        *,
        on_stop: Callable[[], None],
        in_flight: Callable[[], list[int]],
        probes: Probes | None = None,
    ) -> None:
        self.config = config
        self.stats = stats
        self.beats = beats
        self._on_stop = on_stop
        self._in_flight = in_flight
        #: What the health probes answer from (stopping, the database's last answer).
        self.probes = probes or Probes(heartbeat_interval=config.heartbeat_interval)
        self.stopping = False
        #: Set to wake the database wait (a stop).
        self.woken = asyncio.Event()

    def stop(self) -> None:
        """Ask the worker to stop (idempotent)."""
        self.stopping = self.probes.stopping = True
        self.woken.set()
        self._on_stop()

    # -- signals ------------------------------------------------------------------------

    def install_signal_handlers(self, loop: asyncio.AbstractEventLoop) -> None:
        """Stop on SIGINT or SIGTERM; exit at once on the second."""
        StopOnSignal(self.stop, "no more claims").install(loop)

    # -- start-up -----------------------------------------------------------------------

    async def keep_loop_stamp(self) -> None:
        """Stamp every second that the event loop turns (what ``/livez`` answers from)."""
        while True:
            self.probes.loop_at = time.monotonic()
            await asyncio.sleep(1.0)

    def started(self) -> None:
        """The worker claims from now on: its database answered, it registered."""
        self.probes.started = True
        self.probes.database_at = time.monotonic()

    async def wait_for_database(self, call: DbCall) -> bool:
        """Wait until the database answers, trying again with a capped backoff; False if stopped."""
        alias = self.config.using
        delay = DATABASE_RETRY_FIRST
        while not self.stopping:
            try:
                await call(_ping, alias)
                return True
            except Exception as exc:
                logger.warning(
                    "database %r is not answering (%s); trying again in %.1fs",
                    alias,
                    _one_line(exc),
                    delay,
                )
            await _wait(self.woken, delay)
            delay = min(delay * 2, DATABASE_RETRY_MAX)
        return False

    def register(self) -> None:
        """Record that this worker runs here and now (on a database thread)."""
        cfg = self.config
        registry.register(
            cfg.worker_id, queues=list(cfg.queues), concurrency=cfg.concurrency, using=cfg.using
        )

    def unregister(self) -> None:
        """Delete this worker's registry row: it exits cleanly and holds no runs."""
        registry.unregister(self.config.worker_id, using=self.config.using)

    def touch(self, in_flight: int) -> None:
        """Mark the worker seen; register again if the reaper forgot it."""
        cfg = self.config
        if not registry.touch(cfg.worker_id, in_flight=in_flight, using=cfg.using):
            self.register()

    # -- while it runs ----------------------------------------------------------------

    async def periodic(self, record_call: DbCall, duty_call: DbCall, storage: Any) -> None:
        """Heartbeat the runs in flight and touch the registry row; log the stats line."""
        cfg = self.config
        last_stats = last_beat = time.monotonic()
        while True:
            # Wake often enough to flush heartbeats that async handlers asked for.
            await asyncio.sleep(min(cfg.heartbeat_interval, 5.0))
            due = time.monotonic() - last_beat >= cfg.heartbeat_interval
            in_flight = self._in_flight()
            if due or (in_flight and self.beats.marked):
                last_beat = time.monotonic()
                self.beats.marked.clear()
                try:
                    await record_call(heartbeat, cfg.worker_id, in_flight, storage=storage)
                    await duty_call(self.touch, len(in_flight))
                    self.probes.database_at = time.monotonic()
                except Exception:
                    logger.exception("heartbeat failed")
            if time.monotonic() - last_stats >= cfg.stats_interval:
                logger.info("worker %s: %s", cfg.worker_id, self.stats.line())
                last_stats = time.monotonic()


def _ping(alias: str | None) -> None:
    """Open (or check) this thread's connection; raise if the database is away."""
    with connections[strait_alias(alias)].cursor() as cursor:
        cursor.execute("SELECT 1")


def _one_line(exc: BaseException) -> str:
    """An exception as one short line: its type and the first line of its message."""
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {first}"[:300]


async def _wait(event: asyncio.Event, timeout: float | None) -> None:
    try:
        await asyncio.wait_for(event.wait(), timeout)
    except TimeoutError:
        pass
