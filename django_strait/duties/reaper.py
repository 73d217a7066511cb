"""The reaper: rescues runs whose worker went silent, and forgets long-gone workers.

Every ``interval`` seconds one host (the leader of the round) looks for runs a
worker holds (dequeued, executing) with no heartbeat for ``stale_after``, and
waiting runs silent for ``waiting_stale_after``; each becomes system_failed with
a ``worker.lost`` attempt and then is retried, dead-lettered or discarded by its
retry policy (``django_strait.transitions.rescue_batch``). It also deletes the
registry rows of workers not seen for ``forget_after``, and fails the workflow
runs stuck for ``waiting_stale_after`` (``workflow.stalled``).
"""

from __future__ import annotations

import datetime as dt
import random
from collections import Counter
from dataclasses import dataclass
from typing import Any, ClassVar

from django_strait.conf import strait_settings
from django_strait.database import alias, control_alias, control_elsewhere
from django_strait.duties.base import DutyResult
from django_strait.duties.leader import lead
from django_strait.duties.registry import forget_silent
from django_strait.rules.retry import PolicyError, parse_duration
from django_strait.storage import backend
from django_strait.transitions import rescue_batch
from django_strait.transitions.reservations import close_stale_reservations
from django_strait.workflows import fail_stalled

#: Most runs rescued in one transaction.
DEFAULT_BATCH_SIZE = 500
#: A worker's row is forgotten after this many ``stale_after`` without a sign of life.
#: A live worker touches its row every ``stale_after / 5``, so ten is far past any hiccup.
FORGET_AFTER_STALE_MULTIPLE = 10
#: The counts every round reports, zero or not.
COUNTS = (
    "rescued",
    "retried",
    "dead_lettered",
    "discarded",
    "canceled",
    "workers_forgotten",
    "workflows_stalled",
    "reservations_closed",
)


@dataclass(frozen=True, slots=True)
class Reaper:
    """Rescue stale runs and forget silent workers; one host per round (a Duty).

    Durations are seconds (or duration text such as ``"5m"``); ``forget_after``
    defaults to ``FORGET_AFTER_STALE_MULTIPLE * stale_after``.
    """

    name: ClassVar[str] = "reaper"

    stale_after: float
    waiting_stale_after: float
    interval: float
    forget_after: float | None = None
    batch_size: int = DEFAULT_BATCH_SIZE
    using: str | None = None

    def __post_init__(self) -> None:
        for option in ("stale_after", "waiting_stale_after", "interval"):
            object.__setattr__(self, option, _positive(option, getattr(self, option)))
        forget = self.forget_after
        if forget is None:
            forget = self.stale_after * FORGET_AFTER_STALE_MULTIPLE
        forget = _positive("forget_after", forget)
        if forget < self.stale_after:
            # Forgetting sooner would delete rows of workers that are merely slow.
            raise PolicyError(
                "Reaper.forget_after",
                self.forget_after,
                f"a duration >= stale_after ({self.stale_after:g} s)",
            )
        object.__setattr__(self, "forget_after", forget)
        size = self.batch_size
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise PolicyError("Reaper.batch_size", size, "an integer >= 1")

    @classmethod
    def from_settings(cls, using: str | None = None, **options: Any) -> Reaper:
        """Build a reaper from STALE_AFTER, WAITING_STALE_AFTER and REAPER_INTERVAL."""
        defaults = {
            "stale_after": strait_settings.STALE_AFTER,
            "waiting_stale_after": strait_settings.WAITING_STALE_AFTER,
            "interval": strait_settings.REAPER_INTERVAL,
        }
        return cls(using=alias(using), **{**defaults, **options})

    def run_once(self, now: dt.datetime, *, rng: random.Random | None = None) -> DutyResult:
        """Do one round if this caller leads it; return what was done."""
        counts: Counter[str] = Counter(dict.fromkeys(COUNTS, 0))
        led = self._rescue(now, counts, rng or random.Random())
        if led:
            self._forget(now, counts)
            self._stalled(now, counts)
            self._reservations(now, counts)
        # Each rescued run is logged by the transition; the engine logs the round's counts.
        return DutyResult(self.name, led, {key: counts[key] for key in COUNTS})

    def _rescue(self, now: dt.datetime, counts: Counter[str], rng: random.Random) -> bool:
        # Leadership is taken per batch: each batch is one transaction holding the
        # lock, so a huge backlog never becomes one long transaction.
        led = False
        while True:
            with lead(self.name, using=self.using) as leading:
                if not leading:
                    return led
                led = True
                batch = rescue_batch(
                    now,
                    stale_after=self.stale_after,
                    waiting_stale_after=self.waiting_stale_after,
                    limit=self.batch_size,
                    rng=rng,
                    storage=backend(self.using),
                )
            counts.update({k: v for k, v in batch.items() if k in COUNTS})
            if batch["selected"] < self.batch_size or not batch["rescued"]:
                return led

    def _forget(self, now: dt.datetime, counts: Counter[str]) -> None:
        before = now - dt.timedelta(seconds=self.forget_after or 0)
        with lead(self.name, using=self.using) as leading:
            if leading:
                counts["workers_forgotten"] = forget_silent(before, using=self.using)

    def _stalled(self, now: dt.datetime, counts: Counter[str]) -> None:
        with lead(self.name, using=self.using) as leading:
            if leading:
                counts["workflows_stalled"] = fail_stalled(
                    now, stale_after=self.waiting_stale_after, using=self.using
                )

    def _reservations(self, now: dt.datetime, counts: Counter[str]) -> None:
        """Several databases: close this alias's budget reservations no record will."""
        if not control_elsewhere(self.using):
            return
        with lead(self.name, using=self.using) as leading:
            if leading:
                counts["reservations_closed"] = close_stale_reservations(
                    backend(self.using), backend(control_alias()), now=now
                )


def _positive(option: str, value: Any) -> float:
    field = f"Reaper.{option}"
    seconds = parse_duration(value, field=field)
    if seconds <= 0:
        raise PolicyError(field, value, "a duration > 0 (e.g. 30s, 5m)")
    return seconds
