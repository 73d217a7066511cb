"""An in-memory storage for the worker's parts: runs and attempts in dicts, no database.

Enough of the storage contract for the completer and the producer (claim in
order, start, record with its guard) and a way to make a write fail the way a
database does: refuse one record's value, or lose the connection a few times.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from django.db import DataError, OperationalError

from django_strait.states import Transition
from django_strait.storage import Claimed, Record, RecordBatch, Recorded


@dataclass
class Row:
    """One run, as far as the worker's parts care."""

    id: int
    job_id: int = 1
    status: str = "queued"
    attempt: int = 0
    claimed_by: str = ""
    priority: int = 0


@dataclass
class MemoryStorage:
    """Runs by id; attempts as (run id, number, outcome); records written, in order."""

    runs: dict[int, Row] = field(default_factory=dict)
    attempts: list[tuple[int, int, str]] = field(default_factory=list)
    writes: list[list[int]] = field(default_factory=list)
    #: Results the "database" refuses to store (as PostgreSQL refuses a NUL in jsonb).
    refused_results: set[str] = field(default_factory=set)
    #: How many writes fail next for want of a connection.
    connection_failures: int = 0
    #: Runs whose record raises what a record part that cannot read a row raises.
    unreadable_runs: set[int] = field(default_factory=set)

    def add(self, *ids: int, status: str = "queued", priority: int = 0) -> None:
        for rid in ids:
            self.runs[rid] = Row(rid, status=status, priority=priority)

    def claim(self, worker_id: str, limit: int) -> list[Claimed]:
        due = sorted(
            (r for r in self.runs.values() if r.status == "queued"),
            key=lambda r: (-r.priority, r.id),
        )[:limit]
        for row in due:
            row.status, row.claimed_by = "dequeued", worker_id
        return [Claimed(r.id, r.job_id, {}, r.attempt, 0, None, None) for r in due]

    def start(self, worker_id: str, runs: list[Claimed]) -> list[Claimed]:
        for run in runs:
            row = self.runs[run.id]
            row.status, row.attempt = "executing", row.attempt + 1
            run.attempt = row.attempt
        return runs

    def record(self, batch: RecordBatch) -> Recorded:
        if self.connection_failures:
            self.connection_failures -= 1
            raise OperationalError("server closed the connection unexpectedly")
        if any(str(r.result) in self.refused_results for r in batch.records):
            raise DataError("unsupported Unicode escape sequence")
        if any(r.run_id in self.unreadable_runs for r in batch.records):
            raise RecursionError("maximum recursion depth exceeded while decoding a JSON object")
        self.writes.append([r.run_id for r in batch.records])
        done = Recorded()
        for rec in batch.records:
            row = self.runs.get(rec.run_id)
            held = row is not None and row.status == "executing"
            if not (held and row.claimed_by == batch.worker_id and row.attempt == rec.attempt):
                done.lost.append(rec.run_id)
                continue
            row.status, row.claimed_by = rec.transition.target, ""
            self.attempts.append((rec.run_id, rec.attempt, rec.outcome))
            done.moved[rec.run_id] = row.status
        return done


NOW = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)


def record(run_id: int, *, attempt: int = 1, result: object = None, **fields) -> Record:
    """A record of a successful attempt (unless ``fields`` say otherwise)."""
    values = {"transition": Transition.COMPLETE, "outcome": "succeeded", **fields}
    return Record(
        run_id, attempt, values.pop("transition"), NOW, NOW, 1, values.pop("outcome"),
        result=result, **values,
    )  # fmt: skip
