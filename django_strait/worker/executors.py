"""The executors: a claimed run in, what its attempt did (an Outcome) out, nothing persisted.

One per kind of job: HTTP jobs and ``async def`` handlers run on the worker's
event loop (an HTTP call costs no thread); plain-function handlers run on the
worker's threads (``SyncRunner``, which hands outcomes back in batches); the
handlers of process jobs run in the child processes of ``worker.process``. A run
whose own row could not be read, or whose job's handler this process has not
registered, fails without running. What an attempt's outcome means for the run
is decided afterwards (``worker.outcomes``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from django_strait.conf import strait_settings
from django_strait.dispatch.http import HttpDispatcher, HttpRequest
from django_strait.dispatch.python import RunContext, is_async, run_python, settle
from django_strait.rules.handlers import UNKNOWN_HANDLER
from django_strait.rules.outcome import Outcome, failure
from django_strait.storage.values import Claimed
from django_strait.worker.catalog import Catalog, JobInfo
from django_strait.worker.heartbeat import Heartbeats
from django_strait.worker.process.pool import ProcessPool, Task
from django_strait.worker.sync_runner import Done, SyncRunner

logger = logging.getLogger(__name__)

#: The error type of an attempt whose run's own row cannot be read: it fails, unrun.
INVALID_RUN_ERROR = "run.invalid"

#: Called as each attempt ends: the run, what it did, and when it began (monotonic).
Finished = Callable[[Claimed, Outcome, float], None]


class Executors:
    """Runs claimed runs, each by the executor of its job's kind; tracks those in flight."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        catalog: Catalog,
        http: HttpDispatcher,
        beats: Heartbeats,
        *,
        threads: int,
        result_max_bytes: int,
        finished: Finished,
        processes: ProcessPool | None = None,
    ) -> None:
        self._loop = loop
        self._catalog = catalog
        self._http = http
        self._beats = beats
        self._result_max_bytes = result_max_bytes
        self._finished = finished
        self._sync = SyncRunner(
            loop, self._sync_done, threads=threads, max_result_bytes=result_max_bytes
        )
        #: Runs executing: their task, or None for plain-function handlers on the threads.
        self.in_flight: dict[int, asyncio.Task[None] | None] = {}
        #: The child processes of process runs (docs/process-execution.md), and the runs they execute.
        self.processes = processes
        self.process_runs: set[int] = set()

    def start(self, run: Claimed) -> None:
        """Begin the run's attempt: in a child process, on a thread for a plain function,
        else on the loop."""
        info = self._catalog.get(run.job_id)
        handler = info.handler
        if run.preset and handler is not None and not run.row_error:
            self.process_runs.add(run.id)
            self.in_flight[run.id] = self._loop.create_task(self._in_process(run, info))
        elif handler is not None and not is_async(handler) and not run.row_error:
            self.in_flight[run.id] = None
            context = self._context(run, info)
            self._sync.submit((run, time.monotonic()), handler, run.payload, context)
        else:
            self.in_flight[run.id] = self._loop.create_task(self._execute(run))

    def done(self, run_id: int) -> None:
        """Forget a run whose attempt has ended."""
        del self.in_flight[run_id]
        self.process_runs.discard(run_id)
        self._beats.forget(run_id)

    def close(self) -> None:
        """Let the handler threads exit once their queue is empty."""
        self._sync.close()

    def _sync_done(self, done: list[Done]) -> None:
        for (run, begun), result in done:
            if isinstance(result, Outcome):
                self._finished(run, result, begun)
            else:  # the plain function returned an awaitable: finish it on the loop
                self.in_flight[run.id] = self._loop.create_task(self._settle(run, result, begun))

    async def _settle(self, run: Claimed, awaitable: Any, begun: float) -> None:
        self._finished(run, await settle(awaitable, max_result_bytes=self._result_max_bytes), begun)

    async def _execute(self, run: Claimed) -> None:
        begun = time.monotonic()
        try:
            outcome = await self._dispatch(self._catalog.get(run.job_id), run)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # executors should not raise; if one does, it is a failed attempt
            logger.exception(
                "executing run %s failed inside the worker", run.id,
                extra={"run_id": run.id, "attempt": run.attempt},
            )  # fmt: skip
            outcome = failure("worker.internal", f"{type(exc).__name__}: {exc}")
        self._finished(run, outcome, begun)

    async def _dispatch(self, info: JobInfo, run: Claimed) -> Outcome:
        return await attempt(
            info, run, http=self._http, beats=self._beats, max_result_bytes=self._result_max_bytes
        )

    async def _in_process(self, run: Claimed, info: JobInfo) -> None:
        begun = time.monotonic()
        try:
            outcome = await self._run_in_process(run, info)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the pool should not raise; if it does, the attempt failed
            logger.exception(
                "running run %s in a child process failed inside the worker", run.id,
                extra={"run_id": run.id, "attempt": run.attempt},
            )  # fmt: skip
            outcome = failure("worker.internal", f"{type(exc).__name__}: {exc}")
        self._finished(run, outcome, begun)

    async def _run_in_process(self, run: Claimed, info: JobInfo) -> Outcome:
        if self.processes is None:
            return failure("worker.internal", "this worker has no process pool")
        preset = strait_settings.PRESETS.get(run.preset)
        if preset is None:  # the settings changed between the claim and now
            return failure("system.preset_unknown", f"preset {run.preset!r} is not configured")
        task = Task(
            run_id=run.id,
            attempt=run.attempt,
            job=info.name,
            handler=info.row.handler,
            payload=run.payload,
            workflow=run.workflow,
            preset=preset.name,
            limit_bytes=preset.limit_bytes,
            timeout=info.row.timeout_secs,
        )
        return await self.processes.run(task)

    def _context(self, run: Claimed, info: JobInfo) -> RunContext:
        return context_of(run, info, self._beats)


