"""Process runs this worker no longer holds: their children are stopped.

Every ``PROCESS_WATCH_INTERVAL`` while process runs are in flight, one indexed
read by primary key (``Storage.let_go``) names the runs canceled or taken from
this worker (by the reaper, a replay): a canceled run's child dies within about
that interval (docs/process-execution.md).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Sequence

from django_strait.worker.process.pool import ProcessPool

logger = logging.getLogger(__name__)

#: Seconds between checks that the worker still holds its process runs (cancel, reaper).
PROCESS_WATCH_INTERVAL = 0.5

#: ``let_go(run_ids)``: the runs among them to stop, read on a database thread.
LetGo = Callable[[Sequence[int]], Awaitable[list[int]]]


async def watch_processes(
    let_go: LetGo, running: Callable[[], Collection[int]], processes: ProcessPool
) -> None:
    """Kill the child of every process run this worker no longer holds, or that was canceled."""
    while True:
        await asyncio.sleep(PROCESS_WATCH_INTERVAL)
        ids = list(running())
        if not ids:
            continue
        try:
            gone = await let_go(ids)
        except Exception:
            logger.exception("checking the process runs' status failed")
            continue
        for run_id in gone:
            if run_id in running():
                logger.info(
                    "run %s was canceled or is no longer this worker's: stopping its child",
                    run_id, extra={"run_id": run_id},
                )  # fmt: skip
                processes.stop_run(run_id, "the run was canceled or taken from this worker")
