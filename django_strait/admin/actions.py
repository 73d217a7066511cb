"""Replay, cancel and discard runs from the admin, through ``django_strait.transitions``.

Each moves the runs on the alias their queryset reads (``runs.db``): with several
databases, the list's chosen alias, or the alias a run's id names.

Each function moves what it can, counts what the state table refused, and
returns an :class:`ActionResult` that the admin turns into one message.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from django.contrib import messages
from django.db.models import Count, QuerySet

from django_strait import transitions
from django_strait.models import JobRun
from django_strait.rules.states import Transition
from django_strait.storage import backend

#: The name people know each transition by (``DROP`` is the admin's "discard").
VERBS: Mapping[Transition, tuple[str, str]] = {
    Transition.REPLAY: ("replay", "replayed"),
    Transition.CANCEL: ("cancel", "canceled"),
    Transition.DROP: ("discard", "discarded"),
}


@dataclass(frozen=True, slots=True)
class ActionResult:
    """How many runs one admin action moved, and how many it could not."""

    transition: Transition
    moved: int
    #: Status the refused runs were in -> how many.
    refused: Mapping[str, int] = field(default_factory=dict)
    #: Executing runs flagged to cancel once their attempt returns.
    pending: int = 0

    @property
    def refused_count(self) -> int:
        return sum(self.refused.values())

    @property
    def level(self) -> int:
        """Return the ``messages`` level: error if nothing moved, warning if some did not."""
        if not self.refused:
            return messages.SUCCESS
        return messages.WARNING if self.moved or self.pending else messages.ERROR

    def message(self) -> str:
        """Say what moved and why the rest did not, in one sentence or three."""
        name, done = VERBS[self.transition]
        parts = [f"{done.capitalize()} {_runs(self.moved)}."]
        if self.pending:
            parts.append(
                f"{_runs(self.pending)} executing: canceled when the current attempt returns."
            )
        if self.refused:
            statuses = ", ".join(f"{n} {s}" for s, n in sorted(self.refused.items()))
            allowed = ", ".join(sorted(self.transition.sources))
            parts.append(
                f"{_runs(self.refused_count)} refused ({statuses}): "
                f"{name} is allowed only from {allowed}."
            )
        return " ".join(parts)


def replay_runs(runs: QuerySet[JobRun], *, by: str) -> ActionResult:
    """Replay the replayable runs among ``runs`` in batches, recording ``by``."""
    refused = _statuses_outside(runs, Transition.REPLAY)
    ids = list(runs.values_list("pk", flat=True))
    moved = transitions.replay_many(ids, by=by, storage=backend(runs.db))
    # The pre-read explains refusals; the update's count is the truth if they differ.
    lost = len(ids) - moved - sum(refused.values())
    if lost > 0:
        refused["changed meanwhile"] = lost
    return ActionResult(Transition.REPLAY, moved=moved, refused=refused)


def cancel_runs(runs: QuerySet[JobRun]) -> ActionResult:
    """Cancel each run; executing ones are flagged and stop after their attempt."""
    storage = backend(runs.db)
    return _one_by_one(Transition.CANCEL, runs, lambda pk: transitions.cancel(pk, storage=storage))


def discard_runs(runs: QuerySet[JobRun], *, by: str) -> ActionResult:
    """Discard each run that no worker holds (queued, dead letter, system failed)."""
    storage = backend(runs.db)
    return _one_by_one(
        Transition.DROP,
        runs,
        lambda pk: transitions.discard(pk, by=by, reason="from the admin", storage=storage),
    )


def _one_by_one(
    transition: Transition, runs: QuerySet[JobRun], move: Callable[[int], JobRun]
) -> ActionResult:
    moved = pending = 0
    refused: Counter[str] = Counter()
    # Ids first: each transition is its own guarded update, so a refusal is per run.
    for pk in list(runs.values_list("pk", flat=True)):
        try:
            run = move(pk)
        except transitions.InvalidTransition as exc:
            refused[exc.status] += 1
        except JobRun.DoesNotExist:
            refused["deleted"] += 1
        else:
            if run.status == transition.target:
                moved += 1
            else:  # cancel asked of an executing run: flagged, not yet canceled
                pending += 1
    return ActionResult(transition, moved=moved, refused=dict(refused), pending=pending)


def _statuses_outside(runs: QuerySet[JobRun], transition: Transition) -> dict[str, int]:
    rows = (
        runs.exclude(status__in=transition.sources)
        .order_by()
        .values_list("status")
        .annotate(count=Count("pk"))
    )
    return dict(rows)


def _runs(count: int) -> str:
    return f"{count} run" if count == 1 else f"{count} runs"
