"""``manage.py strait_replay``: queue dead-lettered (or failed...) runs again."""

from __future__ import annotations

import argparse
import getpass
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_strait.database import aliases
from django_strait.management.selection import require_jobs, require_runs
from django_strait.rules.states import REPLAYABLE, RunStatus
from django_strait.services import replaying


def run_id(value: str) -> int:
    """Parse a run id (a positive integer)."""
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a run id (a positive integer)")
    return number


def replayable_status(value: str) -> str:
    """Parse a status a run may be replayed from."""
    if value not in REPLAYABLE:
        allowed = ", ".join(sorted(REPLAYABLE))
        raise argparse.ArgumentTypeError(f"{value!r} cannot be replayed; allowed: {allowed}")
    return value


def error_type_pattern(value: str) -> str:
    """Parse an error type, exact (``http.503``) or a prefix (``http.*``)."""
    try:
        return replaying.check_error_type_pattern(value)
    except replaying.SelectionError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def default_by() -> str:
    """Return the OS user running the command, recorded as who replayed."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry and no LOGNAME/USER (some containers)
        return "unknown"


class Command(BaseCommand):
    help = (
        "Queue runs again with a fresh attempt budget. Selects dead letters unless "
        "--status says otherwise; criteria combine (all must hold)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_ids", nargs="*", type=run_id, metavar="RUN_ID")
        parser.add_argument(
            "--id",
            dest="ids",
            action="append",
            type=run_id,
            default=[],
            metavar="RUN_ID",
            help="A run to replay (repeatable).",
        )
        parser.add_argument(
            "--job",
            dest="jobs",
            action="append",
            default=[],
            metavar="NAME",
            help="Only runs of this job (repeatable).",
        )
        parser.add_argument(
            "--error-type",
            dest="error_types",
            action="append",
            default=[],
            type=error_type_pattern,
            metavar="TYPE",
            help="Only runs with this error type: exact (http.503) or a "
            "prefix (http.*). Repeatable.",
        )
        parser.add_argument(
            "--status",
            dest="statuses",
            action="append",
            default=[],
            type=replayable_status,
            help="Replay runs in this status instead of dead_letter "
            "(repeatable: dead_letter, failed, discarded, system_failed).",
        )
        parser.add_argument(
            "--all",
            action="store_true",
            help="Replay every run in the statuses, with no other criterion.",
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Print what would be replayed and change nothing.",
        )
        parser.add_argument(
            "--by",
            default=None,
            help="Who is replaying, recorded on each run (default: the OS user).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        selection = self._selection(options)
        require_jobs(selection.jobs, using=aliases())  # several databases: a job on any
        require_runs(selection.ids)
        by = options["by"] or default_by()
        try:
            report = replaying.replay(selection, by=by, dry_run=options["dry_run"])
        except replaying.SelectionError as exc:
            raise CommandError(f"--{exc.field.replace('_', '-')}: {exc.message}") from None
        self._print(report)

    def _selection(self, options: dict[str, Any]) -> replaying.ReplaySelection:
        selection = replaying.ReplaySelection(
            ids=tuple(dict.fromkeys([*options["run_ids"], *options["ids"]])),
            jobs=tuple(options["jobs"]),
            error_types=tuple(options["error_types"]),
            statuses=tuple(dict.fromkeys(options["statuses"])) or (RunStatus.DEAD_LETTER,),
        )
        if selection.is_everything and not options["all"]:
            raise CommandError(
                "Say which runs: give run ids, --job, --error-type, or --all for every run "
                f"in {', '.join(selection.statuses)}."
            )
        return selection

    def _print(self, report: replaying.ReplayReport) -> None:
        for pk, why in report.skipped.items():
            self.stderr.write(f"Run {pk} not selected: {why}.")
        ids = ", ".join(map(str, report.first_ids))
        more = ", ..." if report.selected > len(report.first_ids) else ""
        if report.dry_run:
            self.stdout.write(
                f"Would replay {report.selected} run(s): {ids}{more}"
                if ids
                else "Would replay 0 runs."
            )
            self.stdout.write("Dry run: nothing changed.")
            return
        self.stdout.write(
            self.style.SUCCESS(
                f"Replayed {report.moved} of {report.selected} selected run(s) (by {report.by})."
            )
        )
        if report.lost:
            self.stdout.write(
                self.style.WARNING(
                    f"{report.lost} run(s) changed status before the replay and were left alone."
                )
            )
