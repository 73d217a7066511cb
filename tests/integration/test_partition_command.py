"""``manage.py strait_partition``: what it refuses and says (the move itself:
tests/e2e/test_partition_move.py)."""

from __future__ import annotations

import threading
import time
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, connections

from django_strait.conf import strait_settings
from django_strait.storage.postgres import LOCK_NAMESPACE, lock_key, move
from django_strait.storage.postgres.layout import is_partitioned
from tests.conftest import psycopg_connection

pytestmark = pytest.mark.django_db


def partition(*args: str) -> str:
    out = StringIO()
    call_command("strait_partition", *args, stdout=out)
    return out.getvalue()


def postgres_or_skip() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the move is PostgreSQL's")


def partitioned() -> bool:
    with connection.cursor() as cursor:
        return is_partitioned(cursor)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--lock-timeout", "5ms"], "--lock-timeout: '5ms' is out of range; allowed: a "
                                    "duration from 10ms to 60s"),
        (["--lock-timeout", "soon"], "--lock-timeout"),
        (["--batch-size", "0"], "--batch-size: 0 is out of range: use 1 to 1000000"),
        (["--in-one-go-below", "-1"], "--in-one-go-below: -1 is out of range"),
    ],
)  # fmt: skip
def test_strait_partition__bad_options_name_the_option_and_what_is_allowed(args, said):
    with pytest.raises(CommandError, match=said.replace("(", r"\(")):
        partition(*args)


def test_strait_partition__on_sqlite_says_it_is_for_postgresql():
    if connection.vendor == "postgresql":
        pytest.skip("the SQLite pass's test")
    with pytest.raises(CommandError, match="partitioned on PostgreSQL only"):
        partition()


def test_strait_partition__a_partitioned_table_is_left_as_it_is():
    if connection.vendor != "postgresql" or not partitioned():
        pytest.skip("the partitioned PostgreSQL pass's test")

    assert partition() == "The runs table is partitioned already.\n"
    assert partition("--abandon") == "Nothing was left to drop.\n"


def test_strait_partition__refuses_where_partition_runs_is_off(settings):
    if connection.vendor != "postgresql" or partitioned():
        pytest.skip("the plain PostgreSQL pass's test")
    settings.STRAIT = {**getattr(settings, "STRAIT", {}), "PARTITION_RUNS": False}

    with pytest.raises(CommandError, match=r"STRAIT\['PARTITION_RUNS'\] is False"):
        partition()
    assert not partitioned()


def test_strait_partition__refuses_while_another_runs_and_abandon_too():
    """A second command, --abandon included (it would drop the schema the running
    move builds), is refused while the first holds the database's partition lock."""
    postgres_or_skip()
    with psycopg_connection(autocommit=True) as running:
        running.execute("SELECT pg_advisory_lock(%s, %s)", [LOCK_NAMESPACE, lock_key("partition")])
        # (Without PARTITION_RUNS the move itself is refused for that first.)
        for args in ([], ["--abandon"]) if strait_settings.PARTITION_RUNS else (["--abandon"],):
            with pytest.raises(CommandError, match="Another strait_partition is running"):
                partition(*args)
        # Unlocked here, not by the close: the server ends the session after close()
        # returns, and the next command could still find the lock held (CI, 11-28).
        running.execute(
            "SELECT pg_advisory_unlock(%s, %s)", [LOCK_NAMESPACE, lock_key("partition")]
        )
    assert partition("--abandon") == "Nothing was left to drop.\n"


@pytest.mark.django_db(transaction=True)
def test_abandon__drops_the_old_tables_through_a_deadlock_with_a_stale_statement():
    """Just after the switch a worker's prepared statement still names the old tables,
    and locks them again, in its own order, as it finds its plan out of date. The drop
    of ``strait_old`` met it in a deadlock and the whole command failed (CI, 11-27):
    it must be tried again instead."""
    postgres_or_skip()
    with psycopg_connection(autocommit=True) as setup:
        setup.execute(f"CREATE SCHEMA {move.OLD}")
        for table in ("runs", "attempts"):
            setup.execute(f"CREATE TABLE {move.OLD}.{table} (id bigint)")
    worker = psycopg_connection()
    outcome: list[object] = []

    def drop() -> None:
        try:
            outcome.append(move.abandon("default", lock_timeout_ms=5000))
        except Exception as exc:  # noqa: BLE001 - the test reports it
            outcome.append(exc)
        finally:
            connections.close_all()

    dropper = threading.Thread(target=drop)
    try:
        # The drop locks runs, then waits for attempts, which the "worker" holds ...
        worker.execute(f"LOCK TABLE {move.OLD}.attempts IN ROW EXCLUSIVE MODE")
        dropper.start()
        with psycopg_connection(autocommit=True) as look:
            deadline = time.monotonic() + 10
            while not look.execute(
                "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = %s::regclass",
                [f"{move.OLD}.attempts"],
            ).fetchone()[0]:
                assert time.monotonic() < deadline, "the drop never waited for attempts"
                time.sleep(0.02)
            [(held,)] = look.execute(
                "SELECT count(*) FROM pg_locks WHERE granted AND pid <> %s AND relation = "
                "%s::regclass",
                [worker.info.backend_pid, f"{move.OLD}.runs"],
            ).fetchall()
        assert held == 1, "the drop did not hold runs while it waited"
        # ... which then wants runs: a deadlock, found by the drop, which waited first.
        worker.execute(f"LOCK TABLE {move.OLD}.runs IN ROW EXCLUSIVE MODE")
        worker.rollback()
        dropper.join(timeout=30)
    finally:
        worker.close()
        dropper.join(timeout=30)
        move.abandon("default")

    assert outcome == [[move.OLD]]


@pytest.mark.django_db(transaction=True)
def test_abandon__a_lock_held_past_its_tries_is_a_clear_error_and_drops_nothing():
    postgres_or_skip()
    with psycopg_connection(autocommit=True) as setup:
        setup.execute(f"CREATE SCHEMA {move.OLD}")
        setup.execute(f"CREATE TABLE {move.OLD}.runs (id bigint)")
    reader = psycopg_connection()
    try:
        reader.execute(f"SELECT count(*) FROM {move.OLD}.runs")  # a lock held to its end
        with pytest.raises(move.MoveError, match=r"past --lock-timeout \(10 ms\) 2 time"):
            move.abandon("default", lock_timeout_ms=10, tries=2)
        with connection.cursor() as cursor:
            assert move.leftovers(cursor) == [move.OLD]
    finally:
        reader.rollback()  # its lock goes now; a close() lets the server end the session later
        reader.close()
        dropped = move.abandon("default")
    assert dropped == [move.OLD]