async def attempt(
    info: JobInfo, run: Claimed, *, http: HttpDispatcher, beats: Heartbeats, max_result_bytes: int
) -> Outcome:
    """Run one attempt on the event loop (an HTTP call, an ``async def`` handler, or a
    plain one on the loop's default executor); return what it did."""
    if run.row_error:
        return failure(INVALID_RUN_ERROR, run.row_error, retryable=False)
    if info.row.endpoint_url:
        return await http.dispatch(_request(info, run))
    if info.handler is None:
        return failure(UNKNOWN_HANDLER, f"handler {info.handler_error}", retryable=False)
    timeout = info.row.timeout_secs
    try:
        # Only coroutines can be interrupted: plain functions run to their end.
        return await asyncio.wait_for(
            run_python(
                info.handler,
                run.payload,
                context_of(run, info, beats),
                executor=None,
                max_result_bytes=max_result_bytes,
            ),
            timeout,
        )
    except TimeoutError:
        return failure(
            "python.timeout",
            f"the handler ran past the job's timeout of {timeout:g}s and was cancelled",
            attempt_outcome="timed_out",
        )


def context_of(run: Claimed, info: JobInfo, beats: Heartbeats) -> RunContext:
    """Return the context a handler taking two parameters gets for ``run``."""
    return RunContext(
        run_id=run.id,
        attempt=run.attempt,
        job=info.name,
        payload=run.payload,
        heartbeat=beats.for_run(run.id),
        parents=(run.workflow or {}).get("parents", {}),
        workflow=run.workflow,
    )


def _request(info: JobInfo, run: Claimed) -> HttpRequest:
    row = info.row
    return HttpRequest(
        run_id=run.id,
        job=row.name,
        attempt=run.attempt,
        payload=run.payload,
        url=run.endpoint or row.endpoint_url,
        method=row.http_method,
        headers=row.headers or {},
        signing_secret=row.signing_secret,
        timeout=row.timeout_secs,
        workflow=run.workflow,
    )
