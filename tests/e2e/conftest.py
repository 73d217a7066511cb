"""Run the example project as a user would: ``manage.py`` in subprocesses, a fresh SQLite file."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
MANAGE_TIMEOUT_SECS = 120


@dataclass(frozen=True)
class ExampleProject:
    """The example project pointed at one SQLite file."""

    db_path: Path
    env: dict[str, str]

    def command(self, *args: str) -> list[str]:
        """Return the command line of ``manage.py <args>``."""
        return [sys.executable, str(REPO_ROOT / "manage.py"), *args]

    def run(self, *args: str, timeout: float = MANAGE_TIMEOUT_SECS) -> subprocess.CompletedProcess:
        """Run ``manage.py <args>`` to the end and return what it did, whatever its exit code."""
        return subprocess.run(
            self.command(*args),
            cwd=REPO_ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    def start(self, *args: str, **popen: Any) -> subprocess.Popen:
        """Start ``manage.py <args>`` in the background (``popen``: more Popen arguments)."""
        return subprocess.Popen(
            self.command(*args), cwd=REPO_ROOT, env=self.env, stdin=subprocess.DEVNULL, **popen
        )

    def manage(self, *args: str, timeout: float = MANAGE_TIMEOUT_SECS) -> str:
        """Run ``manage.py <args>`` to the end; return its stdout, failing on a non-zero exit."""
        done = self.run(*args, timeout=timeout)
        assert done.returncode == 0, (
            f"manage.py {' '.join(args)} exited {done.returncode}\n"
            f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
        )
        return done.stdout

    def rows(self, sql: str, *params: Any) -> list[dict[str, Any]]:
        """Read rows straight from the SQLite file (what the project wrote, not what it says)."""
        # A sqlite3 connection's "with" ends its transaction, not the connection: Python
        # 3.13 warns about every one left for the collector to close.
        with contextlib.closing(sqlite3.connect(self.db_path, timeout=30)) as db:
            db.row_factory = sqlite3.Row
            return [dict(row) for row in db.execute(sql, params)]

    def runs(self) -> list[dict[str, Any]]:
        """Every run with its job's name, payload and result decoded."""
        rows = self.rows(
            "SELECT r.id, j.name AS job, r.status, r.attempt, r.payload, r.result, r.error_type,"
            " r.last_error FROM django_strait_jobrun r JOIN django_strait_job j ON j.id = r.job_id"
            " ORDER BY r.id"
        )
        for row in rows:
            row["payload"] = json.loads(row["payload"])
            row["result"] = None if row["result"] is None else json.loads(row["result"])
        return rows


@pytest.fixture
def example_project(tmp_path: Path) -> ExampleProject:
    """The example project on a fresh, empty SQLite file under ``tmp_path``."""
    db_path = tmp_path / "example.sqlite3"
    env = dict(os.environ)
    env.update(
        DATABASE_URL=f"sqlite:///{db_path}",
        # pytest-django exported the test settings; the subprocesses are the example project.
        DJANGO_SETTINGS_MODULE="example_project.settings",
        PYTHONUNBUFFERED="1",
    )
    return ExampleProject(db_path=db_path, env=env)


@pytest.fixture
def wait_until() -> Callable[..., None]:
    """Poll ``check()`` until it is true or ``timeout`` seconds pass (then fail with ``why()``)."""
    import time

    def wait(check: Callable[[], bool], *, timeout: float, why: Callable[[], str]) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                pytest.fail(f"still waiting after {timeout} s: {why()}")
            time.sleep(0.2)

    return wait


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen]]:
    """Worker processes a test starts; at the end, every one still running and every
    child of their process pools is killed by pid (also when the test failed)."""
    from tests.process_helpers import strait_children

    procs: list[subprocess.Popen] = []
    yield procs
    for proc in procs:
        children = strait_children(proc.pid)
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)
        for pid in children + strait_children(proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def start_worker(
    started: list[subprocess.Popen], env: dict[str, str], *args: str
) -> subprocess.Popen:
    """Start ``run_strait_worker <args>`` (output piped), noted in ``started`` to be stopped."""
    from tests.conftest import ROOT, worker_command

    proc = subprocess.Popen(
        worker_command(*args),
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    started.append(proc)
    return proc


@pytest.fixture
def pgbouncer() -> Iterator[Any]:
    """A PgBouncer in transaction mode on 127.0.0.1 in front of this test's PostgreSQL,
    stopped by its pid at the end (also when the test failed)."""
    from django.db import connection

    from tests.process_helpers import PGBOUNCER, start_pgbouncer

    if connection.vendor != "postgresql":
        pytest.skip("PgBouncer pools PostgreSQL connections; SQLite has none")
    if not os.access(PGBOUNCER, os.X_OK):
        missing = f"no pgbouncer binary at {PGBOUNCER} (the Debian package pgbouncer)"
        if os.environ.get("TESTS_REQUIRE_PGBOUNCER"):
            pytest.fail(f"{missing}, and TESTS_REQUIRE_PGBOUNCER says CI must have it")
        pytest.skip(missing)
    server = connection.settings_dict
    bouncer = start_pgbouncer(server["HOST"] or "127.0.0.1", int(server["PORT"] or 5432))
    try:
        yield bouncer
    finally:
        bouncer.stop()
