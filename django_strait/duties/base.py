"""What every periodic duty looks like."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True, slots=True)
class DutyResult:
    """What one round of a duty did."""

    duty: str
    #: False when another host held the lead this round (nothing was done here).
    led: bool
    counts: dict[str, int] = field(default_factory=dict)
    #: Counts of what the round looked at rather than did (the scheduler's ``jobs``).
    looked_at: tuple[str, ...] = ()

    @property
    def happened(self) -> bool:
        """Whether this host led the round and did something in it (what is worth a log line)."""
        return self.led and any(n for k, n in self.counts.items() if k not in self.looked_at)


class Duty(Protocol):
    """A periodic duty: ``run_once`` every ``interval`` seconds on some worker."""

    name: str
    interval: float

    def run_once(self, now: dt.datetime) -> DutyResult:
        """Do one round (on a database thread); return what was done."""
        ...
