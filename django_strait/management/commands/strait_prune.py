"""``manage.py strait_prune``: delete finished runs past their retention now, on every alias.

With several aliases (``STRAIT["DATABASES"]``) each is pruned in turn, by its
own pruner (its own lead), under a line naming it; ``--database ALIAS`` prunes
that one. One alias's output is what it always was.
"""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from django_strait.database import placed
from django_strait.duties.pruner import Pruner, preview, whole_days
from django_strait.management.commands.run_strait_worker import served_aliases
from django_strait.management.selection import add_database_option, require_jobs
from django_strait.rules.retry import PolicyError, parse_duration


def older_than(value: str) -> float:
    """Parse --older-than: a duration greater than zero."""
    try:
        seconds = parse_duration(value, field="--older-than")
    except PolicyError as exc:
        # argparse already names the option; say what was wrong and what is allowed.
        raise argparse.ArgumentTypeError(f"{exc.problem}; allowed: {exc.allowed}") from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(
            f"{value!r} is zero; allowed: a duration > 0 such as 7d, 12h or P30D"
        )
    return seconds


class Command(BaseCommand):
    help = (
        "Delete completed, discarded and canceled runs that finished longer ago than "
        "their job's retention_days (else STRAIT['RETENTION_DAYS']). Dead letters and "
        "failed runs are never deleted."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--job", metavar="NAME", help="Only this job's runs.")
        parser.add_argument(
            "--older-than",
            type=older_than,
            metavar="DURATION",
            help="Delete runs finished longer ago than this (7d, 12h, P30D) instead of "
            "each job's retention.",
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Print how many runs per job and status would go; delete nothing.",
        )
        add_database_option(parser, "Prune", "every one.")

    def handle(self, *args: Any, **options: Any) -> None:
        where = served_aliases(options["databases"])
        if options["job"] is not None:
            require_jobs([options["job"]], using=where)
        busy = []
        for using in where:
            if placed():
                self.stdout.write(f"On database {using!r}:")
            if not self._prune(using, options):
                busy.append(using)
        if busy:
            on = f" on database {', '.join(map(repr, busy))}" if placed() else ""
            raise CommandError(
                f"A worker is pruning right now{on} (it holds the pruner lead); retry."
            )

    def _prune(self, using: str, options: dict[str, Any]) -> bool:
        """Prune ``using`` (or say what would go); False when a worker holds its lead."""
        pruner = Pruner.from_settings(using, max_batches=None)
        selection = pruner.selection(job=options["job"], older_than=options["older_than"])
        now = timezone.now()
        if options["dry_run"]:
            days = whole_days(selection, now, using=pruner.using, counted=True)
            for day in days:
                self.stdout.write(f"{day.day}\twhole day\t{day.runs}")
            rows = preview(selection, now, using=pruner.using, besides=days)
            self._print_preview(rows, sum(day.runs or 0 for day in days))
            return True
        result = pruner.run_once(now, selection)
        if not result.led:
            return False
        counts = result.counts
        said = f"Deleted {counts['deleted']} run(s) in {counts['batches']} batch(es)."
        if counts["days_dropped"]:
            said = (
                f"Deleted {counts['deleted']} run(s): {counts['days_dropped']} whole day(s) of "
                f"history dropped, the rest in {counts['batches']} batch(es)."
            )
        self.stdout.write(self.style.SUCCESS(said))
        if counts["kept_for_webhooks"]:
            self.stdout.write(
                self.style.WARNING(
                    f"Kept {counts['kept_for_webhooks']} run(s) past retention: they still owe "
                    "a completion webhook (pending, or failed and not redelivered)."
                )
            )
        return True

    def _print_preview(self, counts, in_days: int) -> None:
        for row in counts:
            self.stdout.write(f"{row.job}\t{row.status}\t{row.runs}")
        total = sum(row.runs for row in counts)
        if in_days:
            self.stdout.write(
                f"Would drop {in_days} run(s) in whole days and delete {total} run(s) row by "
                "row. Dry run: nothing deleted."
            )
        else:
            self.stdout.write(f"Would delete {total} run(s). Dry run: nothing deleted.")
