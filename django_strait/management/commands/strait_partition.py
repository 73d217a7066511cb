"""``manage.py strait_partition``: move a plain runs table to the partitioned layout.

Migration 0020 partitions a new or small install itself; a table of
``layout.IN_ONE_GO`` runs or more is left plain for this command, which copies
it in batches while workers go on, and locks the queue only for the switch
(``storage.postgres.move``; docs/operations.md, "Upgrading to the partitioned layout").

With several aliases (``STRAIT["DATABASES"]``) it moves each in turn, under a
line naming it; ``--database ALIAS`` moves that one.
"""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections, transaction

from django_strait.conf import strait_settings
from django_strait.database import placed
from django_strait.management.commands.run_strait_worker import (
    int_between,
    positive_int,
    served_aliases,
)
from django_strait.management.selection import add_database_option
from django_strait.rules.retry import PolicyError, parse_duration
from django_strait.storage.postgres import LOCK_NAMESPACE, layout, lock_key, move

#: --lock-timeout's bounds, in milliseconds.
LOCK_TIMEOUT_MS = (10, 60_000)


def lock_timeout(value: str) -> int:
    """Parse --lock-timeout: a duration from 10ms to 60s, in milliseconds."""
    low, high = LOCK_TIMEOUT_MS
    try:
        ms = round(parse_duration(value, field="--lock-timeout") * 1000)
    except PolicyError as exc:
        raise argparse.ArgumentTypeError(f"{exc.problem}; allowed: {exc.allowed}") from None
    if not low <= ms <= high:
        raise argparse.ArgumentTypeError(
            f"{value!r} is out of range; allowed: a duration from 10ms to 60s, such as 2s"
        )
    return ms


class Command(BaseCommand):
    help = (
        "Move the runs and attempts tables to the partitioned layout (PostgreSQL): in one "
        "transaction below --in-one-go-below runs, else copied in batches while workers "
        "go on, the queue locked only for the switch at the end."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--batch-size", type=positive_int(1_000_000), default=10_000,
            help="Rows copied per transaction (default 10000).",
        )  # fmt: skip
        parser.add_argument(
            "--lock-timeout", type=lock_timeout, default=move.LOCK_TIMEOUT_MS, metavar="DURATION",
            help="Longest the move waits for a lock, and so the longest the queue waits "
            "behind it at each try: 10ms to 60s (default 2s).",
        )  # fmt: skip
        parser.add_argument(
            "--in-one-go-below", type=int_between(0, 100_000_000), default=layout.IN_ONE_GO,
            metavar="RUNS",
            help=f"Partition in one transaction below this many runs (default {layout.IN_ONE_GO}).",
        )  # fmt: skip
        parser.add_argument(
            "--abandon", action="store_true",
            help="Drop what an unfinished move left (its schema and triggers), and stop.",
        )  # fmt: skip
        add_database_option(parser, "Move", "every one, in turn.")

    def handle(self, *args: Any, **options: Any) -> None:
        where = served_aliases(options["databases"])
        for alias in where:
            connection = connections[alias]
            if connection.vendor != "postgresql":
                raise CommandError(
                    "The runs table is partitioned on PostgreSQL only; "
                    f"database {alias!r} is {connection.vendor}."
                )
        if not options["abandon"] and not strait_settings.PARTITION_RUNS:
            raise CommandError(
                "STRAIT['PARTITION_RUNS'] is False: this install keeps the plain runs table. "
                "Set it to True (or unset STRAIT_PARTITION_RUNS) to move it."
            )
        for alias in where:
            if placed():
                self.stdout.write(f"On database {alias!r}:")
            self._on(alias, options)

    def _on(self, alias: str, options: dict[str, Any]) -> None:
        """Move (or with ``--abandon``, clean up) the runs table of ``alias``."""
        connection = connections[alias]
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_try_advisory_lock(%s, %s)", [LOCK_NAMESPACE, lock_key("partition")]
            )
            if not cursor.fetchone()[0]:
                # --abandon too: it would drop the schema that move is building.
                on = f" ({alias!r})" if placed() else ""
                raise CommandError(f"Another strait_partition is running on this database{on}.")
        try:
            if options["abandon"]:
                dropped = move.abandon(alias, options["lock_timeout"])
                said = f"Dropped {', '.join(dropped)}." if dropped else "Nothing was left to drop."
                self.stdout.write(said)
                return
            self._partition(alias, options)
        finally:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_advisory_unlock(%s, %s)", [LOCK_NAMESPACE, lock_key("partition")]
                )

    def _partition(self, alias: str, options: dict[str, Any]) -> None:
        with connections[alias].cursor() as cursor:
            partitioned = layout.is_partitioned(cursor)
            left = move.leftovers(cursor)
        if left:
            move.abandon(alias, options["lock_timeout"])
            if not partitioned:
                self.stdout.write(f"An earlier move did not finish: dropped {', '.join(left)}; "
                                  "starting over.")  # fmt: skip
        if partitioned:
            self.stdout.write("The runs table is partitioned already.")
            return
        with connections[alias].cursor() as cursor:
            cursor.execute(
                f"SELECT count(*) FROM (SELECT FROM {layout.RUNS} LIMIT %s) AS r",
                [options["in_one_go_below"]],
            )
            (runs,) = cursor.fetchone()
        if runs < options["in_one_go_below"]:
            with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
                cursor.execute(f"SET LOCAL lock_timeout = '{options['lock_timeout']}ms'")
                layout.partition_runs(cursor)
            self.stdout.write(self.style.SUCCESS(
                f"Partitioned {runs:,} run(s) in one transaction."
            ))  # fmt: skip
            return
        try:
            done = move.move(
                alias,
                batch_size=options["batch_size"],
                lock_timeout_ms=options["lock_timeout"],
                say=self.stdout.write,
            )
        except move.MoveError as exc:
            move.abandon(alias, options["lock_timeout"])
            raise CommandError(f"The move stopped, and what it made is dropped: {exc}") from None
        except BaseException:
            # Its triggers cost every write to runs until dropped: drop them now.
            move.abandon(alias, options["lock_timeout"])
            raise
        self.stdout.write(
            self.style.SUCCESS(
                f"Moved {done.runs:,} run(s) and {done.attempts:,} attempt(s) in "
                f"{done.seconds:.1f} s; the queue was locked {done.locked_ms:.0f} ms. "
                "Running workers take up the partitioned table's statements within a "
                "minute, without a restart (the plain ones are correct meanwhile, and slower)."
            )
        )
