"""Fixtures shared by the tiers: a real HTTP server on 127.0.0.1, worker runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self):
        return json.loads(self.body)


@dataclass
class Reply:
    status: int = 200
    body: bytes = b'{"ok": true}'
    headers: dict[str, str] = field(default_factory=lambda: {"Content-Type": "application/json"})


class LocalServer:
    """A threaded HTTP/1.1 server on 127.0.0.1 that records every request.

    ``routes`` maps a path to a function of the request returning a :class:`Reply`.
    """

    def __init__(self) -> None:
        self.requests: list[Received] = []
        self.routes: dict[str, Callable[[Received], Reply]] = {}
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("Content-Length") or 0)
                got = Received(self.path, dict(self.headers.items()), self.rfile.read(length))
                with server._lock:
                    server.requests.append(got)
                route = server.routes.get(self.path, lambda _r: Reply())
                reply = route(got)
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)

            do_PUT = do_PATCH = do_POST  # noqa: N815

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def url(self, path: str = "/") -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}{path}"

    def run_ids(self) -> Counter:
        """How many times each run id was dispatched here."""
        with self._lock:
            return Counter(r.json["run_id"] for r in self.requests)


@pytest.fixture(autouse=True)
def forget_unreadable_rows() -> None:
    """Each test starts with no memory of rows set aside (ids repeat from test to test)."""
    from django_strait.storage import rows

    rows.forget()


#: django-strait over two aliases of this process: queue "two" on "jobs2" (tests/settings.py).
TWO_ALIASES = {"DATABASES": ["default", "jobs2"], "QUEUE_DATABASES": {"two": "jobs2"}}


@pytest.fixture
def two_aliases(settings) -> Iterator[tuple[str, str]]:
    """django-strait on "default" and "jobs2", with the router, each alias's ids numbered.

    The test must reach both databases: ``pytest.mark.django_db(databases=[...,
    "jobs2"])``. Jobs on queue "two" (``make_job(queue="two", using="jobs2")``)
    live on "jobs2", whose ids are above 2**48.
    """
    from django_strait.storage.ids import number_ids

    settings.STRAIT = {**getattr(settings, "STRAIT", {}), **TWO_ALIASES}
    settings.DATABASE_ROUTERS = ["django_strait.database.StraitRouter"]
    for using in TWO_ALIASES["DATABASES"]:
        number_ids(using)
    yield ("default", "jobs2")


@pytest.fixture
def http_server() -> Iterator[LocalServer]:
    server = LocalServer()
    server.thread.start()
    yield server
    server.httpd.shutdown()
    server.httpd.server_close()


def psycopg_connection(autocommit: bool = False) -> Any:
    """A psycopg connection of the test's own to Django's PostgreSQL database (the
    parameters Django connects with, less those only its own cursors take)."""
    import psycopg
    from django.db import connection

    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    return psycopg.connect(**params, autocommit=autocommit)


def wait_for_a_lock_wait(timeout: float = 10.0) -> None:
    """Return once a session of the test's PostgreSQL database waits for a lock.

    A test that wants a statement blocked behind another's lock waits for it
    here rather than for a fixed time: on a busy machine a thread may take
    longer than any sleep to reach its statement, and the test would then check
    the uncontended path instead.
    """
    with psycopg_connection(autocommit=True) as look:
        deadline = time.monotonic() + timeout
        while not look.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        ).fetchone()[0]:
            assert time.monotonic() < deadline, f"no session waited for a lock in {timeout} s"
            time.sleep(0.01)


def run_worker(**options) -> object:
    """Run a worker in this process until it has drained what is due (``--burst``)."""
    from django_strait.management.commands.run_strait_worker import build_config
    from django_strait.worker.engine import Worker

    options.setdefault("burst", True)
    options.setdefault("worker_id", "test-worker")
    return Worker(build_config(options)).run()


@pytest.fixture
def burst():
    """Drain due runs with an in-process worker; returns its stats."""
    return run_worker


@pytest.fixture
def worker_env(django_db_blocker) -> dict[str, str]:
    """Environment for a worker subprocess that uses this test's database."""
    from django.db import connection

    settings = connection.settings_dict
    if connection.vendor == "postgresql":
        url = (
            f"postgres://{settings['USER'] or 'postgres'}@{settings['HOST'] or '127.0.0.1'}:"
            f"{settings['PORT'] or 5432}/{settings['NAME']}"
        )
    else:
        url = f"sqlite:///{settings['NAME']}"
    env = dict(os.environ)
    env.update(
        DATABASE_URL=url,
        DJANGO_SETTINGS_MODULE="tests.settings",
        PYTHONPATH=str(ROOT),
        PYTHONUNBUFFERED="1",
    )
    return env


def worker_command(*args: str) -> list[str]:
    """The command line of a worker subprocess (tests.settings)."""
    return [sys.executable, "-m", "django", "run_strait_worker", *args]


def spawn_workers(env: dict[str, str], *args: str, count: int = 4) -> list[subprocess.Popen]:
    """Start ``count`` worker processes ``w0``.. with ``args``; they share this test's database."""
    return [
        subprocess.Popen(
            worker_command(*args, "--worker-id", f"w{n}"),
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for n in range(count)
    ]


def stop_workers(workers: list[subprocess.Popen]) -> list[str]:
    """Stop worker processes gracefully (SIGTERM); return their outputs."""
    for w in workers:
        w.terminate()
    return [w.communicate(timeout=60)[0] for w in workers]


def await_workers(workers: list[subprocess.Popen], timeout: float = 120) -> list[str]:
    """Wait for worker processes to exit by themselves (``--burst``); kill any still running.

    Each is killed by its pid if it has not exited within ``timeout`` seconds of the
    call, or if waiting fails: no test leaves a worker behind.
    """
    deadline = time.monotonic() + timeout
    outputs = []
    try:
        for w in workers:
            left = max(0.1, deadline - time.monotonic())
            outputs.append(w.communicate(timeout=left)[0])
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()
    return outputs


class SignalListener:
    """Records every send of one Django signal."""

    def __init__(self, signal) -> None:
        self.signal = signal
        self.calls: list[dict] = []

    def __call__(self, sender, **kwargs) -> None:
        kwargs.pop("signal")
        self.calls.append({"sender": sender, **kwargs})

    def by_run(self) -> dict[int, list[dict]]:
        found: dict[int, list[dict]] = {}
        for call in self.calls:
            found.setdefault(call["run_id"], []).append(call)
        return found


@pytest.fixture
def listen() -> Iterator:
    """``listen(signal)`` connects a SignalListener for the test's length."""
    connected: list[SignalListener] = []

    def connect(signal) -> SignalListener:
        listener = SignalListener(signal)
        signal.connect(listener, weak=False)
        connected.append(listener)
        return listener

    yield connect
    for listener in connected:
        listener.signal.disconnect(listener)


def unreadable_json(vendor: str) -> tuple[str, str]:
    """JSON text the database stores and Python cannot decode, with the error it raises.

    On PostgreSQL: nesting 5,000 deep, past the decoder's recursion limit. SQLite
    refuses JSON nested more than 1,000 deep, and Python 3.12+ decodes that much, so
    there a 5,000-digit number: valid JSON everywhere, and past Python's limit on
    integer strings (4,300 digits) on every supported version.
    """
    if vendor == "sqlite":
        return '{"a": ' + "9" * 5000 + "}", "ValueError"
    return '{"a": ' * 5000 + "1" + "}" * 5000, "RecursionError"
