"""One worker process serving several databases: a ``Worker`` per alias on one event loop.

``run_strait_worker`` builds one when ``STRAIT["DATABASES"]`` lists several
aliases (``--database`` narrows them). Each alias gets a whole engine of its own
(``worker.engine.Worker``): its storage backend, its four database threads and
their connections, its producer and claimer, its completer and recorder, its
LISTEN, its duties (each alias elects its own leader), its webhook deliverer and
its executors. They share the process, its event loop and its signals, nothing
that waits on a database: a database that is down or slow holds back only the
engine of its alias, whose claims and records fail and are tried again while the
others go on (docs/operations.md, "Beyond one PostgreSQL server", measures it).

``--concurrency`` is per alias (each engine has its slots). The metrics port,
when asked for, is served by the first alias's engine.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

from django_strait.worker.config import Stats, WorkerConfig
from django_strait.worker.engine import Worker
from django_strait.worker.lifecycle import StopOnSignal

logger = logging.getLogger(__name__)


def configs_for(
    base: WorkerConfig, served: list[str], *, first: str, listen_database: str | None
) -> list[WorkerConfig]:
    """One engine's config per served alias: each LISTENs on its own alias (on
    ``listen_database``, STRAIT["LISTEN_DATABASE"], for ``first``, the first alias of
    STRAIT["DATABASES"]), and the metrics port is the first engine's."""
    listen = base.listen_alias is not None
    return [
        dataclasses.replace(
            base,
            using=where,
            listen_alias=((listen_database or where) if where == first else where)
            if listen
            else None,
            metrics_port=base.metrics_port if i == 0 else None,
        )
        for i, where in enumerate(served)
    ]


class Fleet:
    """The engines of one process, one per alias; ``run()`` blocks until every one stopped."""

    def __init__(self, configs: list[WorkerConfig]) -> None:
        self.workers = [Worker(config) for config in configs]

    @property
    def left_waiting(self) -> str:
        """What the burst engines left queued, alias by alias ("" when nothing)."""
        return "; ".join(f"{w.alias}: {w.left_waiting}" for w in self.workers if w.left_waiting)

    @property
    def stats(self) -> dict[str, Stats]:
        return {w.alias: w.stats for w in self.workers}

    def run(self) -> dict[str, Stats]:
        asyncio.run(self._main())
        return self.stats

    def stop(self) -> None:
        """Stop every engine (thread-safe)."""
        for worker in self.workers:
            worker.stop()

    async def _main(self) -> None:
        StopOnSignal(self.stop, "no more claims on any database").install(
            asyncio.get_running_loop()
        )
        logger.info("serving %s databases: %s", len(self.workers),
                    ", ".join(w.alias for w in self.workers))  # fmt: skip
        engines = [asyncio.create_task(w._main(signals=False)) for w in self.workers]
        done, pending = await asyncio.wait(engines, return_when=asyncio.FIRST_EXCEPTION)
        if pending:  # one engine failed: the others stop too, draining what they hold
            self.stop()
            await asyncio.wait(pending)
        for engine in engines:
            if engine.done() and not engine.cancelled() and engine.exception() is not None:
                raise engine.exception()
