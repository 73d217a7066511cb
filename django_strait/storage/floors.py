"""Where a worker's claim may start: per priority, a point below which no queued run is due.

Every claimed run leaves a dead entry at the front of the claim's index (the
``queued`` partial index), and while any snapshot older than the claim is held
open (a long report, a stuck transaction) no vacuum can remove it: a claim that
scans from the front walks every run claimed since, on every call. A worker
therefore remembers, per priority, the (``available_at``, id) below which its
own claims found nothing left to take, and starts the next claim's index scan
there (``storage.postgres``; see docs/operations.md, "Vacuum and the claim").

A floor is a hint, never a promise: a run can become queued below it later (a
transaction that set its ``available_at`` and committed more than ``lag``
seconds afterwards, a claim another worker rolled back, an unclaim, a rescue or
a replay with an old due time, clocks apart by more than ``lag``). So floors
never pass ``now - lag``, and every ``rescan`` seconds the worker forgets them
and claims from the front of the index: such a run waits at most that long,
and is never lost. Pure: the clock comes in as arguments.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from django_strait.rules import bounds

#: Seconds a floor stays behind the worker's clock: a run committed this long after
#: its ``available_at`` was set is still found by the next claim.
DEFAULT_LAG = 1.0
#: The lowest point of the claim order within a priority: no floor.
BOTTOM = (dt.datetime.min.replace(tzinfo=dt.UTC), 0)

Key = tuple[dt.datetime, int]


@dataclass(frozen=True, slots=True)
class Segment:
    """One index range of a claim: priorities ``low..high``, from (``after_at``, ``after_id``)."""

    low: int
    high: int
    after_at: dt.datetime
    after_id: int


@dataclass(slots=True)
class ClaimFloors:
    """A worker's floors, learned from its own claims and forgotten every ``rescan`` seconds."""

    rescan: float
    lag: float = DEFAULT_LAG
    #: Per priority seen in a claim: the (available_at, id) a claim may start from.
    floors: dict[int, Key] = field(default_factory=dict)
    #: When (monotonic seconds) the floors were last forgotten; None: never yet.
    rescanned_at: float | None = None

    def __post_init__(self) -> None:
        if not self.rescan > 0:
            raise ValueError(f"rescan: must be > 0 seconds, got {self.rescan!r}")
        if not self.lag >= 0:
            raise ValueError(f"lag: must be >= 0 seconds, got {self.lag!r}")

    def forget(self) -> None:
        """Claim from the front of the index next time (after a claim that rolled back)."""
        self.floors.clear()
        self.rescanned_at = None

    def segments(self, clock: float) -> list[Segment]:
        """The index ranges of the next claim, in claim order (priority high to low).

        Each priority with a floor is a range of its own that starts at the floor;
        the priorities between them (none seen yet) are ranges from their bottom.
        """
        if self.rescanned_at is None or clock - self.rescanned_at >= self.rescan:
            self.floors.clear()
            self.rescanned_at = clock
        low, high = bounds.PRIORITY
        out: list[Segment] = []
        top = high
        for priority in sorted(self.floors, reverse=True):
            if priority < top:
                out.append(Segment(priority + 1, top, *BOTTOM))
            out.append(Segment(priority, priority, *self.floors[priority]))
            top = priority - 1
        if top >= low:
            out.append(Segment(low, top, *BOTTOM))
        return out

    def learn(self, claimed: list[tuple[int, Key]], limit: int, now: dt.datetime) -> None:
        """Move the floors after a claim that returned ``claimed`` (priority, key), in order.

        A claim that came back short took every due run it could lock: nothing due
        is left below ``now - lag`` at any priority. A full claim says that of the
        priorities above its last run's; of that one, below the last run it took.
        """
        cap: Key = (now - dt.timedelta(seconds=self.lag), 0)
        if len(claimed) < limit:
            last_priority = bounds.PRIORITY[0] - 1
        else:
            last_priority, last_key = claimed[-1]
            self.floors[last_priority] = min(last_key, cap)
        for priority in {p for p, _ in claimed} | set(self.floors):
            if priority > last_priority:
                self.floors[priority] = cap
