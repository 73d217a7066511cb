"""The verbs both backends answer alike, one mixin per concern of the Storage Protocol.

Each verb here calls the plain function of ``storage.common`` with the backend's
alias: the ORM and PostgreSQL backends are siblings that list these mixins
beside their own statements (``storage.orm``, ``storage.postgres``), and neither
subclasses the other. A mixin is no backend: it knows only ``self.alias`` (and,
for workflows, ``self.workflow_statements``).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from django.db.models import QuerySet

from django_strait.models import JobRun, Workflow, WorkflowRun
from django_strait.rules.resilience import budgets
from django_strait.rules.resilience.health import Health, Sample
from django_strait.rules.resilience.policy import Change, Circuit, Result
from django_strait.storage import common, webhooks
from django_strait.storage import workflows as workflow_moves
from django_strait.storage.parts import RECORD_PARTS, RecordPart
from django_strait.storage.values import Advanced, Envelope, Rescue, Rescued, StaleRuns, Waiting


class Backend:
    """What every backend is made of: its database alias, its record parts, its transactions."""

    def __init__(self, alias: str, parts: Sequence[RecordPart] = RECORD_PARTS) -> None:
        self.alias = alias
        self.parts = tuple(parts)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.alias!r}>"

    def atomic(self) -> Any:
        """A transaction (or a savepoint inside one) on this database."""
        return common.atomic(self.alias)

    def claim_transaction(self) -> Any:
        """The transaction a claim, its gate and its start share."""
        return self.atomic()


class SharedRunVerbs:
    """The worker's and external workers' verbs no backend does better than the ORM."""

    alias: str

    def set_deadlines(
        self, worker_id: str, deadlines: Mapping[int, dt.datetime], *, now: dt.datetime
    ) -> list[int]:
        """Set the deadlines of executing external runs ``worker_id`` holds; return those moved."""
        return common.set_deadlines(self.alias, worker_id, deadlines, now)

    def hold_began(self, attempts: Mapping[int, int], reason: str) -> dict[int, dt.datetime]:
        """When each run's current hold period for ``reason`` began (see ``Storage``)."""
        return common.hold_began(self.alias, attempts, reason)

    def waiting(self, *, queues: Sequence[str], now: dt.datetime) -> list[Waiting]:
        """Group the queued runs of ``queues`` that a claim at ``now`` cannot take, by why."""
        return common.waiting(self.alias, queues, now)

    def unclaim(self, worker_id: str, run_ids: Sequence[int], *, now: dt.datetime) -> int:
        """Put claimed-but-unstarted runs back to queued; no attempt is spent."""
        return common.unclaim(self.alias, worker_id, run_ids, now)

    def heartbeat(self, worker_id: str, run_ids: Sequence[int], *, now: dt.datetime) -> int:
        """Mark the runs this worker holds as alive."""
        return common.heartbeat(self.alias, worker_id, run_ids, now)

    def let_go(self, worker_id: str, run_ids: Sequence[int]) -> list[int]:
        """Return the runs among ``run_ids`` not executing under this worker, or asked to cancel."""
        return common.let_go(self.alias, worker_id, run_ids)


