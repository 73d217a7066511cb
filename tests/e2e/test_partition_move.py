"""``strait_partition`` moves a busy plain runs table to the partitioned layout.

A database of its own, migrated with the plain table (``STRAIT_PARTITION_RUNS=false``),
holds finished history over several days, dead letters and queued runs; a real
worker drains them and another connection keeps triggering runs while the
command copies in small batches. Afterwards: the table is partitioned, every run
is there once, every run was executed once, and ids go on from where they were.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection

from tests.conftest import ROOT
from tests.e2e.conftest import start_worker

pytestmark = [pytest.mark.slow, pytest.mark.layout_free, pytest.mark.postgres]

HISTORY, DEAD, QUEUED = 30_000, 300, 2_000
DRAIN_TIMEOUT = 120
RUN_COLUMNS = (
    "job_id, payload, status, attempt, attempts_before_replay, priority, queue, available_at, "
    "claimed_by, dequeued_at, started_at, finished_at, cancel_requested, result, last_error, "
    "error_type, endpoint_used, replay_count, replayed_by, created_at, updated_at, preset"
)
#: Runs of one status, ``days`` back (spread over them), ``n`` of them.
SEED_RUNS = f"""
INSERT INTO django_strait_jobrun ({RUN_COLUMNS})
SELECT %(job)s, jsonb_build_object('i', g), %(status)s::text, %(attempt)s, 0, 0, 'default', t,
       'seed', t, t, CASE WHEN %(status)s::text = 'queued' THEN NULL ELSE t END, false, NULL, '',
       '', '', 0, '', t, t, ''
FROM generate_series(1, %(n)s) AS g,
     LATERAL (SELECT now() - (g %% %(days)s) * interval '1 day' - g * interval '1 ms' AS t) AS at
"""
SEED_ATTEMPTS = """
INSERT INTO django_strait_runattempt (run_id, number, endpoint, started_at, finished_at,
    duration_ms, outcome, error_type, error, response_excerpt, worker, preset)
SELECT id, 1, '', started_at, finished_at, 5, 'succeeded', '', '', '', 'seed', ''
FROM django_strait_jobrun WHERE status <> 'queued'
"""
ONE_RUN = f"""
INSERT INTO django_strait_jobrun ({RUN_COLUMNS})
VALUES (%(job)s, '{{}}', 'queued', 0, 0, 0, 'default', now(), '', NULL, NULL, NULL, false,
        NULL, '', '', '', 0, '', now(), now(), '')
RETURNING id
"""


@pytest.fixture
def plain_database() -> Iterator[str]:
    """A database of this test's own, dropped at the end."""
    settings = connection.settings_dict
    name = f"test_strait_move_{os.getpid()}"
    server = f"host={settings['HOST'] or '127.0.0.1'} port={settings['PORT'] or 5432} " \
             f"user={settings['USER'] or 'postgres'}"  # fmt: skip
    with psycopg.connect(f"{server} dbname=postgres", autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.execute(f"CREATE DATABASE {name}")
    yield f"{server} dbname={name}"
    with psycopg.connect(f"{server} dbname=postgres", autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def db(plain_database: str) -> Iterator[psycopg.Connection]:
    """A connection to it, closed also when the test fails."""
    with psycopg.connect(plain_database, autocommit=True) as conn:
        yield conn


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "django", *args], cwd=ROOT, env=env, capture_output=True,
        text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
    return done.stdout


def test_strait_partition__moves_a_busy_plain_table_and_loses_no_run(plain_database, db, started):
    if connection.vendor != "postgresql":
        pytest.skip("the runs table is partitioned on PostgreSQL only")
    params = psycopg.conninfo.conninfo_to_dict(plain_database)
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{params['user']}@{params['host']}:{params['port']}/"
        f"{params['dbname']}",
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "PYTHONPATH": str(ROOT),
        "PYTHONUNBUFFERED": "1",
        "STRAIT_PARTITION_RUNS": "false",
    }
    manage(env, "migrate", "-v0")
    manage(env, "strait_sync")
    [(job,)] = db.execute("SELECT id FROM django_strait_job WHERE name = 'test-noop'").fetchall()
    for status, n, attempt in (("completed", HISTORY, 1), ("dead_letter", DEAD, 1),
                               ("queued", QUEUED, 0)):  # fmt: skip
        db.execute(SEED_RUNS, {"job": job, "status": status, "n": n, "attempt": attempt,
                               "days": 4})  # fmt: skip
    db.execute(SEED_ATTEMPTS)
    seeded = {row[0] for row in db.execute("SELECT id FROM django_strait_jobrun")}
    start_worker(started, env, "--worker-id", "mover", "--concurrency", "10")

    # Runs triggered throughout the move, from another connection.
    triggered: list[int] = []
    stop = threading.Event()

    def keep_triggering() -> None:
        with psycopg.connect(plain_database, autocommit=True) as other:
            while not stop.is_set():
                triggered.append(other.execute(ONE_RUN, {"job": job}).fetchone()[0])
                time.sleep(0.002)

    thread = threading.Thread(target=keep_triggering)
    thread.start()
    try:
        moved = manage({**env, "STRAIT_PARTITION_RUNS": "true"}, "strait_partition",
                       "--batch-size", "1000", "--in-one-go-below", "0")  # fmt: skip
    finally:
        stop.set()
        thread.join(timeout=30)
    [after] = db.execute(ONE_RUN, {"job": job}).fetchone()
    deadline = time.monotonic() + DRAIN_TIMEOUT
    while db.execute(
        "SELECT count(*) FROM django_strait_jobrun WHERE status IN ('queued', 'executing')"
    ).fetchone()[0]:
        assert time.monotonic() < deadline, "the worker did not drain the runs after the move"
        time.sleep(0.2)

    def one(sql: str):
        return db.execute(sql).fetchone()[0]

    ids = [row[0] for row in db.execute("SELECT id FROM django_strait_jobrun")]
    statuses = dict(db.execute("SELECT status, count(*) FROM django_strait_jobrun GROUP BY 1"))
    twice = one(
        "SELECT count(*) FROM (SELECT run_id FROM django_strait_runattempt "
        "WHERE worker <> 'seed' GROUP BY run_id HAVING count(*) > 1) AS t"
    )
    executed = one(
        "SELECT count(DISTINCT run_id) FROM django_strait_runattempt WHERE worker <> 'seed'"
    )
    caught_up = int(re.search(r"([\d,]+) changed rows copied again", moved)[1].replace(",", ""))

    assert "Switched: runs and attempts were locked" in moved, moved
    assert (
        one_of(
            plain_database, "SELECT relkind FROM pg_class WHERE relname = 'django_strait_jobrun'"
        )
        == "p"
    )
    assert (
        one_of(plain_database, "SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'strait_%%'")
        == 0
    )
    assert len(ids) == len(set(ids)) == len(seeded) + len(triggered) + 1
    assert set(ids) == seeded | set(triggered) | {after}
    assert after > max(seeded | set(triggered))
    assert statuses == {"completed": HISTORY + QUEUED + len(triggered) + 1, "dead_letter": DEAD}
    assert (executed, twice) == (QUEUED + len(triggered) + 1, 0)
    assert caught_up > 0 and len(triggered) > 0


def one_of(dsn: str, sql: str):
    with psycopg.connect(dsn) as db:
        return db.execute(sql).fetchone()[0]
