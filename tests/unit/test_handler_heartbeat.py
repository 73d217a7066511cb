"""``context.heartbeat()`` from a handler thread while the database is away: dropped, not raised."""

from __future__ import annotations

import logging
import threading

from django.db import OperationalError

from django_strait.worker import heartbeat
from django_strait.worker.heartbeat import Heartbeats


class AwayThenBack:
    """A storage whose first ``heartbeat`` finds the database gone (a failover), then works."""

    alias = "default"

    def __init__(self) -> None:
        self.failures = 1
        self.written: list[list[int]] = []

    def heartbeat(self, worker_id, run_ids, *, now):
        if self.failures:
            self.failures -= 1
            raise OperationalError("server closed the connection unexpectedly")
        self.written.append(list(run_ids))
        return len(run_ids)


def in_handler_thread(fn) -> None:
    """Call ``fn`` on a thread of its own, as a plain-function handler runs; re-raise what it raised."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if raised:
        raise raised[0]


def test_beat__with_the_database_away_is_logged_not_raised_into_the_handler(caplog, monkeypatch):
    storage = AwayThenBack()
    beats = Heartbeats("w", storage)
    monkeypatch.setattr(heartbeat, "MIN_INTERVAL", 0.0)

    with caplog.at_level(logging.WARNING):
        in_handler_thread(beats.for_run(7))  # the failover: the handler goes on
        in_handler_thread(beats.for_run(7))  # the database is back

    assert "heartbeat of run 7 not written" in caplog.text
    assert storage.written == [[7]]
