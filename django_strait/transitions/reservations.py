"""The reaper's share of budgets over several databases: close what no record will.

A claim on another alias than the control database reserves on the control
database before its own transaction commits. If that claim then rolls back, or
its worker dies before the record's settlement reaches the control database
(or the control database was away then), the reservation is left there. Each
round, the reaper of the runs' alias asks what became of the attempts its
stale reservations name, and closes them on the control database: an attempt
that was made spends what it reserved (as a lost attempt does), one that never
started gives it back. Runs still executing keep theirs; their record settles it.
"""

from __future__ import annotations

import datetime as dt
import logging

from django_strait.rules.resilience import budgets
from django_strait.storage import Storage

logger = logging.getLogger(__name__)

#: A reservation younger than this is never closed here: its claim may still commit.
RESERVATION_GRACE = dt.timedelta(minutes=2)
#: Most reservations looked at in one round.
BATCH = 500


def close_stale_reservations(
    storage: Storage, ledger: Storage, *, now: dt.datetime, grace: dt.timedelta = RESERVATION_GRACE
) -> int:
    """Close ``storage``'s stale reservations on ``ledger`` (the control database); how many.

    A control database that does not answer is logged and left for the next round.
    """
    try:
        stale = ledger.stale_reservations(storage.alias, before=now - grace, limit=BATCH)
        if not stale:
            return 0
        fates = storage.reservation_fates([(r.run_id, r.attempt) for r in stale])
        spends = budgets.closing(stale, fates)
        closed = ledger.settle_budgets_for(storage.alias, spends)
    except Exception as exc:
        logger.warning(
            "stale budget reservations of database %r not closed: %s: %s (next round)",
            storage.alias, type(exc).__name__, str(exc).split("\n", 1)[0],
        )  # fmt: skip
        return 0
    if closed:
        given = sum(1 for s in spends if not s.cost)
        logger.info(
            "closed %s stale budget reservations of database %r on %r: %s given back "
            "(their claim never started the attempt), %s spent (attempts made, not settled)",
            closed, storage.alias, ledger.alias, given, closed - given,
        )  # fmt: skip
    return closed
