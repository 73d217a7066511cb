"""The claim gate: which claimed runs may start now, decided inside the claim's transaction.

Steps, in order, each handed only the runs the ones before let through:

1. **definition**: a job whose row is not a valid definition holds its runs
   (``job.invalid``) until it is fixed; a Python job whose handler this worker has
   not registered (a worker of the release before, in a rolling deploy) leaves its
   runs to a worker that knows it (``handler.waiting``), for up to
   ``STRAIT["UNKNOWN_HANDLER_GRACE"]``;
2. **limits**: concurrency and rate limits (a run they hold never reaches its
   circuit, so it cannot take a half-open probe it would not send);
3. **circuits and health**: each HTTP run's endpoint is chosen (the first of its
   endpoints whose circuit and health admit it); a run none admits is held;
4. **budgets**: last, so that only runs that will start reserve.

A step is a method returning holds; a new protection step is one more method
and one more entry in ``steps``. Python jobs are never held by circuits or health.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections import Counter
from collections.abc import Callable

from django_strait.conf import strait_settings
from django_strait.dispatch import failover
from django_strait.rules.resilience import budgets, limits
from django_strait.services.breaker import Candidate, CircuitBreaker
from django_strait.storage import Claimed, Hold, Storage
from django_strait.transitions.decisions import trim
from django_strait.transitions.worker import warn_budgets_on_commit
from django_strait.worker.catalog import Catalog

logger = logging.getLogger(__name__)

#: The error type of a run held because its job's row is not a valid definition.
INVALID_JOB_ERROR = "job.invalid"
#: How long such a run waits before it is looked at again (a fixed row frees it then).
INVALID_JOB_WAIT = dt.timedelta(seconds=30)

#: The error type of a run left for a worker that knows its job's handler.
HANDLER_WAITING = "handler.waiting"
#: How long such a run is left each time: other workers claim it meanwhile, and this
#: one does not claim it again and again (one claim per wait, however many workers).
HANDLER_WAIT = dt.timedelta(seconds=5)
#: Least time between two log lines of one worker about one job's runs waiting so.
HANDLER_LOG_EVERY = 60.0

Step = Callable[[list[Claimed], dt.datetime], list[Hold]]


class Gate:
    """Decides, for one worker, which claimed runs start and which wait."""

    def __init__(
        self,
        storage: Storage,
        catalog: Catalog,
        circuits: CircuitBreaker,
        *,
        handler_grace: float | None = None,
        ledger: Storage | None = None,
    ) -> None:
        self.storage = storage
        #: Where budgets are reserved when not in the claim's own statement: the control
        #: database's backend (several databases); None: ``storage``, in the claim.
        self.ledger = ledger
        self.catalog = catalog
        self.circuits = circuits
        #: Seconds a run waits for a worker that knows its handler (None: the setting).
        self.handler_grace = handler_grace
        #: Job id -> when this worker last logged that its runs wait for another worker.
        self._said_waiting: dict[int, float] = {}
        self.steps: tuple[Step, ...] = (
            self.invalid_holds,
            self.limit_holds,
            self.circuit_holds,
            self.budget_holds,
        )

    def __call__(self, claimed: list[Claimed], now: dt.datetime) -> list[Hold]:
        """Load the claimed runs' jobs; return the holds of the runs that may not start yet."""
        self.catalog.ensure({r.job_id for r in claimed})
        holds: list[Hold] = []
        for step in self.steps:
            more = step(claimed, now)
            if more:
                held = {h.run_id for h in more}
                claimed = [run for run in claimed if run.id not in held]
                holds += more
        if holds and logger.isEnabledFor(logging.DEBUG):
            reasons = Counter(h.error_type for h in holds)
            logger.debug("gate held %s of %s claimed runs: %s", len(holds),
                         len(holds) + len(claimed), dict(reasons))  # fmt: skip
        return holds

    def invalid_holds(self, claimed: list[Claimed], now: dt.datetime) -> list[Hold]:
        """Hold the runs of jobs whose row is not a valid definition, until it is fixed;
        leave those whose handler this worker does not know to a worker that does."""
        held = []
        unknown = []
        for run in claimed:
            info = self.catalog.get(run.job_id)
            if info.invalid:
                reason = trim(
                    f"job {info.name} is not a valid definition: {info.describe_problems()}"
                )
                until = now + INVALID_JOB_WAIT
                held.append(Hold(run.id, until, INVALID_JOB_ERROR, reason))
            elif info.handler_error and not run.row_error:
                unknown.append(run)
        if unknown:  # never when every handler is known: no statement, no more work
            held += self.handler_holds(unknown, now)
        return held

    def handler_holds(self, unknown: list[Claimed], now: dt.datetime) -> list[Hold]:
        """Leave runs whose handler this worker lacks to other workers, within the grace.

        The grace runs from the first hold of the run's current wait (its hold period),
        whichever worker made it; past it the run starts here and fails as
        ``handler.unknown``, as it does at once with a grace of 0.
        """
        seconds = self.handler_grace
        if seconds is None:
            seconds = strait_settings.UNKNOWN_HANDLER_GRACE
        grace = dt.timedelta(seconds=seconds)
        if not grace:
            return []
        began = self.storage.hold_began({r.id: r.attempt for r in unknown}, HANDLER_WAITING)
        held = []
        for run in unknown:
            deadline = began.get(run.id, now) + grace
            if now >= deadline:
                continue
            handler = self.catalog.get(run.job_id).row.handler
            reason = (
                f"waiting for a worker that has handler {handler!r} registered (this one "
                f"has not: a worker of another release?); fails as handler.unknown if none "
                f"has taken it by {deadline:%Y-%m-%d %H:%M:%S} UTC "
                f"(STRAIT['UNKNOWN_HANDLER_GRACE'] = {grace.total_seconds():g} s)"
            )
            held.append(Hold(run.id, min(now + HANDLER_WAIT, deadline), HANDLER_WAITING, reason))
        self._say_waiting(unknown, len(held), grace)
        return held

    def _say_waiting(self, unknown: list[Claimed], held: int, grace: dt.timedelta) -> None:
        clock = time.monotonic()
        jobs = {run.job_id for run in unknown}
        quiet = [
            j
            for j in jobs
            if clock - self._said_waiting.get(j, -HANDLER_LOG_EVERY) >= HANDLER_LOG_EVERY
        ]
        for job_id in quiet:
            self._said_waiting[job_id] = clock
            info = self.catalog.get(job_id)
            logger.warning(
                "job %s: handler %r is not registered in this worker; its runs are left for "
                "a worker that has it, for up to %g s each, then fail as handler.unknown "
                "(%s of %s claimed now held)",
                info.name, info.row.handler, grace.total_seconds(), held, len(unknown),
                extra={"job": info.name},
            )  # fmt: skip

    def limit_holds(self, claimed: list[Claimed], now: dt.datetime) -> list[Hold]:
        """Hold the runs their job's concurrency or rate limit does not admit."""
        limited = [
            (run, row)
            for run in claimed
            if limits.is_limited(row := self.catalog.get(run.job_id).row)
        ]
        if not limited:
            return []  # the fast path: no limited job in the batch, no statement
        self.circuits.refresh()  # health scores of degraded endpoints, at most a second old
        pending = [
            limits.Pending(run.id, run.job_id, self.circuits.health_score(row.endpoint_url))
            for run, row in limited
        ]
        return [
            Hold(h.run_id, h.until, h.error_type, h.reason)
            for h in self.storage.enforce_limits(pending, now=now)
        ]

    def circuit_holds(self, claimed: list[Claimed], now: dt.datetime) -> list[Hold]:
        """Pick each HTTP run's endpoint; hold the runs that no endpoint's circuit or health admits."""
        candidates = []
        for run in claimed:
            info = self.catalog.get(run.job_id)
            if info.endpoints:
                ordered = failover.order(
                    info.endpoints, last_used=run.endpoint_used, attempts_spent=run.budget_used
                )
                candidates.append(Candidate(run.id, ordered, info.row.timeout_secs))
        if not candidates:
            return []
        cooldown = dt.timedelta(seconds=strait_settings.CIRCUIT_COOLDOWN)
        gated = self.circuits.gate(candidates, now=now, cooldown=cooldown)
        for run in claimed:
            run.endpoint = gated.chosen.get(run.id, "")
        firsts = {c.run_id: c.endpoints[0] for c in candidates}
        return [
            Hold(rid, admission.until or now, admission.error_type, admission.reason, firsts[rid])
            for rid, admission in gated.held.items()
        ]

    def budget_holds(self, claimed: list[Claimed], now: dt.datetime) -> list[Hold]:
        """Reserve the cost of runs whose job has a project; hold those that do not fit today."""
        pending = []
        for run in claimed:
            row = self.catalog.get(run.job_id).row
            if row.project_id is not None and row.estimated_cost is not None:
                # The attempt this claim starts (``attempt`` counts those before it).
                cost, attempt = row.estimated_cost, run.attempt + 1
                pending.append(budgets.Pending(run.id, row.project_id, cost, attempt))
        if not pending:
            return []  # the fast path: no budgeted job in the batch, no statement
        if self.ledger is None:
            allocation = self.storage.reserve_budgets(pending, now=now)
        else:
            allocation = self.reserve_elsewhere(pending, now)
        for run in claimed:
            run.reserved_cost = allocation.reserved.get(run.id)
        # The soft-limit mark is written with the reservation: in the claim, or already
        # committed on the control database (sent now, even if this claim rolls back).
        warn_budgets_on_commit(allocation.crossed, self.ledger or self.storage)
        return [Hold(h.run_id, h.until, budgets.BUDGET_ERROR, h.reason) for h in allocation.held]

    def reserve_elsewhere(
        self, pending: list[budgets.Pending], now: dt.datetime
    ) -> budgets.Allocation:
        """Reserve on the control database (its own short transaction, on this thread's
        connection to it), then note the reservations on the runs, in the claim.

        A control database that does not answer raises: the claim fails, the next one
        goes job by job, and the budgeted jobs' runs wait (``worker.claim_failed``, no
        attempt spent) while the others start. If this claim rolls back after the
        reservation committed, the reaper of this database gives it back.
        """
        assert self.ledger is not None
        allocation = self.ledger.reserve_budgets_for(self.storage.alias, pending, now=now)
        self.storage.mark_reserved(allocation.reserved)
        return allocation
