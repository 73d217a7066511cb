"""The parts of a record: what else changes with a batch of ended attempts, besides the runs.

A state change is only a state change (STYLE: River's JobSetStateIfRunningMany):
the record moves the runs and appends their attempts; the per-minute rollup,
endpoint health, the budget ledger, the webhook outbox and the circuits each add
their own part. On PostgreSQL a
part is a CTE of the record's one statement (``record.<name>`` in
``postgres/queries.sql``, fed by :meth:`RecordPart.params`); on other databases
it is a step in the record's transaction (:meth:`RecordPart.apply`). Both read
the same batch, and the moved runs (``u`` in SQL, ``moved`` here).

A new part (the workflow release, the webhook outbox) is a class here, a CTE in
queries.sql, and an entry in :data:`RECORD_PARTS`; the record itself is not
edited.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol

from django.db import connections
from django.db.models import F, Q, Value
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone

from django_strait.conf import strait_settings
from django_strait.dispatch import events
from django_strait.models import (
    BudgetLedger,
    EndpointHealth,
    JobPresetRecommendation,
    JobRun,
    RunAttempt,
)
from django_strait.rules.presets import RECOMMENDATION_TTL_SECS, Chain
from django_strait.rules.resilience import budgets, health
from django_strait.rules.resilience.policy import Change, Circuit, Result
from django_strait.rules.states import TERMINAL
from django_strait.storage import circuit_rows, webhooks, workflows
from django_strait.storage.rows import read
from django_strait.storage.values import Record, RecordBatch, Recorded

ZERO = Decimal(0)


class RecordPart(Protocol):
    """One thing that changes with every record, beside the runs and their attempts."""

    #: Its CTE in queries.sql is ``record.<name>``.
    name: str

    def wanted(self, batch: RecordBatch) -> bool:
        """Whether ``batch`` gives it anything to write (else PostgreSQL leaves its CTE out)."""
        ...

    def params(self, batch: RecordBatch) -> dict[str, Any]:
        """Return the named parameters of its CTE for ``batch`` (PostgreSQL)."""
        ...

    def apply(self, batch: RecordBatch, moved: Mapping[int, str], alias: str) -> object:
        """Apply it with the ORM, inside the record's transaction (other databases); what
        it returns, if anything, goes into the record's answer (:func:`note`)."""
        ...


class Rollup:
    """Per-minute counts of finished attempts by job and the status they left the run in."""

    name = "rollup"

    def wanted(self, batch: RecordBatch) -> bool:
        return True

    def params(self, batch: RecordBatch) -> dict[str, Any]:
        return {}  # it reads the record's own v and u

    def apply(self, batch: RecordBatch, moved: Mapping[int, str], alias: str) -> None:
        groups: dict[tuple[dt.datetime, int, str], list[int]] = {}
        for rec in batch.records:
            if rec.run_id in moved:
                minute = rec.finished_at.replace(second=0, microsecond=0)
                key = (minute, rec.job_id, moved[rec.run_id])
                groups.setdefault(key, []).append(rec.duration_ms)
        connection = connections[alias]
        with connection.cursor() as cursor:
            # In key order, as on PostgreSQL: two workers' records never deadlock on them.
            for (minute, job_id, status), durations in sorted(groups.items()):
                stamp = connection.ops.adapt_datetimefield_value(minute)
                cursor.execute(
                    _ROLLUP_UPSERT, [stamp, job_id, status, len(durations), sum(durations)]
                )


# Portable upsert (SQLite >= 3.24, PostgreSQL): the ORM has no "add to a counter or insert".
# Saturating, as record.rollup: a count at its column's limit must not fail the record.
_ROLLUP_UPSERT = """
INSERT INTO django_strait_runrollup AS t (minute, job_id, status, count, total_duration_ms)
VALUES (%s, %s, %s, %s, %s)
ON CONFLICT (minute, job_id, status) DO UPDATE
SET count = CASE WHEN t.count > 2147483647 - excluded.count THEN 2147483647
                 ELSE t.count + excluded.count END,
    total_duration_ms = CASE WHEN t.total_duration_ms > 9223372036854775807 - excluded.total_duration_ms
                             THEN 9223372036854775807
                             ELSE t.total_duration_ms + excluded.total_duration_ms END
"""