class SharedProtectionVerbs:
    """Budgets outside a claim, circuits and endpoint health."""

    alias: str

    def settle_budgets(self, spends: list[budgets.Spend]) -> None:
        """Turn reservations into what attempts cost, on ledgers and runs (outside a record)."""
        common.settle_budgets(self.alias, spends)

    def crossed_soft_limits(
        self, spends: list[budgets.Spend], *, now: dt.datetime
    ) -> list[budgets.LedgerDay]:
        """After a record: the days whose spending crossed their soft limit, marked so once."""
        return common.crossed_soft_limits(self.alias, spends, now)

    def release_budget_waiting(self, project_id: int, *, now: dt.datetime) -> int:
        """Make the runs waiting for a project's budget due now."""
        return common.release_budget_waiting(self.alias, project_id, now)

    # Budgets over several databases: the first three on the control database's
    # backend (``source`` names the runs' alias), the last two on the runs' own.

    def reserve_budgets_for(
        self, source: str, pending: Sequence[budgets.Pending], *, now: dt.datetime
    ) -> budgets.Allocation:
        """Reserve for ``source``'s claimed runs here, in a transaction of its own."""
        return common.reserve_budgets_for(self.alias, source, pending, now)

    def settle_budgets_for(self, source: str, spends: Sequence[budgets.Spend]) -> int:
        """Close ``source``'s reservations here, each exactly once; return how many."""
        return common.settle_budgets_for(self.alias, source, spends)

    def stale_reservations(
        self, source: str, *, before: dt.datetime, limit: int
    ) -> list[budgets.Reservation]:
        """``source``'s reservations here made before ``before``, oldest first."""
        return common.stale_reservations(self.alias, source, before, limit)

    def mark_reserved(self, reserved: Mapping[int, Decimal]) -> None:
        """Note on claimed runs what the control database reserved for them."""
        common.mark_reserved(self.alias, reserved)

    def reservation_fates(self, attempts: Sequence[tuple[int, int]]) -> dict[tuple[int, int], str]:
        """What became of each (run, attempt): ``budgets.Fate``; a run a claim holds is left out."""
        return common.reservation_fates(self.alias, attempts)

    def load_active_circuits(self) -> dict[str, Circuit]:
        """Return the circuits that are open, half-open, or closed with failures counted."""
        return common.load_active_circuits(self.alias)

    def win_circuit_probe(
        self, url: str, *, now: dt.datetime, cooldown: dt.timedelta, lost_before: dt.datetime
    ) -> bool:
        """Take the single half-open probe of ``url``; True if this call won it."""
        return common.win_circuit_probe(self.alias, url, now, cooldown, lost_before)

    def apply_circuit_results(
        self, results: Mapping[str, Sequence[Result]], *, now: dt.datetime, threshold: int
    ) -> tuple[list[Circuit], list[Change]]:
        """Fold each endpoint's results into its circuit; return the circuits and the changes."""
        return common.apply_circuit_results(self.alias, results, now, threshold)

    def reset_circuits(self, url: str | None, *, now: dt.datetime) -> tuple[int, list[Change]]:
        """Close one circuit (all of them when ``url`` is None); return how many changed, and how."""
        return common.reset_circuits(self.alias, url, now)

    def load_unwell_endpoints(self) -> dict[str, Health]:
        """Return the endpoints that are degraded or unhealthy."""
        return common.load_unwell_endpoints(self.alias)

    def win_health_probe(self, url: str, *, now: dt.datetime, cooldown: dt.timedelta) -> bool:
        """Take the one probe of an unhealthy endpoint this cooldown; True if this call won it."""
        return common.win_health_probe(self.alias, url, now, cooldown)


class SharedWorkflowVerbs:
    """Workflows (docs/workflows.md): each applies what ``dag`` decided, written with the
    backend's own ``workflow_statements``."""

    alias: str
    #: How the backend's workflow statements write id lists (``storage.workflows.Statements``).
    workflow_statements: workflow_moves.Statements

    def _workflow_db(self) -> workflow_moves.Db:
        return workflow_moves.Db(self.alias, self.workflow_statements)

    def begin_workflow_run(
        self, workflow: Workflow, payload: Any, key: str | None, *, now: dt.datetime
    ) -> tuple[WorkflowRun, Advanced]:
        """Insert a run of ``workflow`` with its step runs, its root steps started; atomically."""
        return common.begin_workflow_run(self._workflow_db(), workflow, payload, key, now)

    def advance_workflows(self, run_ids: Sequence[int], *, now: dt.datetime) -> Advanced:
        """Move on the workflow runs of the steps whose runs are ``run_ids``."""
        return common.advance_workflows(self._workflow_db(), run_ids, now)

    def settle_workflow_runs(self, wr_ids: Sequence[int], *, now: dt.datetime) -> Advanced:
        """Settle whole workflow runs anew, every step read (after a redefinition)."""
        return common.settle_workflow_runs(self._workflow_db(), wr_ids, now)

    def cancel_workflow_run(self, wr_id: int, *, now: dt.datetime) -> tuple[Advanced, list[int]]:
        """Cancel a moving workflow run and its waiting steps; return the change and its live runs."""
        return common.cancel_workflow_run(self._workflow_db(), wr_id, now)

    def fail_stalled_workflow_runs(self, *, now: dt.datetime, stale_after: float) -> Advanced:
        """Fail the running workflow runs in which nothing progressed for ``stale_after`` s."""
        return common.fail_stalled_workflow_runs(self._workflow_db(), now, stale_after)


