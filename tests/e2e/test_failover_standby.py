"""A failover under load: kill -9 the primary, promote its synchronous standby, lose nothing.

The test starts its own PostgreSQL pair (tests/pg_cluster.py): a primary and a
standby cloned with ``pg_basebackup``, streaming, the primary's commits waiting
for it (``synchronous_standby_names``). Everything else reaches them through one
multi-host connection, ``HOST "127.0.0.1,127.0.0.1"``, ``PORT "p1,p2"``,
``target_session_attrs=read-write`` (tests/failover_settings.py). Two workers
drain a steady stream of triggers; a third ("ghost") holds two long runs. Then
the primary and the ghost are killed with SIGKILL at once, as a lost host, and
the standby is promoted with ``pg_ctl promote``, as an orchestrator does.

Shown: every trigger that returned is on the new primary and completes; no run
executes twice at once; the two workers go on without a restart (their LISTEN
is back, on the new primary), and the reaper, a leader duty, runs there: it
rescues the ghost's runs. Printed: the time from the kill to the first run
completed on the new primary, and to the completion rate back at its level
before the kill (docs/operations.md, "Failover").
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from django.conf import settings

from tests import pg_cluster
from tests.conftest import ROOT, worker_command

pytestmark = [pytest.mark.slow, pytest.mark.layout_free, pytest.mark.postgres]

#: Triggers per second, and how long they run before the kill and after the promotion.
RATE = 100
BEFORE_KILL = 6.0
#: How long no server takes writes: an orchestrator's time to notice the loss and promote.
NOTICED_AFTER = 3.0
AFTER_PROMOTE = 8.0
#: Short enough that the ghost's runs are rescued within the test, longer than the failover.
STALE_AFTER = "8s"
#: A cold start of a worker or of migrate; and the drain of what is left after the triggers.
START_TIMEOUT = 60
DRAIN_TIMEOUT = 60
GHOSTS = 2
#: A worker's log line once its LISTEN holds (docs/worker.md, "Wake-ups").
LISTENED = "django_strait.storage.wakeup: listening for new runs on 'default'"
#: What the reaper logs when it rescued runs (a round led by this worker).
RESCUED = "django_strait.worker.duty_runner: reaper: {'rescued': "


def test_kill_9_of_the_primary_and_promoting_the_standby_loses_no_acknowledged_trigger(tmp_path):
    if not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"):
        pytest.skip("a PostgreSQL failover: runs on the PostgreSQL passes")
    if why := pg_cluster.why_not():
        pytest.skip(why)
    pair = pg_cluster.Pair()
    procs: list[subprocess.Popen] = []
    try:
        pair.start()
        _run_failover(pair, procs, tmp_path)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)
        pair.stop()


def _run_failover(pair: pg_cluster.Pair, procs: list[subprocess.Popen], tmp_path: Path) -> None:
    import psycopg

    primary, standby = pair.primary, pair.standby
    with psycopg.connect(primary.conninfo(), autocommit=True) as conn:
        conn.execute("CREATE DATABASE strait")
    notes = tmp_path / "notes"
    notes.mkdir()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.failover_settings",
        "FAILOVER_TEST_PORTS": f"{primary.port},{standby.port}",
        "FAILOVER_TEST_NOTES": str(notes),
        "STRAIT_STALE_AFTER": STALE_AFTER,
        "STRAIT_REAPER_INTERVAL": "1s",
        "PYTHONPATH": str(ROOT),
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("DATABASE_URL", None)
    _manage(env, "-m", "django", "migrate", "--verbosity", "0")
    db = Db(f"host=127.0.0.1,127.0.0.1 port={primary.port},{standby.port} dbname=strait"
            " user=postgres target_session_attrs=read-write connect_timeout=2")  # fmt: skip

    def start(name: str, *args: str) -> subprocess.Popen:
        """Start a process whose output goes to ``<name>.log``: a pipe nobody reads while
        the test waits fills up, and the next log line of a worker blocks all its threads."""
        with open(tmp_path / f"{name}.log", "w") as log:
            proc = subprocess.Popen(
                args, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip
        procs.append(proc)
        return proc

    def output(name: str) -> str:
        return (tmp_path / f"{name}.log").read_text(errors="replace")

    # The ghost, a worker of the lost host, first: it takes the ghost runs alone.
    ghost = start(
        "ghost", *worker_command("--worker-id", "ghost", "--queue", "ghost", "--concurrency", "4")
    )
    ghosts = json.loads(_manage(env, "-m", "tests.e2e.failover_triggers", "ghosts", str(GHOSTS)))
    ghost_ids = set(ghosts["ghosts"])
    _wait(lambda: db.count("status = 'executing' AND claimed_by = 'ghost'") == GHOSTS,
          START_TIMEOUT, lambda: f"ghost runs not executing; ghost exit {ghost.poll()}")  # fmt: skip
    workers = [
        start(name, *worker_command("--worker-id", name, "--concurrency", "8")) for name in "ab"
    ]
    acked_path, stop_path = tmp_path / "acked", tmp_path / "stop"
    triggers = start(
        "triggers", sys.executable, "-m", "tests.e2e.failover_triggers", str(RATE), str(acked_path),
        str(stop_path),
    )  # fmt: skip
    _wait(lambda: db.count("status = 'completed'") >= RATE, START_TIMEOUT,
          lambda: f"runs not completing; exits {[w.poll() for w in workers]}")  # fmt: skip
    time.sleep(BEFORE_KILL)

    # The lost host: the primary and the ghost worker, at once.
    killed_at = time.time()
    primary.kill()
    gone_at = time.time()  # a commit stamped later is the new primary's
    os.kill(ghost.pid, signal.SIGKILL)
    with psycopg.connect(standby.conninfo("strait"), autocommit=True) as conn:
        on_standby = conn.execute(
            "SELECT count(*) FROM django_strait_jobrun WHERE status = 'completed'"
        ).fetchone()[0]
    time.sleep(max(0.0, killed_at + NOTICED_AFTER - time.time()))
    standby.promote()
    promoted_at = time.time()
    time.sleep(AFTER_PROMOTE)
    stop_path.touch()
    triggers.wait(timeout=30)
    said = output("triggers")
    sent = json.loads(said.strip().splitlines()[-1])
    acks = [float(line.split()[1]) for line in acked_path.read_text().splitlines()]
    acked = {int(line.split()[0]) for line in acked_path.read_text().splitlines()}
    assert len(acked) == sent["acked"], said

    everything = acked | ghost_ids
    _wait(lambda: db.completed(everything) == len(everything), DRAIN_TIMEOUT,
          lambda: f"{len(everything) - db.completed(everything)} runs not completed; "
                  f"exits {[w.poll() for w in workers]}")  # fmt: skip
    assert all(w.poll() is None for w in workers), "a worker exited: it was restarted, not kept"
    for w in workers:
        w.send_signal(signal.SIGTERM)
    for w, name in zip(workers, "ab", strict=True):
        assert w.wait(timeout=60) == 0, output(name)[-3000:]
    outputs = [output(name) for name in "ab"]

    # 0 lost: every acknowledged trigger is a run on the new primary, completed.
    assert db.completed(acked) == len(acked)
    # No run twice at once; and how many ran again, one after the other.
    spans = read_spans(notes, killed={ghost.pid: killed_at})
    assert set(spans) >= everything, "a run completed without its handler noting it"
    overlapping = [run for run, times in spans.items() if overlaps(times)]
    assert overlapping == [], f"runs executed twice at once: {overlapping}"
    again = sorted(run for run, times in spans.items() if len(times) > 1 and run not in ghost_ids)
    # A run again at the same attempt had its claim forgotten by the failover: queued
    # again on the new primary while its worker executed it (a rescue spends an attempt).
    forgotten = claims_forgotten(notes)
    assert forgotten == [], f"claims the failover forgot (runs executed again): {forgotten}"
    # Without a restart: both workers listen on the new primary, and its reaper led there.
    # A listener says so once its LISTEN holds on a connection that takes writes: after
    # the kill, only the new primary does.
    relisten = [min(t for t in logged(out, LISTENED) if t > killed_at) for out in outputs]
    reaped = [t for out in outputs for t in logged(out, RESCUED) if t > killed_at]
    assert reaped, "no worker's reaper rescued runs after the kill"
    rescued = db.rescued(ghost_ids, after=killed_at)
    assert rescued == ghost_ids, f"the reaper rescued {rescued} of the ghost's {ghost_ids}"
    assert all(len(spans[run]) == 2 for run in ghost_ids)

    commits = db.commit_times(acked)
    first = min(t for t in commits if t > gone_at)
    before = sum(killed_at - 5 <= t < killed_at for t in commits) / 5
    full = next(
        (t for t in sorted(t for t in commits if t > gone_at)
         if sum(t <= u < t + 1 for u in commits) >= 0.9 * before),
        math.inf,
    )  # fmt: skip
    # Triggers that raised though their commit had landed: runs nobody was told of.
    unacknowledged = db.count("TRUE") - len(everything)
    caught_up = catch_up(acks, commits, killed_at=killed_at, promoted_at=promoted_at)
    print(
        f"failover: {len(acked)} triggers acknowledged ({sent['refused']} raised while no server "
        f"took writes; {unacknowledged} of those had committed), 0 lost; {on_standby} runs completed before the kill; promoted "
        f"{promoted_at - killed_at:.2f} s after the kill; first run completed on the new primary "
        f"{first - killed_at:.2f} s after the kill ({first - promoted_at:.2f} s after the "
        f"promotion); completions back to "
        f">= 90 % of {before:.0f}/s {full - killed_at:.2f} s after it; backlog back to its level "
        f"before the kill {caught_up - killed_at:.2f} s after it; run twice at once: 0; "
        f"run again after the failover: {len(again)} {again[:10]}; the ghost's {GHOSTS} runs "
        f"rescued by the new primary's reaper {min(reaped) - killed_at:.2f} s after the kill; "
        f"LISTEN back {min(relisten) - killed_at:.2f}-{max(relisten) - killed_at:.2f} s after it"
    )


class Db:
    """Reads of the pair through the same multi-host connection the workers use."""

    def __init__(self, conninfo: str) -> None:
        self.conninfo = conninfo

    def one(self, sql: str, *params):
        import psycopg

        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            return conn.execute(sql, params).fetchone()[0]

    def rows(self, sql: str, *params) -> list[tuple]:
        import psycopg

        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            return conn.execute(sql, params).fetchall()

    def count(self, where: str) -> int:
        return self.one(f"SELECT count(*) FROM django_strait_jobrun WHERE {where}")

    def completed(self, ids: set[int]) -> int:
        return self.one(
            "SELECT count(*) FROM django_strait_jobrun WHERE id = ANY(%s) AND status = 'completed'",
            list(ids),
        )

    def listening(self) -> int:
        """Sessions that took a LISTEN (their last statement checks that it holds)."""
        return self.one(
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%%pg_listening_channels%%'"
            " AND pid <> pg_backend_pid()"
        )

    def rescued(self, ids: set[int], *, after: float) -> set[int]:
        """Runs of ``ids`` with an attempt the reaper ended (``worker.lost``) after ``after``."""
        return {
            run
            for (run,) in self.rows(
                "SELECT run_id FROM django_strait_runattempt WHERE run_id = ANY(%s)"
                " AND error_type = 'worker.lost' AND finished_at > to_timestamp(%s)",
                list(ids),
                after,
            )
        }

    def commit_times(self, ids: set[int]) -> list[float]:
        """When each run's completion was committed (``track_commit_timestamp``)."""
        return [
            t
            for (t,) in self.rows(
                "SELECT extract(epoch FROM pg_xact_commit_timestamp(xmin))::float8"
                " FROM django_strait_jobrun WHERE id = ANY(%s)",
                list(ids),
            )
        ]