class Health:
    """Each endpoint's EWMAs moved by the batch's sample (``resilience.health.fold``)."""

    name = "health"

    def wanted(self, batch: RecordBatch) -> bool:
        return bool(batch.health)

    def params(self, batch: RecordBatch) -> dict[str, Any]:
        samples = batch.health
        return {
            "health_url": [s.endpoint_url for s in samples],
            "health_n": [s.count for s in samples],
            "health_keep": [s.keep for s in samples],
            "health_success": [s.success for s in samples],
            "health_failure": [s.failure for s in samples],
            "health_p95": [health.clip(s.p95_ms) for s in samples],
            "health_timeout": [s.timeout_ms for s in samples],
        }

    def apply(self, batch: RecordBatch, moved: Mapping[int, str], alias: str) -> None:
        rows = EndpointHealth.objects.using(alias)
        # A new endpoint starts from the fresh EWMAs, its latency at the batch's own p95;
        # then every row folds alike, locked in URL order (two workers never deadlock).
        by_url = {s.endpoint_url: s for s in batch.health}
        rows.bulk_create([_fresh(by_url[url]) for url in sorted(by_url)], ignore_conflicts=True)
        locked = rows.select_for_update().filter(endpoint_url__in=list(by_url)).only(*_FOLDED)
        for row in locked.order_by("endpoint_url"):
            s = by_url[row.endpoint_url]
            row.success_rate = health.fold(row.success_rate, s.success, s.keep)
            row.failure_rate = health.fold(row.failure_rate, s.failure, s.keep)
            row.latency_p95_ms = health.fold(row.latency_p95_ms, s.p95_ms, s.keep)
            row.timeout_ms, row.samples = s.timeout_ms, row.samples + s.count
            row.save(
                using=alias,
                update_fields=["success_rate", "failure_rate", "latency_p95_ms", "timeout_ms",
                               "samples", "updated_at"],
            )  # fmt: skip


#: The columns the fold reads: a probe time that cannot be read does not stop it.
_FOLDED = ("endpoint_url", "success_rate", "failure_rate", "latency_p95_ms", "samples")


def _fresh(sample: health.Sample) -> EndpointHealth:
    return EndpointHealth(
        endpoint_url=sample.endpoint_url,
        success_rate=health.FRESH_SUCCESS_RATE,
        failure_rate=health.FRESH_FAILURE_RATE,
        latency_p95_ms=health.clip(sample.p95_ms),
        timeout_ms=sample.timeout_ms,
        samples=0,
    )


class Ledger:
    """Each budget ledger row: the attempts' reservations released, their costs spent."""

    name = "ledger"

    def wanted(self, batch: RecordBatch) -> bool:
        return bool(batch.spends)

    def params(self, batch: RecordBatch) -> dict[str, Any]:
        totals = budgets.by_ledger(batch.spends)
        return {
            "ledger_project": [project_id for project_id, _ in totals],
            "ledger_day": [day for _, day in totals],
            "ledger_released": [released for released, _ in totals.values()],
            "ledger_spent": [spent for _, spent in totals.values()],
        }

    def apply(self, batch: RecordBatch, moved: Mapping[int, str], alias: str) -> None:
        settle_ledgers(batch.spends, alias)


def settle_ledgers(spends: list[budgets.Spend], alias: str) -> None:
    """Turn reservations into what the attempts cost, on the ledger rows (ORM)."""
    # by_ledger is in (project, day) order: the rows are locked in it, as on PostgreSQL.
    for (project_id, day), (released, spent) in budgets.by_ledger(spends).items():
        BudgetLedger.objects.using(alias).filter(project_id=project_id, day=day).update(
            reserved=Greatest(F("reserved") - released, Value(ZERO)),
            spent=F("spent") + spent,
            updated_at=timezone.now(),
        )


def settle_runs(spends: list[budgets.Spend], alias: str) -> None:
    """Note on each run what its attempt cost, ending its reservation (ORM)."""
    by_cost: dict[Decimal, list[int]] = {}
    for s in spends:
        by_cost.setdefault(s.cost, []).append(s.run_id)
    for cost, run_ids in by_cost.items():
        JobRun.objects.using(alias).filter(pk__in=run_ids).update(
            reserved_cost=None, actual_cost=Coalesce(F("actual_cost"), Value(ZERO)) + cost
        )


