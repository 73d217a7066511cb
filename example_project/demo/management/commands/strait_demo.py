"""``manage.py strait_demo``: see django-strait work end to end in under a minute."""

from __future__ import annotations

import argparse
import random

from django.core.management.base import BaseCommand, CommandError

from example_project.demo.runner import Demo, DemoOptions, manage_py

MAX_RUNS = 1000


def run_count(raw: str) -> int:
    """Parse ``--runs``: an integer from 1 to MAX_RUNS."""
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_RUNS:
        raise argparse.ArgumentTypeError(f"must be an integer from 1 to {MAX_RUNS}, got {raw!r}")
    return value


def seed_value(raw: str) -> int:
    """Parse ``--seed``: any integer."""
    try:
        return int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {raw!r}") from None


class Command(BaseCommand):
    help = (
        "Migrate, define the demo jobs, trigger runs of each, run the worker until they "
        "end, and print how they ended."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--runs", type=run_count, default=30, help="runs per demo job (default 30)"
        )
        parser.add_argument(
            "--seed", type=seed_value, default=None, help="repeat a demo exactly (fresh database)"
        )
        parser.add_argument(
            "--no-worker",
            action="store_true",
            help="only define the jobs and queue the runs; run the worker yourself",
        )

    def handle(self, *args: object, **options: object) -> None:
        seed = options["seed"]
        demo_options = DemoOptions(
            runs=options["runs"],
            seed=random.SystemRandom().randrange(1, 100_000) if seed is None else seed,
            worker=not options["no_worker"],
            verbosity=options["verbosity"],
        )
        try:
            Demo(demo_options, self.stdout.write).run()
        except KeyboardInterrupt:
            raise CommandError(
                "interrupted; runs left unfinished stay queued "
                f"({manage_py()} run_strait_worker finishes them)"
            ) from None