def catch_up(acks: list[float], commits: list[float], *, killed_at: float, promoted_at: float):
    """When, after the promotion, the runs acknowledged and not yet completed were back
    to as few as at most in the 5 s before the kill."""

    def backlog(t: float) -> int:
        return sum(a <= t for a in acks) - sum(c <= t for c in commits)

    steps = [killed_at - 5 + i * 0.05 for i in range(100)]
    most = max(backlog(t) for t in steps)
    return next((t for t in sorted(commits) if t > promoted_at and backlog(t) <= most), math.inf)


def read_spans(notes: Path, killed: dict[int, float]) -> dict[int, list[tuple[float, float]]]:
    """Each run's attempts as (start, end) wall-clock times, from every worker's notes.

    An attempt that started and never ended ended when its worker was killed
    (``killed``: pid -> when); of a worker not killed, it lasts to infinity.
    """
    began: dict[tuple[int, int, int], float] = {}
    spans: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for path in notes.iterdir():
        for line in path.read_text().splitlines():
            run, attempt, pid, what, at = line.split()
            key = (int(run), int(attempt), int(pid))
            if what == "start":
                began[key] = float(at)
            else:
                spans[int(run)].append((began.pop(key), float(at)))
    for (run, _, pid), at in began.items():
        spans[run].append((at, killed.get(pid, float("inf"))))
    return spans


def claims_forgotten(notes: Path) -> list[int]:
    """Runs of which one attempt started more than once."""
    starts = Counter(
        tuple(line.split()[:2])
        for path in notes.iterdir()
        for line in path.read_text().splitlines()
        if line.split()[3] == "start"
    )
    return sorted(int(run) for (run, _), n in starts.items() if n > 1)


def overlaps(times: list[tuple[float, float]]) -> bool:
    ordered = sorted(times)
    return any(later[0] < earlier[1] for earlier, later in zip(ordered, ordered[1:], strict=False))


def logged(output: str, message: str) -> list[float]:
    """When a worker logged lines holding ``message`` (its log's times are UTC)."""
    return [
        dt.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=dt.UTC).timestamp()
        for line in output.splitlines()
        if message in line and line[:4].isdigit()
    ]


def _manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=START_TIMEOUT * 2, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, f"{args} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _wait(check, timeout: float, why) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except Exception as exc:  # the pair is failing over: look again
            last = exc
        else:
            last = None
        if time.monotonic() > deadline:
            pytest.fail(f"still waiting after {timeout} s: {why()} (last error: {last})")
        time.sleep(0.2)
