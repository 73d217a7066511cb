"""What a worker tells an orchestrator: is it alive, and is it ready (``/livez``, ``/readyz``).

Answered from what the worker already does, so a probe costs a dictionary
read, no query: the event loop stamps ``loop_at`` every second (a loop that
stops turning -- a handler blocking it, a deadlock -- is not alive); a
heartbeat round that reached the database stamps ``database_at``. Ready means
started (the database answered, the worker registered and synced its
schedules), not stopping (a stopping worker drains and claims nothing), and
its database answered within two heartbeat intervals. The decisions are pure
functions of those stamps and ``now``.
"""

from __future__ import annotations

from dataclasses import dataclass

#: A loop that has not turned for this long is not alive.
LIVE_WITHIN = 30.0


@dataclass(frozen=True, slots=True)
class Answer:
    """A probe's answer: its HTTP status and one line saying why."""

    ok: bool
    why: str

    @property
    def status(self) -> int:
        return 200 if self.ok else 503


class Probes:
    """The stamps the worker leaves, and the answers they give (monotonic seconds)."""

    def __init__(self, *, heartbeat_interval: float) -> None:
        self.ready_within = 2 * heartbeat_interval + LIVE_WITHIN
        self.loop_at: float | None = None
        self.database_at: float | None = None
        self.started = False
        self.stopping = False

    def live(self, now: float) -> Answer:
        """Alive: the event loop turned within ``LIVE_WITHIN`` seconds."""
        if self.loop_at is None:
            return Answer(False, "the event loop has not started")
        late = now - self.loop_at
        if late > LIVE_WITHIN:
            return Answer(False, f"the event loop has not turned for {late:.0f} s")
        return Answer(True, "alive")

    def ready(self, now: float) -> Answer:
        """Ready: alive, started, not stopping, and the database answered recently."""
        alive = self.live(now)
        if not alive.ok:
            return alive
        if self.stopping:
            return Answer(False, "stopping: claims nothing, finishes the runs in flight")
        if not self.started or self.database_at is None:
            return Answer(False, "starting: waiting for the database")
        quiet = now - self.database_at
        if quiet > self.ready_within:
            return Answer(False, f"the database has not answered a heartbeat for {quiet:.0f} s")
        return Answer(True, "ready")