class Circuits:
    """The batch's HTTP results folded into their endpoints' circuits, in the record's
    transaction: a circuit opens with the results that open it, never a write later.

    Only a batch whose results change a circuit carries it (``RecordBatch.circuits``,
    which ``CircuitBreaker.worth`` fills): successes while every circuit is quiet, the
    hot path, write nothing. PostgreSQL returns the circuits as written with the
    moved runs (``record.circuits.returned``); the ORM folds them row by row.
    """

    name = "circuits"

    def wanted(self, batch: RecordBatch) -> bool:
        return bool(batch.circuits)

    def params(self, batch: RecordBatch) -> dict[str, Any]:
        urls = sorted(batch.circuits)  # the rows are locked in URL order
        summaries = [_summary(batch.circuits[url]) for url in urls]
        return {
            "circuit_url": urls,
            "circuit_reset": [reset for reset, _, _ in summaries],
            "circuit_failed": [failed for _, failed, _ in summaries],
            "circuit_tail": [tail for _, _, tail in summaries],
            "circuit_now": timezone.now(),
            "circuit_threshold": strait_settings.CIRCUIT_FAILURE_THRESHOLD,
        }

    def apply(self, batch: RecordBatch, moved: Mapping[int, str], alias: str) -> Folded:
        return Folded(
            *circuit_rows.apply_circuit_results(
                alias, batch.circuits, timezone.now(), strait_settings.CIRCUIT_FAILURE_THRESHOLD
            )
        )

    def returned(self, rows: list[str]) -> Folded:
        """Read the circuits the statement wrote (``record.circuits.returned``, as JSON)."""
        folded = Folded([], [])
        for text in rows:
            url, state, failures, *times, was = json.loads(text)
            circuit = Circuit(url, state, failures, *(_at(t) for t in times))
            folded.written.append(circuit)
            if state != was:
                folded.changes.append(Change(circuit, was))
        return folded


@dataclass(slots=True)
class Folded:
    """The circuits a record wrote, as written, and those whose state changed."""

    written: list[Circuit]
    changes: list[Change]


def _summary(results: Sequence[Result]) -> tuple[bool, bool, int]:
    """An endpoint's results as the fold needs them: whether a success came (it closes
    the circuit and clears its failures), whether any failure came (the time of the
    last one), and the failures after the last success (all of them without one)."""
    last_success = max((i for i, r in enumerate(results) if r is Result.SUCCESS), default=-1)
    tail = sum(r is Result.FAILURE for r in results[last_success + 1 :])
    return last_success >= 0, Result.FAILURE in results, tail


def _at(text: str | None) -> dt.datetime | None:
    return dt.datetime.fromisoformat(text) if text is not None else None


def note(done: Recorded, result: object) -> None:
    """Add what a part's ``apply`` returned to the record's answer: what its steps changed
    of their workflow runs, or the circuits it wrote."""
    if isinstance(result, Folded):
        done.circuits += result.written
        done.circuit_changes += result.changes
    elif isinstance(result, workflows.Advanced):
        done.workflows.add(result)


EVENT_FOR_STATUS = events.RUN_EVENT_FOR_STATUS
EVENTS = list(EVENT_FOR_STATUS.values())


class Webhooks:
    """The completion webhooks owed for the runs the batch ended (the outbox, docs/webhooks.md).

    Written with the record, so a committed result always has its deliveries and
    a rolled-back one never does; workers deliver them later (``worker.webhooks``).
    """

    name = "webhooks"

    def wanted(self, batch: RecordBatch) -> bool:
        # Whether a job wants webhooks is read in the statement, from the job rows.
        return True

    def params(self, batch: RecordBatch) -> dict[str, Any]:
        return {"webhook_status": list(EVENT_FOR_STATUS), "webhook_event": EVENTS}

    def apply(self, batch: RecordBatch, moved: Mapping[int, str], alias: str) -> None:
        ended = [run_id for run_id, status in moved.items() if status in TERMINAL]
        webhooks.notify_runs(alias, ended, timezone.now())


