"""The PostgreSQL storage backend: the portable one, with its hot steps in one round trip each.

Claim, start, hold, record, limits and budgets are single statements from
``queries.sql`` (``FOR UPDATE SKIP LOCKED`` for the claim, which starts its runs
too; data-modifying CTEs for the hold and the record), sent through server-bound
cursors. On a worker's connections that reach PostgreSQL directly, the statements
named in ``STRAIT["PREPARE_STATEMENTS"]`` (all three by default) are prepared, their
plans dropped every ``STRAIT["PLAN_LIFETIME"]`` (docs/settings.md, "Prepared statements").
The verbs it does no better than the portable ORM are the ORM's statements,
called by name through ``storage.common`` by the mixins both backends list
(``storage.shared``): this class is the ORM backend's sibling, not its subclass.
Its own statements are split by concern: how they are sent (``statements``), the
claim's protection steps (``protection``), the duties' and views' (``duties``);
the claim, start, hold and record are this module's.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from django.db import OperationalError, connections

from django_strait.models import JobRun
from django_strait.rules import bounds
from django_strait.storage import common
from django_strait.storage.floors import BOTTOM, ClaimFloors, Segment
from django_strait.storage.moves import is_moved_row, retry_moved
from django_strait.storage.orm.claims import claimed
from django_strait.storage.orm.records import recorded
from django_strait.storage.parts import RecordPart, following_parts, note
from django_strait.storage.postgres import enqueue, queries, workflows
from django_strait.storage.postgres.duties import LOCK_NAMESPACE as LOCK_NAMESPACE
from django_strait.storage.postgres.duties import DutyStatements
from django_strait.storage.postgres.duties import lock_key as lock_key
from django_strait.storage.postgres.protection import ProtectionStatements
from django_strait.storage.shared import (
    Backend,
    SharedDecidedVerbs,
    SharedOutboxVerbs,
    SharedProtectionVerbs,
    SharedRunVerbs,
    SharedWorkflowVerbs,
)
from django_strait.storage.sql import text_array
from django_strait.storage.values import (
    Claimed,
    Envelope,
    Hold,
    RecordBatch,
    Recorded,
)


def _moved(rows: list[tuple], parts: Sequence[RecordPart], results: list[object]) -> dict[int, Any]:
    """The runs a record statement moved (id -> status); the rows its parts returned (no
    run id: record.<part>.returned) are read by their parts into ``results``."""
    if all(row[0] is not None for row in rows):
        return dict(rows)  # the hot path: no part returned rows
    returned = [row[1] for row in rows if row[0] is None]
    for part in parts:
        read_rows = getattr(part, "returned", None)
        if read_rows is not None:
            results.append(read_rows(returned))
    return {row[0]: row[1] for row in rows if row[0] is not None}


#: The claim without floors: every priority, from the front of the index.
_WHOLE_INDEX = Segment(*bounds.PRIORITY, *BOTTOM)


class PostgresStorage(
    Backend,
    ProtectionStatements,
    DutyStatements,
    SharedRunVerbs,
    SharedProtectionVerbs,
    SharedWorkflowVerbs,
    SharedOutboxVerbs,
    SharedDecidedVerbs,
):
    """Django-strait's tables on PostgreSQL, the hot steps in hand-written SQL."""

    can_listen = True
    #: Its workflow statements' id lists are arrays (``storage.postgres.workflows``).
    workflow_statements = workflows.STATEMENTS
    following = following_parts(workflows.STATEMENTS)
    pages_by_primary_key = True
    row_estimates = True
    keeps_dead_rows = True

    def claim(
        self,
        worker_id: str,
        *,
        queues: Sequence[str],
        limit: int,
        now: dt.datetime,
        floors: ClaimFloors | None = None,
        start: bool = False,
        exclude: Sequence[str] = (),
    ) -> list[Claimed]:
        """One statement (queries.sql, "claim"); with ``start``, the runs come back begun.

        Its transaction commits without waiting for its WAL flush (the statement says
        so): a claim lost in a server crash only means the runs are queued again,
        which a crash implies anyway; results are still recorded durably. That saves
        a disk flush per batch, most of a batch's claim time on a plain disk.
        """
        if limit <= 0:
            return []
        params: dict[str, Any] = {"limit": limit, "worker": worker_id, "begin": start}
        if not queues:
            variant = "any"
            if exclude:  # paused queues (storage.queues)
                variant, params["paused"] = "except", list(exclude)
        elif len(queues) == 1:
            variant, params["queue"] = "one", queues[0]
        else:
            variant, params["queues"] = "many", list(queues)
        segments = floors.segments(time.monotonic()) if floors else [_WHOLE_INDEX]
        params.update(
            low=[s.low for s in segments],
            high=[s.high for s in segments],
            after_at=[s.after_at for s in segments],
            after_id=[s.after_id for s in segments],
        )
        rows = self._execute(queries.claim(variant, self._partitioned()), params, name="claim")
        if floors:
            floors.learn([(row[-2], (row[-1], row[0])) for row in rows], limit, now)
        runs = [claimed(*row[:-3]) for row in rows]
        if start:
            for run, row in zip(runs, rows, strict=True):
                run.begun, run.started_at = True, row[-3]
        return runs

    def claim_external(
        self, worker_id: str, *, queues: Sequence[str], limit: int, now: dt.datetime
    ) -> list[Claimed]:
        """One statement per queue (queries.sql, "claim_external"), the first queue first."""
        sql = queries.claim_external(self._partitioned())
        taken: list[Claimed] = []
        for queue in queues:
            if len(taken) >= limit:
                break
            params = {"worker": worker_id, "queue": queue, "limit": limit - len(taken), "now": now}
            rows = self._execute(sql, params)
            # In claim order (priority, then due time, then id): RETURNING keeps none.
            rows.sort(key=lambda row: (-row[9], row[10], row[0]))
            taken += [claimed(*row[:9]) for row in rows]
        return taken

    def fetch_external(
        self, slots: Sequence[tuple[str, int]], *, queue: str
    ) -> tuple[list[tuple], bool]:
        """Claim and start up to ``len(slots)`` plain runs of ``queue`` in one statement
        (queries.sql, "fetch_external"): the n-th run in claim order is held by
        ``slots[n]``'s worker, visible for its milliseconds. Return the rows in claim
        order, each led by its slot's index, and whether a run that is not plain
        blocked it (then nothing changed). PostgreSQL only: the OJS fast door's fetch
        (several workers' fetches of one queue in one statement).
        """
        params = {"limit": len(slots), "queue": queue,
                  "workers": text_array(worker for worker, _ in slots),
                  "visible_ms": text_array(visible for _, visible in slots)}  # fmt: skip
        rows = self._execute(queries.fetch_external(self._partitioned()), params)
        blocked = bool(rows and rows[0][-2])
        started = [(row[0] - 1, *row[1:-2]) for row in rows if row[0] is not None]
        started.sort()  # by slot: claim order (priority, due time, id)
        return started, blocked

    def set_external_envelopes(self, envelopes: Sequence[Envelope]) -> None:
        """One UPDATE from arrays for a whole batch's new runs (ids, envelopes, due times)."""
        if not envelopes:
            return
        due = JobRun._meta.get_field("available_at")
        connection = connections[self.alias]
        # Array literals: psycopg adapts a list element by element (sql.text_array).
        params = {
            "ojs_id": text_array(None if e.ojs_id is None else str(e.ojs_id) for e in envelopes),
            "ojs": text_array(
                None if e.envelope is None else json.dumps(e.envelope) for e in envelopes
            ),  # fmt: skip
            "due": [due.get_db_prep_save(e.due, connection) for e in envelopes],
            "ids": text_array(int(e.run_id) for e in envelopes),
        }
        self._execute(queries.get("envelopes"), params)

    def set_deadlines(
        self, worker_id: str, deadlines: Mapping[int, dt.datetime], *, now: dt.datetime
    ) -> list[int]:
        """One statement (queries.sql, "deadlines") for every run of a fetch or heartbeat."""
        if not deadlines:
            return []
        params = {"ids": list(deadlines), "until": list(deadlines.values()), "worker": worker_id,
                  "now": now}  # fmt: skip
        rows = self._execute(queries.by_id("deadlines", self._partitioned()), params)
        moved = {row[0] for row in rows}
        return [run_id for run_id in deadlines if run_id in moved]

    def start(self, worker_id: str, runs: Sequence[Claimed], *, now: dt.datetime) -> list[Claimed]:
        """One statement (queries.sql, "start") for the runs the claim did not begin."""
        return common.start(self._workflow_db(), runs, lambda ids: self._start(worker_id, ids))

    def _start(self, worker_id: str, ids: list[int]) -> list[tuple]:
        return self._execute(
            queries.by_id("start", self._partitioned()),
            {"ids": ids, "worker": worker_id},
            name="start",
        )

    def hold(
        self, worker_id: str, holds: Sequence[Hold], *, now: dt.datetime, begun: bool = False
    ) -> None:
        if not holds:
            return
        self._execute(
            queries.by_id("hold", self._partitioned()),
            {
                "expected": "executing" if begun else "dequeued",
                "ids": [h.run_id for h in holds],
                "available_at": [h.available_at for h in holds],
                "error_type": [h.error_type for h in holds],
                "error": [h.error for h in holds],
                "endpoint": [h.endpoint for h in holds],
                "worker": worker_id,
            },
        )

    def record(self, batch: RecordBatch) -> Recorded:
        if not batch.records:
            return Recorded()
        params = _record_columns(batch)
        # A part with nothing to write is left out: planning the statement is much of
        # its time, for a batch of one run more than half (docs/benchmarks.md).
        parts = [part for part in self.parts if part.wanted(batch)]
        for part in parts:
            params.update(part.params(batch))
        sql = queries.record(tuple(part.name for part in parts), self._partitioned())
        following = [part for part in self.following if part.wanted(batch)]
        results: list[object] = []
        if not following:
            try:
                rows = self._execute(sql, params, name="record")  # the hot path
            except OperationalError as exc:
                if not is_moved_row(exc):
                    raise
                # A run of the batch was canceled or rescued meanwhile, and moved.
                rows = retry_moved(self.alias, lambda: self._execute(sql, params))
            moved = _moved(rows, parts, results)
        else:

            def record_and_follow() -> dict[int, Any]:
                results.clear()  # a retried try: only the last try's results count
                moved = _moved(self._execute(sql, params, name="record"), parts, results)
                results.extend(part.apply(batch, moved, self.alias) for part in following)
                return moved

            moved = retry_moved(self.alias, record_and_follow)
        done = recorded(self.alias, batch, moved)
        for result in results:
            note(done, result)
        return done

    def insert_by_name(self, name: str, payload: Any, text: str, **fields: Any) -> JobRun | None:
        return enqueue.insert_by_name(self.alias, name, payload, text, **fields)

    def insert_many(
        self,
        template: JobRun,
        payloads: Sequence[Any],
        texts: Sequence[str],
        keys: Sequence[str] | None,
        batch_size: int,
    ) -> tuple[list[JobRun], set[int]]:
        return enqueue.insert_many(self.alias, template, payloads, texts, keys, batch_size)


def _record_columns(batch: RecordBatch) -> dict[str, Any]:
    """The records as one array per column, each as one literal (``sql.text_array``): a
    constant statement, and fast to adapt."""
    recs = batch.records
    return {
        "id": text_array(r.run_id for r in recs),
        "attempt": text_array(r.attempt for r in recs),
        "status": text_array(r.transition.target for r in recs),
        "available_at": text_array(r.available_at for r in recs),
        "result": text_array(None if r.result is None else json.dumps(r.result) for r in recs),
        "error": text_array(r.error for r in recs),
        "error_type": text_array(r.error_type for r in recs),
        "endpoint": text_array(r.endpoint for r in recs),
        "started_at": text_array(r.started_at for r in recs),
        "finished_at": text_array(r.finished_at for r in recs),
        "duration_ms": text_array(r.duration_ms for r in recs),
        "outcome": text_array(r.outcome for r in recs),
        "status_code": text_array(r.status_code for r in recs),
        "excerpt": text_array(r.response_excerpt for r in recs),
        "job_id": text_array(r.job_id for r in recs),
        "cost": text_array(r.spent for r in recs),
        "worker": text_array(batch.worker_of(r) for r in recs),
    }
