"""Moving a large plain runs table to the partitioned layout while the queue runs.

``manage.py strait_partition`` calls :func:`move`. Migration 0020 partitions a
small table in one transaction (``layout.partition_if_small``); copying millions
of rows that way would stop the queue for minutes. Here the queue stops only
for the switch at the end:

1. **begin**: a schema of its own (``strait_move``) with a log of changed ids,
   and triggers on the plain runs and attempts tables that note every id an
   INSERT, UPDATE or DELETE touches (statement-level, over transition tables);
2. **build**: the partitioned tables, empty, in that schema under their final
   names (``layout.build``: leaves, a day for every day with finished rows);
3. **copy** the rows in batches of ids, each batch its own transaction;
4. **index** them (``layout.index``) and ANALYZE what the planner needs;
5. **catch up**: the noted ids, taken off the log, are deleted from the copy and
   copied again as they are now, in rounds, until few are left;
6. **switch**, under ``ACCESS EXCLUSIVE`` on both plain tables (a lock timeout:
   the queue waits at most that long for it): the last noted ids, the foreign
   keys into the plain tables dropped, the id sequences carried on, the plain
   tables moved to a schema ``strait_old`` and the new ones into the project's,
   the NOTIFY triggers made on them. More than ``LOCKED_BACKLOG`` noted rows at
   that point and it lets go and catches up again first;
7. **drop** ``strait_old`` and ``strait_move``, under the lock timeout and tried
   again on a deadlock: a worker's statement prepared before the switch still
   names the old tables and locks them once more as it finds its plan out of
   date. Should the drop never get its turn, the move is still done, and
   ``--abandon`` drops the old tables later.

Catching up is right whatever the order of events: an id is noted in the
transaction that changed its row, so a round that takes it off the log copies
that change or a later one, and a change committed after the round's statement
began is noted again for the next round. A move that died is started over:
``abandon`` drops what it made (and the triggers with it); the plain tables are
never written to by the move.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db import OperationalError, connections, transaction

from django_strait.storage.postgres import layout
from django_strait.storage.postgres.history import lock_busy
from django_strait.storage.postgres.layout import ATTEMPTS, RUNS, Shape

#: The schema the partitioned tables are built in, and the one the plain ones go to.
MOVE, OLD = "strait_move", "strait_old"
#: Noted rows left below which the move tries to switch.
SWITCH_BACKLOG = 1_000
#: Noted rows found under the switch's lock past which it lets go and catches up again.
LOCKED_BACKLOG = 5_000
#: Catch-up rounds before the switch (each takes up to CATCH_UP_BATCH noted rows).
CLOSING_ROUNDS = 20
CATCH_UP_BATCH = 10_000
#: Times the switch is tried (a lock timeout, or too many rows noted meanwhile).
SWITCH_TRIES = 20
#: The longest a step waits for a lock unless told (``strait_partition --lock-timeout``).
LOCK_TIMEOUT_MS = 2000
#: Times the drop of what the move made is tried (a lock timeout, or a deadlock).
DROP_TRIES = 20
#: How often the copy says how far it has come.
PROGRESS_EVERY = 10.0
#: The tables the move copies, by their number in the log.
TABLES = (RUNS, ATTEMPTS)


class MoveError(Exception):
    """The move cannot go on; the message says why and what to do."""


@dataclass
class Moved:
    """What a move did."""

    runs: int = 0
    attempts: int = 0
    caught_up: int = 0
    switch_tries: int = 0
    locked_ms: float = 0.0
    seconds: float = 0.0
    steps: list[str] = field(default_factory=list)


def leftovers(cursor: Any) -> list[str]:
    """The schemas of a move that did not finish (``strait_move``, ``strait_old``)."""
    cursor.execute(
        "SELECT nspname FROM pg_namespace WHERE nspname IN (%s, %s) ORDER BY nspname", [MOVE, OLD]
    )
    return [row[0] for row in cursor.fetchall()]


def abandon(
    alias: str, lock_timeout_ms: int = LOCK_TIMEOUT_MS, tries: int = DROP_TRIES
) -> list[str]:
    """Drop what an unfinished move made (its triggers on the plain tables go with
    ``strait_move``); return the schemas dropped. After a switch, ``strait_old``
    holds the plain tables no longer used.

    The drop waits at most ``lock_timeout_ms`` for each table's lock, and is tried
    again while a lock stays busy or it meets a deadlock: just after the switch, a
    worker's prepared statement still names the old tables, and locks them as it
    finds its plan out of date, in its own order (MoveError after ``tries``)."""
    dropped: list[str] = []

    def drop(cursor: Any) -> None:
        dropped[:] = leftovers(cursor)
        for schema in dropped:
            cursor.execute(f"DROP SCHEMA {schema} CASCADE")

    _locked(alias, lock_timeout_ms, drop, f"dropping {MOVE} and {OLD}", tries)
    return dropped


def move(
    alias: str,
    *,
    batch_size: int,
    lock_timeout_ms: int,
    say: Callable[[str], None] = lambda line: None,
) -> Moved:
    """Move the plain runs and attempts tables of ``alias`` to the partitioned layout."""
    return _Mover(alias, batch_size, lock_timeout_ms, say).run()


class _Mover:
    def __init__(
        self, alias: str, batch_size: int, lock_timeout_ms: int, say: Callable[[str], None]
    ) -> None:
        self.alias = alias
        self.batch_size = batch_size
        self.lock_timeout_ms = lock_timeout_ms
        self.say = say
        self.done = Moved()

    def run(self) -> Moved:
        began = time.monotonic()
        with self._cursor() as cursor:
            cursor.execute("SELECT current_schema()")
            (self.home,) = cursor.fetchone()
            self.shapes = {table: _shape(cursor, table) for table in TABLES}
        self._begin()
        self._build()
        self.done.runs = self._copy(RUNS)
        self.done.attempts = self._copy(ATTEMPTS)
        self._index()
        self._switch()
        try:
            abandon(self.alias, self.lock_timeout_ms)
        except MoveError as exc:
            # The move is done; only the old tables' disk waits for a quieter time.
            self._step(
                f"The plain tables are left in schema {OLD} ({exc}): "
                "`strait_partition --abandon` drops them."
            )
        with self._cursor() as cursor:
            # Catching up left a dead version in the live leaf, and a dead entry in its
            # claim index, for every run the queue moved meanwhile: gone before workers
            # claim through them (as the leader's vacuum would, without ANALYZE).
            vacuumed = time.monotonic()
            cursor.execute(f"VACUUM {RUNS}_live")
        self._step(f"Live runs vacuumed in {time.monotonic() - vacuumed:.1f} s.")
        self.done.seconds = time.monotonic() - began
        return self.done

    def _cursor(self):
        return connections[self.alias].cursor()

    def _step(self, line: str) -> None:
        self.done.steps.append(line)
        self.say(line)

    # -- 1. begin -------------------------------------------------------------------

    def _begin(self) -> None:
        """The log and its triggers, under the lock timeout (CREATE TRIGGER waits for
        the writes in flight), tried again while the lock is busy."""

        def begin(cursor: Any) -> None:
            cursor.execute(f"CREATE SCHEMA {MOVE}")
            cursor.execute(
                f"CREATE TABLE {MOVE}.changed (seq bigserial PRIMARY KEY, "
                "tab smallint NOT NULL, id bigint NOT NULL)"
            )
            for number, table in enumerate(TABLES):
                for rows in ("came", "gone"):
                    cursor.execute(
                        f"CREATE FUNCTION {MOVE}.note_{rows}_{number}() RETURNS trigger "
                        f"LANGUAGE plpgsql AS $$ BEGIN INSERT INTO {MOVE}.changed (tab, id) "
                        f"SELECT {number}, id FROM {rows}; RETURN NULL; END $$"
                    )
                for event, rows in (("INSERT", "NEW"), ("UPDATE", "NEW"), ("DELETE", "OLD")):
                    name = "came" if rows == "NEW" else "gone"
                    cursor.execute(
                        f"CREATE TRIGGER strait_move_{event.lower()} AFTER {event} ON {table} "
                        f"REFERENCING {rows} TABLE AS {name} FOR EACH STATEMENT "
                        f"EXECUTE FUNCTION {MOVE}.note_{name}_{number}()"
                    )

        self._locked(begin, "the triggers that note changes")
        self._step("Noting changes to runs and attempts from now on.")

    # -- 2. build -------------------------------------------------------------------

    def _build(self) -> None:
        with transaction.atomic(using=self.alias), self._cursor() as cursor:
            cursor.execute(f"SET LOCAL search_path TO {MOVE}, {self.home}")
            layout.build(cursor, f"{self.home}.{RUNS}", f"{self.home}.{ATTEMPTS}")
            days = len(layout.ranges_of(cursor, layout.HISTORY))
        self._step(f"Partitioned tables made, {days} day(s) of history ranges.")

    # -- 3. copy --------------------------------------------------------------------

    def _copy(self, table: str) -> int:
        with self._cursor() as cursor:
            cursor.execute(f"SELECT min(id), max(id), count(*) FROM {self.home}.{table}")
            low, high, total = cursor.fetchone()
        if low is None:
            return 0
        copied, began, said = 0, time.monotonic(), time.monotonic()
        for start in range(low, high + 1, self.batch_size):
            with transaction.atomic(using=self.alias), self._cursor() as cursor:
                cursor.execute(
                    f"INSERT INTO {MOVE}.{table} SELECT * FROM {self.home}.{table} "
                    "WHERE id >= %s AND id < %s",
                    [start, start + self.batch_size],
                )
                copied += cursor.rowcount
            if time.monotonic() - said >= PROGRESS_EVERY:
                said = time.monotonic()
                rate = copied / (said - began)
                self.say(f"  {table}: copied {copied:,} of ~{total:,} ({rate:,.0f} rows/s)")
        self._step(f"Copied {copied:,} rows of {table} in {time.monotonic() - began:.1f} s.")
        return copied

    # -- 4. index -------------------------------------------------------------------

    def _index(self) -> None:
        began = time.monotonic()
        with transaction.atomic(using=self.alias), self._cursor() as cursor:
            cursor.execute(f"SET LOCAL search_path TO {MOVE}, {self.home}")
            layout.index(cursor, self.shapes[RUNS], self.shapes[ATTEMPTS])
        with self._cursor() as cursor:
            # Statistics for the history and kept leaves and attempts; the live leaf is
            # vacuumed only (its row count and visibility), as the leader does: statistics
            # that saw few queued runs turn the claim off its index (docs/operations.md).
            for leaf in (f"{RUNS}_kept", layout.HISTORY, ATTEMPTS):
                cursor.execute(f"ANALYZE {MOVE}.{leaf}")
            cursor.execute(f"VACUUM {MOVE}.{RUNS}_live")
        self._step(f"Indexes made and history analyzed in {time.monotonic() - began:.1f} s.")

    # -- 5. catch up ----------------------------------------------------------------

    def _catch_up_round(self, cursor: Any, limit: int | None) -> int:
        """Copy again the rows noted (up to ``limit``, else all), in the caller's
        transaction; return how many notes were taken."""
        take = f"SELECT seq FROM {MOVE}.changed ORDER BY seq" + (f" LIMIT {limit}" if limit else "")
        cursor.execute(
            f"WITH taken AS (DELETE FROM {MOVE}.changed WHERE seq IN ({take}) RETURNING tab, id) "
            "SELECT tab, array_agg(DISTINCT id), count(*) FROM taken GROUP BY tab"
        )
        noted = 0
        for number, ids, count in cursor.fetchall():
            table = TABLES[number]
            cursor.execute(f"DELETE FROM {MOVE}.{table} WHERE id = ANY(%s)", [ids])
            cursor.execute(
                f"INSERT INTO {MOVE}.{table} SELECT * FROM {self.home}.{table} WHERE id = ANY(%s)",
                [ids],
            )
            noted += count
        return noted

    def _catch_up(self) -> None:
        """Rounds until fewer than ``SWITCH_BACKLOG`` notes are left (or ``CLOSING_ROUNDS``)."""
        for _ in range(CLOSING_ROUNDS):
            with transaction.atomic(using=self.alias), self._cursor() as cursor:
                taken = self._catch_up_round(cursor, CATCH_UP_BATCH)
                self.done.caught_up += taken
                cursor.execute(f"SELECT count(*) FROM {MOVE}.changed")
                (left,) = cursor.fetchone()
            if left < SWITCH_BACKLOG:
                return

    # -- 6. switch ------------------------------------------------------------------

    def _switch(self) -> None:
        for tries in range(1, SWITCH_TRIES + 1):
            self._catch_up()
            self.done.switch_tries = tries
            try:
                self._locked(self._switch_now, "the switch", tries=1)
            except _Behind as behind:
                self.say(f"  {behind.left:,} rows changed meanwhile: catching up again")
                continue
            except MoveError:
                if tries == SWITCH_TRIES:
                    raise
                self.say("  the tables were busy: catching up and trying again")
                continue
            self._step(
                f"Switched: runs and attempts were locked for {self.done.locked_ms:.0f} ms; "
                f"{self.done.caught_up:,} changed rows copied again on the way."
            )
            return
        raise MoveError(
            f"the switch did not get its turn in {SWITCH_TRIES} tries: the queue changes "
            "rows faster than the move catches up. Try again at a quieter time, or with a "
            "longer --lock-timeout."
        )

    def _switch_now(self, cursor: Any) -> None:
        # Attempts first: the order a record takes them (history.detach_day).
        cursor.execute(
            f"LOCK TABLE {self.home}.{ATTEMPTS}, {self.home}.{RUNS} IN ACCESS EXCLUSIVE MODE"
        )
        locked = time.monotonic()
        cursor.execute(f"SELECT count(*) FROM {MOVE}.changed")
        (left,) = cursor.fetchone()
        if left > LOCKED_BACKLOG:
            raise _Behind(left)
        self.done.caught_up += self._catch_up_round(cursor, None)
        for table in TABLES:
            layout.drop_foreign_keys_into(cursor, f"{self.home}.{table}")
            cursor.execute(
                f"SELECT setval(pg_get_serial_sequence('{MOVE}.{table}', 'id'), s.last_value, "
                f"s.is_called) FROM (SELECT last_value, is_called FROM "
                f"{_sequence(cursor, f'{self.home}.{table}')}) AS s"
            )
        cursor.execute(f"CREATE SCHEMA {OLD}")
        for table in TABLES:
            cursor.execute(f"ALTER TABLE {self.home}.{table} SET SCHEMA {OLD}")
        cursor.execute(
            "SELECT relname FROM pg_class WHERE relnamespace = %s::regnamespace "
            "AND relkind IN ('r', 'p') AND relname <> 'changed'",
            [MOVE],
        )
        for (name,) in cursor.fetchall():
            cursor.execute(f"ALTER TABLE {MOVE}.{name} SET SCHEMA {self.home}")
        for table in TABLES:
            for trigger in self.shapes[table].triggers:
                cursor.execute(trigger)
        self.done.locked_ms = (time.monotonic() - locked) * 1000

    def _locked(self, step: Callable[[Any], None], what: str, tries: int = 5) -> None:
        _locked(self.alias, self.lock_timeout_ms, step, what, tries)


def _locked(
    alias: str, lock_timeout_ms: int, step: Callable[[Any], None], what: str, tries: int
) -> None:
    """Run ``step`` in a transaction under the lock timeout; tried ``tries`` times
    while the lock stays busy (or a deadlock ends it), then MoveError."""
    for attempt in range(1, tries + 1):
        try:
            with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
                cursor.execute(f"SET LOCAL lock_timeout = '{lock_timeout_ms}ms'")
                step(cursor)
            return
        except OperationalError as exc:
            if not _lock_busy(exc):
                raise
            if attempt < tries:
                time.sleep(0.2 * attempt)
    raise MoveError(
        f"{what}: runs or attempts stayed locked past --lock-timeout "
        f"({lock_timeout_ms} ms) {tries} time(s)"
    )


class _Behind(Exception):
    def __init__(self, left: int) -> None:
        super().__init__(left)
        self.left = left


def _shape(cursor: Any, table: str) -> Shape:
    """``layout.shape_of`` without the move's own triggers (a move started over)."""
    shape = layout.shape_of(cursor, table)
    triggers = [t for t in shape.triggers if not t.startswith("CREATE TRIGGER strait_move_")]
    return Shape(shape.indexes, triggers)


def _sequence(cursor: Any, table: str) -> str:
    cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [table])
    return cursor.fetchone()[0]


def _lock_busy(exc: BaseException) -> bool:
    """Whether ``exc`` is a lock timeout, or a deadlock with a record (40P01)."""
    return lock_busy(exc) or getattr(exc.__cause__, "sqlstate", None) == "40P01"