class Workflows:
    """The DAG moves on when a step's run moved: children start, dependents are skipped.

    Portable (``storage.workflows.advance``) on every backend, each writing its
    statements its own way (``statements``): PostgreSQL runs it in the record's
    transaction after the record's statement, and only for a batch with workflow
    steps in it (``steps``), so plain batches cost nothing.
    """

    name = "workflow"

    def __init__(self, statements: workflows.Statements) -> None:
        self.statements = statements

    def wanted(self, batch: RecordBatch) -> bool:
        """Whether the batch has workflow steps (else PostgreSQL skips the part)."""
        return any(r.step_run_id for r in batch.records)

    def steps(self, batch: RecordBatch, moved: Mapping[int, str]) -> list[int]:
        """The batch's moved runs that are workflow steps."""
        return [r.run_id for r in batch.records if r.step_run_id and r.run_id in moved]

    def params(self, batch: RecordBatch) -> dict[str, Any]:
        return {}

    def apply(
        self, batch: RecordBatch, moved: Mapping[int, str], alias: str
    ) -> workflows.Advanced | None:
        """Move the DAGs on; return what changed (the worker's deliverer wakes for their
        webhooks only when a workflow run ended, not after every batch of steps)."""
        ids = self.steps(batch, moved)
        if not ids:
            return None
        move = workflows.Move(workflows.Db(alias, self.statements), timezone.now())
        known = [r for r in batch.records if r.step and r.run_id in moved]
        if len(known) == len(ids):  # the worker's record: the steps' starts loaded them
            ended = [(r.step_run_id, *r.step, moved[r.run_id]) for r in known]
            return workflows.advance_recorded(move, ended)
        return workflows.advance(move, ids)


class Presets:
    """Process runs (docs/process-execution.md): each attempt's preset, the run's, and after an OOM kill the
    budget it did not spend and the preset the job's future runs start at.

    Only batches with process runs carry it, as a step after the record's statement in
    its transaction: thread runs, the hot path, write nothing more. A recommendation
    is raised, or renewed for another 24 h, never lowered while it lasts: two runs
    killed at different presets leave the larger.
    """

    name = "presets"

    def wanted(self, batch: RecordBatch) -> bool:
        return any(r.preset for r in batch.records)

    def params(self, batch: RecordBatch) -> dict[str, Any]:
        return {}

    def apply(self, batch: RecordBatch, moved: Mapping[int, str], alias: str) -> None:
        done = [r for r in batch.records if r.preset and r.run_id in moved]
        if not done:
            return
        _note_presets(alias, done)
        chain = strait_settings.PRESETS
        wanted: dict[int, Record] = {}
        for rec in done:
            before = wanted.get(rec.job_id)
            if rec.recommend and (
                before is None or chain.rank(rec.recommend) >= chain.rank(before.recommend)
            ):
                wanted[rec.job_id] = rec
        for job_id in sorted(wanted):  # job order: two workers never deadlock
            _recommend(alias, job_id, wanted[job_id], chain)


def _note_presets(alias: str, done: list[Record]) -> None:
    """Write each attempt's preset and its run's; an OOM retried at the next preset is free."""
    by_run: dict[tuple[str, bool], list[int]] = {}
    by_attempt: dict[str, Q] = {}
    for rec in done:
        by_run.setdefault((rec.run_preset, rec.free_attempt), []).append(rec.run_id)
        by_attempt[rec.preset] = by_attempt.get(rec.preset, Q(pk__in=[])) | Q(
            run_id=rec.run_id, number=rec.attempt
        )
    runs = JobRun.objects.using(alias)
    for (preset, free), ids in by_run.items():
        extra = {"attempts_before_replay": F("attempts_before_replay") + 1} if free else {}
        runs.filter(pk__in=ids).update(preset=preset, **extra)
    attempts = RunAttempt.objects.using(alias)
    for preset, which in by_attempt.items():
        attempts.filter(which).update(preset=preset)


def _recommend(alias: str, job_id: int, rec: Record, chain: Chain) -> None:
    rows = JobPresetRecommendation.objects.using(alias)
    expires = rec.finished_at + dt.timedelta(seconds=RECOMMENDATION_TTL_SECS)
    fields = {"preset": rec.recommend, "expires_at": expires, "updated_at": rec.finished_at}
    rows.bulk_create([JobPresetRecommendation(job_id=job_id, **fields)], ignore_conflicts=True)
    # A row that cannot be read (an expiry of 'infinity') is not lasting: it is rewritten.
    found = read(rows.select_for_update().filter(job_id=job_id).only("preset", "expires_at"))
    lasting = any(
        row.expires_at > rec.finished_at and chain.rank(row.preset) > chain.rank(rec.recommend)
        for row in found.rows
    )
    if not lasting:
        rows.filter(job_id=job_id).update(**fields)


#: The parts every record's statement carries, in order.
RECORD_PARTS: tuple[RecordPart, ...] = (Rollup(), Health(), Ledger(), Webhooks(), Circuits())


def following_parts(statements: workflows.Statements) -> tuple[Workflows | Presets, ...]:
    """The parts that follow the statement in its transaction, on every backend (its workflow
    statements written the backend's way)."""
    return (Workflows(statements), Presets())
