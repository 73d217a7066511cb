"""Wake idle workers the moment runs are queued: PostgreSQL LISTEN/NOTIFY.

A database trigger (migration 0003) NOTIFYs a queue's name on the channel from
every statement that leaves due runs queued on it (trigger, replay, runs put
back at shutdown, admin actions), delivered when the transaction commits; each
worker LISTENs on a dedicated connection in a thread of its own and wakes its
claim loop for queues it serves. Polling stays the fallback (a
missed notification costs at most one poll interval) and the only mode on
SQLite.

The listening connection must be a direct one: behind PgBouncer in transaction
mode LISTEN does not survive. ``STRAIT["LISTEN_DATABASE"]`` names the
``DATABASES`` alias to listen on (default: the worker's own database); set it to
a direct alias when the main one goes through a pooler (docs/worker.md). After its
LISTEN the listener checks, in the next transaction, that the LISTEN holds; when
it does not (a pooler), it logs one error naming the setting, UNLISTENs and
stops: the worker polls. ``STRAIT["LISTEN"] = False`` never listens.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from django.db import connections

from django_strait.storage import queues as queue_states
from django_strait.storage.sql import through_pooler

logger = logging.getLogger(__name__)

CHANNEL = "django_strait"
#: A queue paused or resumed (``storage.queues``): every listener drops its process's copy
#: of the paused queues, and wakes for a queue it serves (a resumed queue's runs are due).
QUEUE_STATE_CHANNEL = queue_states.QUEUE_STATE_CHANNEL


class Listener:
    """A thread that LISTENs and calls ``wake()`` for notifications of ``queues``."""

    def __init__(
        self,
        alias: str,
        queues: Iterable[str],
        wake: Callable[[], None],
        *,
        retry_after: float = 5.0,
        first_retry: float = 0.5,
    ) -> None:
        self.alias = alias
        self.queues = frozenset(queues)  # empty: every queue
        self.wake = wake
        #: Waits between tries to LISTEN again: from ``first_retry``, doubling up to this.
        self.retry_after = retry_after
        self.first_retry = first_retry
        #: The LISTEN of the current connection holds (set once it is checked).
        self.listening = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="strait-listen", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        """LISTEN, and again after each lost connection: soon after one that held (a
        restart, a failover: the new server may already answer), backing off while
        the database stays away."""
        delay = self.first_retry
        while not self._stop.is_set():
            self.listening = False
            try:
                self._listen()
            except Exception:
                if self.listening:
                    delay = self.first_retry
                logger.warning(
                    "LISTEN connection to %r lost; polling until it is back (next try in %.1fs)",
                    self.alias,
                    delay,
                    exc_info=True,
                )
                self._stop.wait(delay)
                delay = min(delay * 2, self.retry_after)

    def _listen(self) -> None:
        import psycopg

        params = connections[self.alias].get_connection_params()
        with psycopg.connect(**params, autocommit=True) as conn:
            conn.execute(f"LISTEN {CHANNEL}")
            conn.execute(f"LISTEN {QUEUE_STATE_CHANNEL}")
            if not holds(conn):
                self._give_up(conn)
                return
            self.listening = True
            logger.info("listening for new runs on %r", self.alias)
            # Pauses are heard from now on; those sent while we were away are not.
            queue_states.listened(self.alias, True)
            try:
                # Wake once on (re)connect: NOTIFYs sent while we were away are lost.
                self.wake()
                while not self._stop.is_set():
                    for note in conn.notifies(timeout=1.0):
                        if note.channel == QUEUE_STATE_CHANNEL:
                            queue_states.forget()
                        if not self.queues or note.payload in self.queues:
                            self.wake()
            finally:
                queue_states.listened(self.alias, False)

    def _give_up(self, conn: Any) -> None:
        """Say once why wake-ups are off, take the LISTEN back, and stop: the worker polls."""
        logger.error(
            "LISTEN on database %r does not hold: its connection goes through a pooler "
            "(another server session answers each transaction), so wake-ups would never "
            'arrive. Polling instead. Set STRAIT["LISTEN_DATABASE"] to a DATABASES alias '
            'that connects to PostgreSQL directly, or STRAIT["LISTEN"] = False to poll '
            "without trying.",
            self.alias,
        )
        conn.execute(f"UNLISTEN {CHANNEL}")
        self._stop.set()


def holds(conn: Any) -> bool:
    """Whether the LISTEN just sent on psycopg connection ``conn`` holds in its next transaction.

    The channel must be listed, and by the session this connection opened: behind
    a transaction pooler the next transaction may run on the very server session
    that took the LISTEN, which lists it too, but it is not ours to keep.
    """
    listed = conn.execute("SELECT %s IN (SELECT pg_listening_channels())", [CHANNEL]).fetchone()[0]
    return bool(listed) and not through_pooler(conn)
