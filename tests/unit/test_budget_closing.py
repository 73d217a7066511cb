"""``resilience.budgets.closing``: what the reaper does with a stale reservation, by its fate."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from django_strait.rules.resilience import budgets
from django_strait.rules.resilience.budgets import Fate, Reservation

DAY = dt.date(2026, 11, 29)


def test_closing__made_spends_what_it_reserved_never_gives_it_back_running_is_left():
    made, never, running, unknown = (Reservation(n, 2, 9, DAY, Decimal(3)) for n in range(4))
    fates = {(0, 2): Fate.MADE, (1, 2): Fate.NEVER, (2, 2): Fate.RUNNING}

    spends = budgets.closing([made, never, running, unknown], fates)

    assert [(s.run_id, s.attempt, s.project_id, s.reserved, s.cost) for s in spends] == [
        (0, 2, 9, Decimal(3), Decimal(3)),
        (1, 2, 9, Decimal(3), Decimal(0)),
    ]
    # Settled on the day the reservation was made (by_ledger groups by it).
    assert {day for _, day in budgets.by_ledger(spends)} == {DAY}


def test_closing__the_fate_of_another_attempt_is_not_this_one_s():
    stale = Reservation(1, 2, 9, DAY, Decimal(3))
    assert budgets.closing([stale], {(1, 3): Fate.NEVER}) == []
