"""What a ``--burst`` worker does once nothing is due: wait for holds that clear soon, or leave.

Runs held by a concurrency or rate limit clear by themselves (a slot frees when a
run ends, a window passes), so a burst worker drains them too. What waits on
anything else (an open circuit, an unhealthy endpoint, the budget, a retry delay,
a paused job, an invalid definition) is left for the next worker, and said.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django_strait.rules.resilience.limits import CONCURRENCY_ERROR, RATE_ERROR
from django_strait.storage.values import Waiting

#: Limit holds due within this long are waited for; a longer rate window is not "soon".
HORIZON = dt.timedelta(seconds=60)
#: Reasons that clear by themselves while runs finish and windows pass.
CLEARING = frozenset({CONCURRENCY_ERROR, RATE_ERROR})
#: The most a burst worker sleeps before it looks again (a run ending wakes it sooner).
LONGEST_NAP = 1.0


@dataclass(frozen=True, slots=True)
class Verdict:
    """Wait ``wait`` seconds and claim again, or (``wait`` None) exit, leaving ``left``."""

    wait: float | None
    left: tuple[Waiting, ...] = ()

    def describe(self) -> str:
        """``12 runs left waiting: 8 circuit.open, 4 retry delay after http.503``."""
        total = sum(w.runs for w in self.left)
        if not total:
            return "nothing left queued"
        parts = ", ".join(f"{w.runs} {label(w)}" for w in self.left)
        return f"{total} run{'s' if total != 1 else ''} left waiting: {parts}"


def verdict(waiting: list[Waiting], now: dt.datetime) -> Verdict:
    """Decide from what is still queued whether a drained burst worker waits or exits."""
    soon = [w.next_at for w in waiting if clears_soon(w, now)]
    if soon:
        return Verdict(min(LONGEST_NAP, max(0.0, (min(soon) - now).total_seconds())))
    return Verdict(None, tuple(sorted(waiting, key=lambda w: (-w.runs, w.reason))))


def clears_soon(w: Waiting, now: dt.datetime) -> bool:
    """Whether these runs wait on a limit that frees within the horizon."""
    return w.reason in CLEARING and w.enabled and w.next_at - now <= HORIZON


def label(w: Waiting) -> str:
    """Say why runs wait, in an operator's words."""
    if not w.enabled:
        return "of a paused job"
    if not w.reason:
        return "not due yet (delay or run_at)"
    if w.reason.split(".")[0] in {
        "circuit",
        "health",
        "budget",
        "limit",
        "job",
        "worker",
        "handler",
    }:
        return f"held ({w.reason})"
    return f"in a retry delay after {w.reason}"
