"""The vacuum duty: VACUUM the runs table when its dead rows pass a threshold.

Every claim, start and record leaves a dead version of a run behind. Autovacuum
removes them where it is on and keeps up; where it is off or behind (a server
tuned down, a busy cluster), dead rows pile up in the runs table and its
indexes, and the worker's statements slow down with them. Then the leader
vacuums the table itself once ``dead_rows`` have gathered since its last
vacuum. It looks every few seconds (a catalog read): at full speed a drain
kills ``dead_rows`` in about a second, and with a look every 30 s a 200,000-run
drain ran 4-30 % slower, its statements wading through the dead versions of
everything it had done (docs/benchmarks.md, "The vacuum duty's look"). After
a vacuum, the next waits at least ``QUIET_FACTOR`` times as long as that one
took: on a large table (a backlog of a million runs) vacuums every 3 s, 0.2 s
each, cost the drain about as much as the dead rows did, and this keeps them
to a thirtieth of the time whatever the table's size. Rows that an open
snapshot still holds are counted as left, so a vacuum that could not remove
them is not repeated for them; and while vacuums remove less than half of what they find
(a snapshot held open), each waits for twice as many new dead rows as the
one before, up to ``MAX_BACKOFF`` times ``dead_rows``, and ``HELD_WAIT``
seconds at least: such a vacuum reads every page changed since the snapshot
and frees nothing. It does not ANALYZE: fresh statistics
that saw few queued runs turned the claim to a plan that walks dead entries
(docs/operations.md, "Vacuum and the claim"). On databases that need no vacuum
(the storage backend says so) the duty does nothing.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

from django_strait.conf import strait_settings
from django_strait.database import alias
from django_strait.duties.base import DutyResult
from django_strait.duties.leader import lead
from django_strait.storage import backend

logger = logging.getLogger(__name__)

#: Seconds between looks at the runs table's dead rows (one catalog read each, on the leader).
DEFAULT_INTERVAL = 3.0
#: At most this many times ``dead_rows`` between vacuums that free little.
MAX_BACKOFF = 8
#: After a vacuum, none for this many times as long as it took (vacuums <= 1/30 of the time).
QUIET_FACTOR = 30
#: After a vacuum that freed little (a snapshot held open), none for at least this many seconds.
HELD_WAIT = 30.0


@dataclass(slots=True)
class Vacuumer:
    """Vacuum the runs table when ``dead_rows`` have gathered (a Duty; 0 turns it off)."""

    name: ClassVar[str] = "vacuum"

    dead_rows: int = 10_000
    interval: float = DEFAULT_INTERVAL
    using: str | None = None
    #: Dead rows this host's last VACUUM could not remove (an open snapshot held them).
    left: int = field(default=0, init=False)
    #: How many times ``dead_rows`` the next vacuum waits for (doubled while vacuums free little).
    backoff: int = field(default=1, init=False)
    #: ``time.monotonic()`` before which this host does not vacuum again (QUIET_FACTOR, HELD_WAIT).
    quiet_until: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        if not self.dead_rows >= 0:
            raise ValueError(f"dead_rows: must be >= 0 (0 = off), got {self.dead_rows!r}")
        if not self.interval > 0:
            raise ValueError(f"interval: must be > 0 seconds, got {self.interval!r}")

    @classmethod
    def from_settings(cls, using: str | None = None, **options: Any) -> Vacuumer:
        """Build the duty from VACUUM_DEAD_ROWS."""
        return cls(dead_rows=strait_settings.VACUUM_DEAD_ROWS, using=alias(using), **options)

    def run_once(self, now: dt.datetime) -> DutyResult:
        """Vacuum the runs table if enough rows died since the last vacuum; VACUUM outside a transaction."""
        storage = backend(self.using)
        if not self.dead_rows or not storage.keeps_dead_rows:
            # Turned off, or nothing to vacuum: no lead either. On SQLite with
            # transaction_mode IMMEDIATE its empty transaction would take the write lock every look.
            return DutyResult(self.name, led=True, counts={"dead_rows": 0, "vacuumed": 0})
        with lead(self.name, using=self.using) as leading:
            dead = storage.dead_run_rows() if leading else None
        if not leading:
            return DutyResult(self.name, led=False)
        began = time.monotonic()
        if (
            dead is None
            or dead - self.left < self.dead_rows * self.backoff
            or began < self.quiet_until
        ):
            counts = {"dead_rows": dead or 0, "vacuumed": 0}
            return DutyResult(self.name, led=True, counts=counts, looked_at=("dead_rows",))
        storage.vacuum_runs()
        took = time.monotonic() - began
        self.left = storage.dead_run_rows() or 0
        freed_little = self.left * 2 > dead
        self.backoff = min(self.backoff * 2, MAX_BACKOFF) if freed_little else 1
        quiet = max(QUIET_FACTOR * took, HELD_WAIT if freed_little else 0.0)
        self.quiet_until = time.monotonic() + quiet
        logger.info(
            "vacuumed the runs table in %.2f s: %s dead rows before, %s left (held by open "
            "snapshots); the next vacuum in %.0f s at the soonest",
            took,
            dead,
            self.left,
            quiet,
        )
        counts = {"dead_rows": dead, "vacuumed": 1, "left": self.left, "backoff": self.backoff}
        return DutyResult(self.name, led=True, counts=counts)
