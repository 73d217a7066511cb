"""An in-memory storage backend: runs, jobs and attempts in dicts, no database.

It implements the Storage Protocol (``django_strait.storage.base``), so the
worker's parts (the completer, the producer) are tested against it, and the
conformance suite runs on it by name:
``STRAIT_CONFORMANCE_BACKEND=tests.unit.memory.MemoryStorage pytest tests/conformance``.
It gives the suite its own rows (``conformance_rows``); the tests marked
``needs_database`` are skipped there.

What it keeps, it keeps as the contract says: the claim in claim order under one
lock (its "SKIP LOCKED": claims never overlap), every move guarded by status,
worker and attempt, a record applied whole or not at all, holds, cancels,
replays, heartbeats, external claims and deadlines, idempotent inserts. What it
does not keep, it says so: budgets, circuits, endpoint health, presets, workflows,
history days and the reaper raise ``NotImplementedError`` naming what is missing
(or answer "none here" where that is true of an empty store, as a job without
limits holds nothing). A write can also be made to fail the way a database's
does: refuse one record's value, or lose the connection a few times.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import itertools
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from django.db import DataError, OperationalError
from django.db.models import QuerySet

from django_strait.models import JobRun, Workflow, WorkflowRun
from django_strait.rules.resilience import budgets, limits
from django_strait.rules.resilience.health import Health
from django_strait.rules.resilience.policy import Change, Circuit, Result
from django_strait.rules.states import InvalidTransition, RunStatus, Transition
from django_strait.storage import Claimed, Hold, Record, RecordBatch, Recorded, Rescued, common
from django_strait.storage.floors import ClaimFloors
from django_strait.storage.values import Advanced, Envelope, HistoryDay, Rescue, StaleRuns, Waiting

EPOCH = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)


@dataclass
class Row:
    """One run, as far as the worker and the contract care."""

    id: int
    job_id: int = 1
    status: str = "queued"
    attempt: int = 0
    claimed_by: str = ""
    priority: int = 0
    queue: str = "default"
    available_at: dt.datetime = EPOCH
    payload: Any = None
    attempts_before_replay: int = 0
    max_attempts: int | None = None
    cancel_requested: bool = False
    heartbeat_at: dt.datetime | None = None
    dequeued_at: dt.datetime | None = None
    started_at: dt.datetime | None = None
    finished_at: dt.datetime | None = None
    visible_until: dt.datetime | None = None
    error_type: str = ""
    last_error: str = ""
    result: Any = None
    replay_count: int = 0
    replayed_by: str = ""
    idempotency_key: str | None = None
    updated_at: dt.datetime | None = None


@dataclass
class JobRow:
    """One job: what a claim filters on."""

    id: int
    name: str = ""
    enabled: bool = True
    external: bool = False
    queue: str = "default"
    max_attempts: int | None = None


def _no(what: str) -> NotImplementedError:
    return NotImplementedError(
        f"MemoryStorage keeps no {what}: a database backend's test covers it"
    )


@dataclass
class MemoryStorage:
    """Runs and jobs by id; attempts as (run id, number, outcome); records written, in order."""

    alias: str = "memory"
    runs: dict[int, Row] = field(default_factory=dict)
    jobs: dict[int, JobRow] = field(default_factory=dict)
    attempts: list[tuple[int, int, str]] = field(default_factory=list)
    writes: list[list[int]] = field(default_factory=list)
    #: Results the "database" refuses to store (as PostgreSQL refuses a NUL in jsonb).
    refused_results: set[str] = field(default_factory=set)
    #: How many writes fail next for want of a connection.
    connection_failures: int = 0
    #: Runs whose record raises what a record part that cannot read a row raises.
    unreadable_runs: set[int] = field(default_factory=set)

    can_listen = False
    pages_by_primary_key = False
    row_estimates = False
    keeps_dead_rows = False

    def __post_init__(self) -> None:
        self._lock = threading.RLock()  # one transaction at a time: claims never overlap
        self._ids = itertools.count(1)
        self._workers: dict[tuple[int, int], str] = {}  # (run, attempt number) -> its worker
        self._holds: list[tuple[int, str, int, dt.datetime]] = []  # run, reason, attempt, began

    # -- making rows (the unit tests' and the conformance suite's) -------------------

    def add(self, *ids: int, status: str = "queued", priority: int = 0) -> None:
        for rid in ids:
            self.runs[rid] = Row(rid, status=status, priority=priority)

    def add_job(self, **values: Any) -> int:
        job = JobRow(next(self._ids), **values)
        self.jobs[job.id] = job
        return job.id

    def add_run(self, job_id: int, **values: Any) -> int:
        job = self.jobs[job_id]
        values.setdefault("queue", job.queue)
        values.setdefault("max_attempts", job.max_attempts)
        run = Row(next(self._ids), job_id, **values)
        self.runs[run.id] = run
        return run.id

    def conformance_rows(self) -> MemoryRows:
        """How the conformance suite makes and reads this backend's rows."""
        return MemoryRows(self)

    # -- transactions ---------------------------------------------------------------

    @contextlib.contextmanager
    def atomic(self) -> Iterator[None]:
        """One writer at a time, and all or nothing: what raises inside is undone."""
        with self._lock:
            kept = copy.deepcopy((self.runs, self.attempts, self._workers, self._holds))
            try:
                yield
            except BaseException:
                self.runs, self.attempts, self._workers, self._holds = kept
                raise

    def claim_transaction(self) -> Any:
        return self.atomic()

    def keep_plans(self, now: float) -> None:
        """Nothing: no statement is prepared in memory."""

    # -- the worker's runs ----------------------------------------------------------

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
        with self._lock:
            if exclude:  # the paused queues (storage.queues), given only with no queues
                queues = sorted({r.queue for r in self.runs.values()} - set(exclude))
                if not queues:
                    return []
            return self._claim(worker_id, queues, limit, now, external=False)

    def claim_external(
        self, worker_id: str, *, queues: Sequence[str], limit: int, now: dt.datetime
    ) -> list[Claimed]:
        with self._lock:
            taken: list[Claimed] = []
            for queue in queues or [None]:  # queue by queue, the first first
                left = limit - len(taken)
                if left > 0:
                    taken += self._claim(worker_id, [queue] if queue else [], left, now, True)
            return taken

    def _claim(
        self, worker_id: str, queues: Sequence[str], limit: int, now: dt.datetime, external: bool
    ) -> list[Claimed]:
        with self._lock:
            due = sorted(
                (r for r in self.runs.values() if self._claimable(r, queues, now, external)),
                key=lambda r: (-r.priority, r.available_at, r.id),
            )[: max(limit, 0)]
            for row in due:
                row.status, row.claimed_by, row.dequeued_at = "dequeued", worker_id, now
                row.heartbeat_at = now
            return [self._claimed(row) for row in due]

    def _claimable(self, row: Row, queues: Sequence[str], now: dt.datetime, external: bool) -> bool:
        job = self.jobs.get(row.job_id, JobRow(row.job_id))
        return (
            row.status == "queued"
            and row.available_at <= now
            and job.enabled
            and job.external == external
            and (not queues or row.queue in queues)
        )

    @staticmethod
    def _claimed(row: Row) -> Claimed:
        return Claimed(
            row.id, row.job_id, row.payload, row.attempt, row.attempts_before_replay,
            row.max_attempts, None,
        )  # fmt: skip

    def set_deadlines(
        self, worker_id: str, deadlines: Mapping[int, dt.datetime], *, now: dt.datetime
    ) -> list[int]:
        with self._lock:
            moved = [rid for rid in deadlines if self._holds_run(rid, worker_id, "executing")]
            for rid in moved:
                self.runs[rid].visible_until = deadlines[rid]
            return moved

    def _holds_run(self, run_id: int, worker_id: str, status: str) -> bool:
        row = self.runs.get(run_id)
        return row is not None and row.status == status and row.claimed_by == worker_id

    def start(self, worker_id: str, runs: Sequence[Claimed], *, now: dt.datetime) -> list[Claimed]:
        with self._lock:
            return common.start(self.alias, runs, lambda ids: self._begin(worker_id, ids, now))

    def _begin(self, worker_id: str, ids: list[int], now: dt.datetime) -> list[tuple]:
        moved = []
        for rid in ids:
            if self._holds_run(rid, worker_id, "dequeued"):
                row = self.runs[rid]
                row.status, row.attempt, row.started_at = "executing", row.attempt + 1, now
                row.heartbeat_at = now
                moved.append((rid, row.attempt, now))
        return moved

    def hold(
        self, worker_id: str, holds: Sequence[Hold], *, now: dt.datetime, begun: bool = False
    ) -> None:
        if begun:  # this backend's claim never begins an attempt
            raise ValueError("hold(begun=True): runs claimed here are never begun")
        with self._lock:
            for held in holds:
                if not self._holds_run(held.run_id, worker_id, "dequeued"):
                    continue
                row = self.runs[held.run_id]
                row.status, row.claimed_by, row.available_at = "queued", "", held.available_at
                row.error_type, row.last_error = held.error_type, held.error
                self._note_hold(row, held.error_type, now)

    def _note_hold(self, row: Row, reason: str, now: dt.datetime) -> None:
        latest = [h for h in self._holds if h[0] == row.id][-1:]
        if not latest or latest[0][1:3] != (reason, row.attempt):
            self._holds.append((row.id, reason, row.attempt, now))

    def hold_began(self, attempts: Mapping[int, int], reason: str) -> dict[int, dt.datetime]:
        began = {}
        for rid, attempt in attempts.items():
            latest = [h for h in self._holds if h[0] == rid][-1:]
            if latest and latest[0][1:3] == (reason, attempt):
                began[rid] = latest[0][3]
        return began

    def waiting(self, *, queues: Sequence[str], now: dt.datetime) -> list[Waiting]:
        raise _no("waiting reasons (the admin's queue view)")

    def unclaim(self, worker_id: str, run_ids: Sequence[int], *, now: dt.datetime) -> int:
        with self._lock:
            mine = [rid for rid in run_ids if self._holds_run(rid, worker_id, "dequeued")]
            for rid in mine:
                self.runs[rid].status, self.runs[rid].claimed_by = "queued", ""
            return len(mine)

    def heartbeat(self, worker_id: str, run_ids: Sequence[int], *, now: dt.datetime) -> int:
        with self._lock:
            mine = [
                rid
                for rid in run_ids
                if self.runs.get(rid) and self.runs[rid].claimed_by == worker_id
                and self.runs[rid].status in ("dequeued", "executing")
            ]  # fmt: skip
            for rid in mine:
                self.runs[rid].heartbeat_at = now
            return len(mine)

    def record(self, batch: RecordBatch) -> Recorded:
        if self.connection_failures:
            self.connection_failures -= 1
            raise OperationalError("server closed the connection unexpectedly")
        if any(str(r.result) in self.refused_results for r in batch.records):
            raise DataError("unsupported Unicode escape sequence")
        if any(r.run_id in self.unreadable_runs for r in batch.records):
            raise RecursionError("maximum recursion depth exceeded while decoding a JSON object")
        with self._lock:  # checked whole before anything moves: all or nothing
            self.writes.append([r.run_id for r in batch.records])
            done = Recorded()
            for rec in batch.records:
                self._record_one(batch.worker_of(rec), rec, done)
            return done

    def _record_one(self, worker_id: str, rec: Record, done: Recorded) -> None:
        row = self.runs.get(rec.run_id)
        held = row is not None and row.status == "executing"
        if not (held and row.claimed_by == worker_id and row.attempt == rec.attempt):
            mine = self._workers.get((rec.run_id, rec.attempt)) == worker_id
            (done.already if mine else done.lost).append(rec.run_id)
            return
        target = RunStatus.CANCELED if row.cancel_requested else rec.transition.target
        row.status, row.claimed_by, row.updated_at = target, "", rec.finished_at
        row.error_type, row.last_error, row.result = rec.error_type, rec.error or "", rec.result
        if rec.available_at is not None:
            row.available_at = rec.available_at
        self.attempts.append((rec.run_id, rec.attempt, rec.outcome))
        self._workers[(rec.run_id, rec.attempt)] = worker_id
        done.moved[rec.run_id] = row.status

    def let_go(self, worker_id: str, run_ids: Sequence[int]) -> list[int]:
        return [
            rid
            for rid in run_ids
            if not self._holds_run(rid, worker_id, "executing") or self.runs[rid].cancel_requested
        ]

    # -- protection: jobs here have no limits, projects no budgets, endpoints no state --

    def enforce_limits(
        self, pending: Sequence[limits.Pending], *, now: dt.datetime
    ) -> list[limits.Held]:
        return []  # its jobs have no concurrency or rate limits: none holds a run

    def reserve_budgets(
        self, pending: Sequence[budgets.Pending], *, now: dt.datetime
    ) -> budgets.Allocation:
        if pending:
            raise _no("budgets")
        return budgets.Allocation()

    def settle_budgets(self, spends: list[budgets.Spend]) -> None:
        if spends:
            raise _no("budgets")

    def crossed_soft_limits(
        self, spends: list[budgets.Spend], *, now: dt.datetime
    ) -> list[budgets.LedgerDay]:
        if spends:
            raise _no("budgets")
        return []

    def release_budget_waiting(self, project_id: int, *, now: dt.datetime) -> int:
        raise _no("budgets")

    def reserve_budgets_for(
        self, source: str, pending: Sequence[budgets.Pending], *, now: dt.datetime
    ) -> budgets.Allocation:
        if pending:
            raise _no("budgets")
        return budgets.Allocation()

    def settle_budgets_for(self, source: str, spends: Sequence[budgets.Spend]) -> int:
        if spends:
            raise _no("budgets")
        return 0

    def stale_reservations(
        self, source: str, *, before: dt.datetime, limit: int
    ) -> list[budgets.Reservation]:
        return []  # it never reserves: none is stale

    def mark_reserved(self, reserved: Mapping[int, Any]) -> None:
        if reserved:
            raise _no("budgets")

    def reservation_fates(self, attempts: Sequence[tuple[int, int]]) -> dict[tuple[int, int], str]:
        if attempts:
            raise _no("budgets")
        return {}

    def load_active_circuits(self) -> dict[str, Circuit]:
        return {}  # results are never folded here (apply_circuit_results): all closed

    def win_circuit_probe(
        self, url: str, *, now: dt.datetime, cooldown: dt.timedelta, lost_before: dt.datetime
    ) -> bool:
        raise _no("circuits")

    def apply_circuit_results(
        self, results: Mapping[str, Sequence[Result]], *, now: dt.datetime, threshold: int
    ) -> tuple[list[Circuit], list[Change]]:
        if results:
            raise _no("circuits")
        return [], []

    def reset_circuits(self, url: str | None, *, now: dt.datetime) -> tuple[int, list[Change]]:
        return 0, []  # none is ever open here

    def load_unwell_endpoints(self) -> dict[str, Health]:
        return {}  # no health is folded here: every endpoint is as well as unknown

    def win_health_probe(self, url: str, *, now: dt.datetime, cooldown: dt.timedelta) -> bool:
        raise _no("endpoint health")

    # -- what people ask for --------------------------------------------------------

    def _move(self, run_id: int, transition: Transition, **updates: Any) -> JobRun:
        """Move one run through ``transition`` if its status allows, writing ``updates``."""
        with self._lock:
            row = self.runs.get(run_id)
            if row is None:
                raise JobRun.DoesNotExist(f"run {run_id} does not exist")
            if row.status not in transition.sources:
                raise InvalidTransition(run_id, row.status, transition)
            row.status = transition.target
            for name, value in updates.items():
                if hasattr(row, name):
                    setattr(row, name, value)
            return JobRun(
                id=row.id, job_id=row.job_id, status=row.status, attempt=row.attempt,
                queue=row.queue, priority=row.priority, claimed_by=row.claimed_by,
            )  # fmt: skip

    def _replay_updates(self, by: str, now: dt.datetime) -> dict[str, Any]:
        return {"available_at": now, "replayed_by": by[:200], "claimed_by": "",
                "cancel_requested": False, "finished_at": None, "updated_at": now}  # fmt: skip

    def replay(self, run_id: int, *, by: str, now: dt.datetime, payload: Any = ...) -> JobRun:
        with self._lock:
            row = self.runs.get(run_id)
            attempt = row.attempt if row is not None else 0
            moved = self._move(run_id, Transition.REPLAY, **self._replay_updates(by, now))
            row = self.runs[run_id]
            row.attempts_before_replay, row.replay_count = attempt, row.replay_count + 1
            if payload is not ...:
                row.payload = payload
            return moved

    def cancel(self, run_id: int, *, now: dt.datetime) -> JobRun:
        return self._move(run_id, Transition.CANCEL, finished_at=now, claimed_by="", updated_at=now)

    def drop(self, run_id: int, *, now: dt.datetime) -> JobRun:
        return self._move(run_id, Transition.DROP, finished_at=now, updated_at=now)

    def replay_many(self, run_ids: Sequence[int], *, by: str, now: dt.datetime) -> int:
        with self._lock:
            moved = 0
            for rid in run_ids:
                row = self.runs.get(rid)
                if row is None or row.status not in Transition.REPLAY.sources:
                    continue
                row.status, row.attempts_before_replay = Transition.REPLAY.target, row.attempt
                row.replay_count += 1
                for name, value in self._replay_updates(by, now).items():
                    setattr(row, name, value)
                moved += 1
            return moved

    def request_cancel(self, run_id: int, *, now: dt.datetime) -> bool:
        with self._lock:
            row = self.runs.get(run_id)
            if row is None or row.status != "executing":
                return False
            row.cancel_requested, row.updated_at = True, now
            return True

    # -- the reaper -----------------------------------------------------------------

    # -- workflows, the webhook outbox, health sampled outside a record ---------------

    def begin_workflow_run(
        self, workflow: Workflow, payload: Any, key: str | None, *, now: dt.datetime
    ) -> tuple[WorkflowRun, Advanced]:
        raise _no("workflows")

    def advance_workflows(self, run_ids: Sequence[int], *, now: dt.datetime) -> Advanced:
        return Advanced()  # no run here is a workflow's step: nothing moves on

    def settle_workflow_runs(self, wr_ids: Sequence[int], *, now: dt.datetime) -> Advanced:
        raise _no("workflows")

    def cancel_workflow_run(self, wr_id: int, *, now: dt.datetime) -> tuple[Advanced, list[int]]:
        raise _no("workflows")

    def fail_stalled_workflow_runs(self, *, now: dt.datetime, stale_after: float) -> Advanced:
        return Advanced()  # no workflow run here, none stalls

    def claim_deliveries(self, *, limit: int, now: dt.datetime, lease: dt.timedelta) -> list:
        return []  # no run here owes a webhook

    def settle_deliveries(self, settled: Sequence[Any]) -> None:
        raise _no("the webhook outbox")

    def hold_deliveries(self, pks: Sequence[int], *, until: dt.datetime) -> None:
        raise _no("the webhook outbox")

    def redeliver(self, pks: Sequence[int], *, now: dt.datetime) -> int:
        raise _no("the webhook outbox")

    def fold_health(self, samples: Sequence[Any]) -> None:
        raise _no("endpoint health")

    def forget_health(self, urls: Sequence[str]) -> int:
        return 0  # no health is folded here

    def stale_runs(
        self, now: dt.datetime, *, stale_after: float, waiting_stale_after: float, limit: int
    ) -> StaleRuns:
        raise _no("reaper (heartbeats and visibility deadlines live in the database's rows)")

    def rescue(
        self,
        rescues: Sequence[Rescue],
        *,
        unreadable: Mapping[int, str],
        now: dt.datetime,
        stale_after: float,
        isolate: bool = False,
    ) -> list[Rescued]:
        raise _no("reaper (heartbeats and visibility deadlines live in the database's rows)")

    def set_external_ids(self, ids: Mapping[int, uuid.UUID]) -> list[int]:
        raise _no("external workers' ids (OJS)")

    def set_external_retry_delay(self, run_id: int, delay_ms: int) -> bool:
        raise _no("external workers' retry delays (OJS)")

    def set_external_envelopes(self, envelopes: Sequence[Envelope]) -> None:
        raise _no("external workers' envelopes (OJS)")

    def set_external_progress(
        self, run_id: int, worker: str, attempt: int, progress: dict[str, Any]
    ) -> dict[str, Any] | None:
        raise _no("external workers' progress (OJS)")

    # -- making runs ----------------------------------------------------------------

    def insert_one(self, run: JobRun) -> JobRun:
        with self._lock:
            key = run.idempotency_key
            same = [r for r in self.runs.values() if key and r.idempotency_key == key]
            if same:
                run.id = same[0].id
                return run
            run.id = self.add_run(
                run.job_id, status=run.status or "queued", priority=run.priority or 0,
                queue=run.queue or "default", available_at=run.available_at or EPOCH,
                payload=run.payload, idempotency_key=key,
            )  # fmt: skip
            return run

    def insert_by_name(self, name: str, payload: Any, text: str, **fields: Any) -> JobRun | None:
        return None  # not done here: the caller inserts the run itself (insert_one)

    def insert_many(
        self,
        template: JobRun,
        payloads: Sequence[Any],
        texts: Sequence[str],
        keys: Sequence[str] | None,
        batch_size: int,
    ) -> tuple[list[JobRun], set[int]]:
        made, new = [], set()
        for i, payload in enumerate(payloads):
            key = keys[i] if keys else None
            before = {r.id for r in self.runs.values()}
            run = self.insert_one(
                JobRun(job_id=template.job_id, queue=template.queue, priority=template.priority,
                       available_at=template.available_at, payload=payload, idempotency_key=key)
            )  # fmt: skip
            made.append(run)
            if run.id not in before:
                new.add(run.id)
        return made, (new if keys else set())

    # -- duties and views -----------------------------------------------------------

    @contextlib.contextmanager
    def lead(self, duty: str) -> Iterator[bool]:
        with self._lock:  # one process: every caller leads, one at a time
            yield True

    def table_estimate(self, model: type) -> int | None:
        return None

    def query_estimate(self, rows: QuerySet) -> int | None:
        return None

    def dead_run_rows(self) -> int | None:
        return None

    def vacuum_runs(self) -> None:
        """Nothing dies here to vacuum."""

    def prepare_history(self, now: dt.datetime) -> list[str]:
        return []

    def history_days(self, before: dt.datetime, counted: bool = False) -> list[HistoryDay]:
        return []

    def detach_history_day(self, day: HistoryDay) -> bool:
        raise _no("history days")

    def finish_history_day(self, day: HistoryDay) -> int:
        raise _no("history days")

    def prune_runs(self, rows: Any) -> int:
        raise _no("retention (the pruner selects runs by a query of the database)")