class SharedOutboxVerbs:
    """The webhook outbox (docs/webhooks.md), and the health its deliveries sample."""

    alias: str

    def claim_deliveries(
        self, *, limit: int, now: dt.datetime, lease: dt.timedelta
    ) -> list[webhooks.Due]:
        """Lease up to ``limit`` due deliveries, oldest due first; skip rows held elsewhere."""
        return common.claim_deliveries(self.alias, limit, now, lease)

    def settle_deliveries(self, settled: Sequence[webhooks.Settled]) -> None:
        """Write what became of claimed deliveries (only those still pending move)."""
        common.settle_deliveries(self.alias, settled)

    def hold_deliveries(self, pks: Sequence[int], *, until: dt.datetime) -> None:
        """Put claimed deliveries back until ``until``, spending no attempt."""
        common.hold_deliveries(self.alias, pks, until)

    def redeliver(self, pks: Sequence[int], *, now: dt.datetime) -> int:
        """Make deliveries due now with a fresh attempt budget; return how many."""
        return common.redeliver(self.alias, pks, now)

    def fold_health(self, samples: Sequence[Sample]) -> None:
        """Fold answers sampled outside a record (webhook deliveries) into endpoint health."""
        common.fold_health(self.alias, samples)

    def forget_health(self, urls: Sequence[str]) -> int:
        """Forget the health scores of ``urls``; return how many were forgotten."""
        return common.forget_health(self.alias, urls)


class SharedDecidedVerbs:
    """Decided transitions: people's, the reaper's, external workers'; and the pruner's."""

    alias: str

    def replay(self, run_id: int, *, by: str, now: dt.datetime, payload: Any = ...) -> JobRun:
        """Queue a replayable run again, its budget reset; raise InvalidTransition else."""
        return common.replay(self.alias, run_id, by, now, payload)

    def replay_many(self, run_ids: Sequence[int], *, by: str, now: dt.datetime) -> int:
        """Replay the replayable runs among ``run_ids`` in one statement; return how many moved."""
        return common.replay_many(self.alias, run_ids, by, now)

    def cancel(self, run_id: int, *, now: dt.datetime) -> JobRun:
        """Cancel a run that may be canceled now; raise InvalidTransition else."""
        return common.cancel(self.alias, run_id, now)

    def drop(self, run_id: int, *, now: dt.datetime) -> JobRun:
        """Discard a run no worker holds; raise InvalidTransition else."""
        return common.drop(self.alias, run_id, now)

    def request_cancel(self, run_id: int, *, now: dt.datetime) -> bool:
        """Flag an executing run to be canceled when its attempt returns."""
        return common.request_cancel(self.alias, run_id, now)

    def stale_runs(
        self, now: dt.datetime, *, stale_after: float, waiting_stale_after: float, limit: int
    ) -> StaleRuns:
        """Find and lock up to ``limit`` stale runs; call in the transaction that rescues them."""
        return common.stale_runs(self.alias, now, stale_after, waiting_stale_after, limit)

    def rescue(
        self,
        rescues: Sequence[Rescue],
        *,
        unreadable: Mapping[int, str],
        now: dt.datetime,
        stale_after: float,
        isolate: bool = False,
    ) -> list[Rescued]:
        """Apply decided rescues and dead-letter unreadable stale runs; return the rescued."""
        return common.rescue_runs(self.alias, rescues, unreadable, now, stale_after, isolate)

    def set_external_ids(self, ids: Mapping[int, uuid.UUID]) -> list[int]:
        """Give runs without an OJS id theirs; return those that took it."""
        return common.set_external_ids(self.alias, ids)

    def set_external_retry_delay(self, run_id: int, delay_ms: int) -> bool:
        """Note the delay of a nacked run's retry in its OJS envelope."""
        return common.set_external_retry_delay(self.alias, run_id, delay_ms)

    def set_external_progress(
        self, run_id: int, worker: str, attempt: int, progress: dict[str, Any]
    ) -> dict[str, Any] | None:
        """Keep a worker's progress on the attempt it holds (OJS ext-progress)."""
        return common.set_external_progress(self.alias, run_id, worker, attempt, progress)

    def set_external_envelopes(self, envelopes: Sequence[Envelope]) -> None:
        """Give a batch's new runs their OJS ids, envelopes and due times."""
        common.set_external_envelopes(self.alias, envelopes)

    def insert_one(self, run: JobRun) -> JobRun:
        """Insert a run (or, for a used idempotency key, return the run that holds it)."""
        return common.insert_one(self.alias, run)

    def prune_runs(self, rows: QuerySet) -> int:
        """Delete the finished runs ``rows`` selects, their attempts and holds with them."""
        return common.prune_runs(self.alias, rows)
