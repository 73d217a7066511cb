"""A worker started while its database is away waits for it, then works.

Workers restart in any order in production. Started before PostgreSQL answers,
a worker logs one line per try, backs off, and starts working when the
database comes; it never exits with a traceback.
"""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from contextlib import closing

import pytest
from django.db import connection

from django_strait import trigger
from tests.conftest import worker_command

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


class Forwarder:
    """A TCP forwarder on 127.0.0.1 to PostgreSQL, closed until ``open()``: a database that comes up."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        with closing(socket.socket()) as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self._server: socket.socket | None = None
        self._sockets: list[socket.socket] = []

    def open(self) -> None:
        self._server = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        for sock in [self._server, *self._sockets]:
            if sock is not None:
                _end(sock)

    def _accept(self) -> None:
        assert self._server is not None
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self._sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            _end(sink)


def _end(sock: socket.socket) -> None:
    # shutdown() wakes a recv() blocked in another thread and sends FIN; close() alone does neither.
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def wait_for_other_sessions_to_end(timeout: float = 10.0) -> None:
    """Let PostgreSQL end the forwarded sessions, so the test database can be dropped."""
    deadline = time.monotonic() + timeout
    with connection.cursor() as cursor:
        while time.monotonic() < deadline:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            if cursor.fetchone()[0] == 0:
                return
            time.sleep(0.1)


def test_worker__waits_for_a_database_that_is_not_up_yet_then_works(worker_env):
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL: a database server that is away, then comes")
    settings = connection.settings_dict
    forwarder = Forwarder((settings["HOST"] or "127.0.0.1", int(settings["PORT"] or 5432)))
    worker_env["DATABASE_URL"] = worker_env["DATABASE_URL"].replace(
        f":{settings['PORT'] or 5432}/", f":{forwarder.port}/"
    )
    run = trigger("test-noop", {})
    worker = subprocess.Popen(
        worker_command("--burst", "--worker-id", "early"),
        env=worker_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(worker.stdout), daemon=True)
    reader.start()
    try:
        # Two tries refused (at 0 and 0.5 s), however long the worker took to start.
        deadline = time.monotonic() + 60
        while sum("is not answering" in line for line in lines) < 2:
            assert worker.poll() is None, "".join(lines)  # still waiting, not exited
            assert time.monotonic() < deadline, "".join(lines)
            time.sleep(0.05)
        forwarder.open()
        worker.wait(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        reader.join(timeout=10)  # the pipe's end: the reader has every line
        worker.stdout.close()
        forwarder.close()
        wait_for_other_sessions_to_end()
    output = "".join(lines)

    assert worker.returncode == 0, output
    assert output.count("is not answering") >= 2, output
    assert "Traceback" not in output, output
    run.refresh_from_db()
    assert run.status == "completed"