#: The statuses a run made for a test has had an attempt in.
ATTEMPTED = frozenset(
    {"executing", "completed", "failed", "dead_letter", "discarded", "system_failed"}
)


class MemoryRows:
    """The conformance suite's rows on a MemoryStorage (tests/conformance/rows.py's interface)."""

    def __init__(self, storage: MemoryStorage) -> None:
        self.storage = storage

    def job(self, **values: Any) -> int:
        return self.storage.add_job(**values)

    def run(self, job: int | None = None, **values: Any) -> int:
        values.setdefault("available_at", dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1))
        if values.get("status", "queued") in ATTEMPTED:  # as tests/integration/factories
            values.setdefault("attempt", 1)
        return self.storage.add_run(job or self.job(), **values)

    def value(self, run_id: int, name: str) -> Any:
        return getattr(self.storage.runs[run_id], name)

    def update(self, run_id: int, **values: Any) -> None:
        known = {f.name for f in fields(Row)}
        for name, value in values.items():
            assert name in known, f"MemoryStorage rows have no {name!r}"
            setattr(self.storage.runs[run_id], name, value)

    def attempts(self, run_id: int) -> list[str]:
        return [outcome for rid, _, outcome in sorted(self.storage.attempts) if rid == run_id]


NOW = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)


def record(run_id: int, *, attempt: int = 1, result: object = None, **fields) -> Record:
    """A record of a successful attempt (unless ``fields`` say otherwise)."""
    values = {"transition": Transition.COMPLETE, "outcome": "succeeded", **fields}
    return Record(
        run_id, attempt, values.pop("transition"), NOW, NOW, 1, values.pop("outcome"),
        result=result, **values,
    )  # fmt: skip
