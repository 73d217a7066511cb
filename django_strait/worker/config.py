"""How one worker process runs, and what it counts."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from django_strait.rules.states import RunStatus


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """How one worker process runs (``run_strait_worker`` options and settings)."""

    worker_id: str
    queues: tuple[str, ...] = ()
    concurrency: int = 50
    batch_size: int = 100
    burst: bool = False
    poll_interval: float = 1.0
    shutdown_timeout: float = 30.0
    heartbeat_interval: float = 30.0
    stats_interval: float = 60.0
    #: DATABASES alias to LISTEN on for wake-ups (PostgreSQL only); None: poll only.
    listen_alias: str | None = None
    #: Run the periodic duties (reaper, scheduler, pruner) in this process.
    duties: bool = True
    #: Serve this worker's Prometheus metrics, /livez and /readyz on <port> (None: off),
    #: at ``metrics_bind`` (STRAIT["METRICS_BIND"]).
    metrics_port: int | None = None
    metrics_bind: str = "127.0.0.1"
    result_max_bytes: int = 65536
    user_agent: str = "django-strait"
    #: The DATABASES alias of django-strait's tables (None: STRAIT["DATABASE"]).
    using: str | None = None
    #: Deliver completion webhooks in this process.
    webhooks: bool = True
    #: A webhook delivery's total deadline in seconds, and most deliveries in flight at once.
    webhook_timeout: float = 10.0
    webhook_concurrency: int = 50
    #: Most child processes for process jobs (docs/process-execution.md); None: the CPU count.
    processes: int | None = None
    #: Runs a child executes before it is replaced (STRAIT["PROCESS_MAX_RUNS"]).
    process_max_runs: int = 1000


_STAT_FOR_STATUS = {
    RunStatus.COMPLETED: "succeeded",
    RunStatus.QUEUED: "retried",
    RunStatus.DEAD_LETTER: "dead_lettered",
    RunStatus.DISCARDED: "discarded",
    RunStatus.FAILED: "failed",
    RunStatus.CANCELED: "canceled",
}


@dataclass(slots=True)
class Stats:
    """Counts since the worker started."""

    claimed: int = 0
    succeeded: int = 0
    retried: int = 0
    dead_lettered: int = 0
    discarded: int = 0
    failed: int = 0
    canceled: int = 0
    lost: int = 0
    started_at: float = field(default_factory=time.monotonic)

    def count(self, status: str) -> None:
        """Count one run that an attempt left in ``status``."""
        name = _STAT_FOR_STATUS.get(status)
        if name:
            setattr(self, name, getattr(self, name) + 1)

    def line(self) -> str:
        """The counts on one line, for the log."""
        elapsed = max(time.monotonic() - self.started_at, 1e-9)
        finished = self.succeeded + self.retried + self.dead_lettered + self.discarded + self.failed
        return (
            f"claimed={self.claimed} succeeded={self.succeeded} retried={self.retried} "
            f"dead_lettered={self.dead_lettered} discarded={self.discarded} failed={self.failed} "
            f"canceled={self.canceled} lost={self.lost} runs_per_s={finished / elapsed:.1f}"
        )
