"""Two PostgreSQL servers, two aliases, one worker process; stop one server for a while.

Run by tests/e2e/test_several_databases.py (a 20 s stop) and
bench/bench_several_databases.py (60 s). Both servers are started here
(tests/pg_cluster.py) and stopped by their pids. "jobs1" (queue "one", and
"default") is on the first, "jobs2" (queue "two") on the second
(tests/several_settings.py). Each alias gets a backlog of runs that wait
``tests.several.jobs.WAIT`` each; one ``run_strait_worker`` (no ``--database``:
it serves both) drains them. Once both drain, the second server is stopped
(``pg_ctl stop -m immediate``'s SIGQUIT, then SIGKILL) for ``stop_secs`` and
started again.

Returned: where the rows landed, each alias's completions per second before the
stop, the kept alias's during it (from the runs' ``finished_at``, the servers'
clock), the seconds from the stopped server's return to its first completion,
and how many runs of each alias completed (all of them: 0 lost). With
``stop="jobs1"`` the first server is the one stopped: the control database
(circuits, health) and "default" go with it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests import pg_cluster

#: Runs executing at once per alias; with WAIT (0.02 s) at most 500 runs/s each.
CONCURRENCY = 10
#: Seconds both drain before the stop, and the window the rate before it is taken over.
BEFORE = 8.0
WINDOW = 5.0
START_TIMEOUT = 60.0
RESUME_TIMEOUT = 30.0
#: Runs per second the drain after the return may be slower than and still finish.
DRAIN_FLOOR = 50.0


def run(
    stop_secs: float, backlog_one: int, backlog_two: int, logs: Path, *, stop: str = "jobs2"
) -> dict[str, Any]:
    """Start the servers, run the scenario, stop everything it started; the figures.

    ``stop``: the alias whose server is stopped, "jobs2", or "jobs1" (the first
    alias: the control database, and "default", go with it); the other is kept.
    """
    servers = pg_cluster.Servers(2)
    worker: subprocess.Popen | None = None
    try:
        servers.start()
        first, second = servers.servers
        _sql(first, "CREATE DATABASE app", "CREATE DATABASE strait1")
        _sql(second, "CREATE DATABASE strait2")
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.several_settings",
            "SEVERAL_TEST_PORTS": f"{first.port},{second.port}",
            "PYTHONPATH": str(_root()),
            "PYTHONUNBUFFERED": "1",
            "SEVERAL_TEST_NOTES": str(logs),
        }
        env.pop("DATABASE_URL", None)
        for where in ("default", "jobs1", "jobs2"):
            _django(env, "-m", "django", "migrate", "--database", where, "--verbosity", "0")
        seeded = json.loads(_django(env, "-m", "tests.several.seed", str(backlog_one),
                                    str(backlog_two)).splitlines()[-1])  # fmt: skip
        with open(logs / "worker.log", "w") as log:
            worker = subprocess.Popen(
                [sys.executable, "-m", "django", "run_strait_worker", "--worker-id", "fleet",
                 "--concurrency", str(CONCURRENCY)],
                cwd=_root(), env=env, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip
        one, two = Db(first, "strait1"), Db(second, "strait2")
        down, downed = (second, two) if stop == "jobs2" else (first, one)
        kept = one if stop == "jobs2" else two
        _wait(lambda: one.completed() > 0 and two.completed() > 0, START_TIMEOUT,
              lambda: f"not both draining; worker exit {worker.poll()}")  # fmt: skip
        time.sleep(BEFORE)
        stopped_at = time.time()
        down.stop()
        time.sleep(stop_secs)
        back_at = time.time()
        down.start()
        _wait(lambda: downed.completed_after(back_at) > 0, RESUME_TIMEOUT,
              lambda: f"{stop} did not resume; worker exit {worker.poll()}")  # fmt: skip
        expected = seeded["expected"]
        _wait(lambda: one.completed() == expected["jobs1"] and two.completed() == expected["jobs2"],
              (backlog_one + backlog_two) / DRAIN_FLOOR, lambda: f"not drained: {one.completed()}, {two.completed()}; "
                                     f"worker exit {worker.poll()}")  # fmt: skip
        alive = worker.poll() is None
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(timeout=60)
        return {
            "stop_secs": stop_secs,
            "seeded": seeded,
            "worker_kept_running": alive,
            "worker_exit": code,
            "placement": {"jobs1": one.placement(), "jobs2": two.placement()},
            "stopped": stop,
            "kept_runs_per_s_before": kept.rate(stopped_at - WINDOW, stopped_at),
            "stopped_runs_per_s_before": downed.rate(stopped_at - WINDOW, stopped_at),
            "kept_runs_per_s_stopped": kept.rate(stopped_at, back_at),
            "stopped_resumed_after_s": round(downed.first_after(back_at) - back_at, 2),
            "completed": {"jobs1": one.completed(), "jobs2": two.completed()},
            "attempts_over_one": one.attempts_over_one() + two.attempts_over_one(),
            "executed_again": _executed_again(logs),
        }
    finally:
        if worker is not None and worker.poll() is None:
            worker.kill()
            worker.wait(timeout=30)
        servers.stop()


class Db:
    """Reads one alias's tables straight from its server (None-safe while it is stopped)."""

    def __init__(self, server: pg_cluster.Server, name: str) -> None:
        self.conninfo = server.conninfo(name) + " connect_timeout=2"

    def _one(self, sql: str, *args: Any) -> Any:
        import psycopg

        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            return conn.execute(sql, args).fetchall()

    def completed(self) -> int:
        try:
            return self._one(
                "SELECT count(*) FROM django_strait_jobrun WHERE status = 'completed'"
            )[0][0]
        except Exception:
            return -1  # its server is stopped

    def completed_after(self, at: float) -> int:
        try:
            return self._one(
                "SELECT count(*) FROM django_strait_jobrun WHERE status = 'completed'"
                " AND finished_at > to_timestamp(%s)", at,
            )[0][0]  # fmt: skip
        except Exception:
            return 0

    def first_after(self, at: float) -> float:
        return float(self._one(
            "SELECT extract(epoch FROM min(finished_at)) FROM django_strait_jobrun"
            " WHERE status = 'completed' AND finished_at > to_timestamp(%s)", at,
        )[0][0])  # fmt: skip

    def rate(self, start: float, end: float) -> float:
        count = self._one(
            "SELECT count(*) FROM django_strait_jobrun WHERE status = 'completed'"
            " AND finished_at >= to_timestamp(%s) AND finished_at < to_timestamp(%s)", start, end,
        )[0][0]  # fmt: skip
        return round(count / (end - start), 1)

    def placement(self) -> dict[str, Any]:
        rows = self._one(
            "SELECT j.name, r.queue, count(*) FROM django_strait_jobrun r"
            " JOIN django_strait_job j ON j.id = r.job_id GROUP BY j.name, r.queue ORDER BY 1, 2"
        )
        jobs = self._one("SELECT name FROM django_strait_job ORDER BY name")
        return {"runs": [list(r) for r in rows], "jobs": [r[0] for r in jobs]}

    def attempts_over_one(self) -> int:
        return self._one("SELECT count(*) FROM django_strait_jobrun WHERE attempt > 1")[0][0]


def _executed_again(logs: Path) -> list[str]:
    """The "queue run attempt" lines the handlers noted more than once."""
    seen: dict[str, int] = {}
    for path in logs.glob("*.log"):
        if path.name != "worker.log":
            for line in path.read_text().splitlines():
                seen[line] = seen.get(line, 0) + 1
    return sorted(k for k, n in seen.items() if n > 1)


def _sql(server: pg_cluster.Server, *statements: str) -> None:
    import psycopg

    with psycopg.connect(server.conninfo(), autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def _root() -> Path:
    return Path(__file__).resolve().parents[2]


def _django(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([sys.executable, *args], cwd=_root(), env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}"
        )
    return done.stdout


def _wait(ready, timeout: float, why) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(why())
        time.sleep(0.25)
