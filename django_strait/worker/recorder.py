"""The worker's record: a batch of ended attempts written in one round trip, then told.

The record carries everything that changes with the batch (docs/architecture.md,
"Something that changes with every record"): the runs' moves and attempts, and
the rollup, endpoint health, budgets, webhooks and circuits. What it moved is
counted, logged (an attempt that did not complete, one line each) and handed on.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from django_strait.rules.states import RunStatus
from django_strait.services.breaker import CircuitBreaker
from django_strait.storage import Record, RecordBatch, Recorded, Storage
from django_strait.transitions import record
from django_strait.worker.accounting import accounted, batch_of, write_shared
from django_strait.worker.catalog import Catalog
from django_strait.worker.config import Stats

logger = logging.getLogger(__name__)

#: The longest error a worker's log line shows; the attempt keeps the whole of it.
LOG_ERROR_CHARS = 200

#: Where an attempt that did not complete left its run, and how loudly to say so.
_LOG_LEVEL_FOR_STATUS = {
    RunStatus.QUEUED: logging.INFO,
    RunStatus.CANCELED: logging.INFO,
    RunStatus.DISCARDED: logging.WARNING,
    RunStatus.DEAD_LETTER: logging.WARNING,
    RunStatus.FAILED: logging.WARNING,
}


class Recorder:
    """Writes one worker's batches (on its record thread) and tells what they did."""

    def __init__(
        self,
        storage: Storage,
        catalog: Catalog,
        circuits: CircuitBreaker,
        stats: Stats,
        *,
        worker_id: str,
        control: bool = False,
        ledger: Storage | None = None,
    ) -> None:
        self.storage = storage
        self.catalog = catalog
        self.circuits = circuits
        self.stats = stats
        self.worker_id = worker_id
        #: Health and circuits live on the control database (several aliases), which
        #: is the breaker's: they are written there, after the runs' record.
        self.control = control
        #: Budgets too (the control database's backend): settled there after the record.
        self.ledger = ledger

    def write(self, chunk: Sequence[Record]) -> Recorded:
        """Record a batch, its circuits included (the transition sends its signals)."""
        if self.control:
            done = record(RecordBatch(self.worker_id, chunk), storage=self.storage,
                          ledger=self.ledger)  # fmt: skip
            write_shared(self.circuits.storage, self.circuits, chunk, self.catalog)
        else:
            done = record(batch_of(self.worker_id, chunk, self.catalog, self.circuits),
                          storage=self.storage)  # fmt: skip
            accounted(self.circuits, done)
        logger.debug("recorded %s results in one batch: %s moved, %s lost",
                     len(chunk), len(done.moved), len(done.lost))  # fmt: skip
        return done

    def told(self, chunk: Sequence[Record], done: Recorded) -> None:
        """Count and log what a written batch did."""
        if logger.isEnabledFor(logging.INFO):
            for rec in chunk:
                log_attempt(rec, done.moved.get(rec.run_id))
        for status in done.moved.values():
            self.stats.count(status)
        self.stats.lost += len(done.lost)
        say_unmoved(done)

    def may_owe(self, rec: Record) -> bool:
        """Whether an ended run may owe its job's webhook (its workflow's: ``workflows_ended``)."""
        try:
            return bool(self.catalog.get(rec.job_id).row.webhook_url)
        except KeyError:
            return True  # not loaded here: a wasted round costs one query, a raise re-records


def log_attempt(rec: Record, status: str | None) -> None:
    """Log an attempt that did not complete, at the level where it left its run."""
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
