"""``manage.py run_strait_worker``: claim and execute runs until stopped."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import uuid

from django.core.management.base import BaseCommand, CommandError

from django_strait.conf import strait_settings
from django_strait.database import aliases
from django_strait.management.selection import add_database_option
from django_strait.worker.engine import Worker, WorkerConfig
from django_strait.worker.fleet import Fleet, configs_for


def positive_int(limit: int):
    """An argparse type: an integer from 1 to ``limit``."""
    return int_between(1, limit)


def int_between(low: int, high: int):
    """An argparse type: an integer from ``low`` to ``high``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is out of range: use {low} to {high}")
        return value

    return parse


def port_number(text: str) -> int:
    """An argparse type: a TCP port, 0 to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is out of range: use 0 to 65535")
    return value


def queue_name(text: str) -> str:
    """An argparse type: a queue name (1-100 characters)."""
    if not text or len(text) > 100:
        raise argparse.ArgumentTypeError("a queue name is 1 to 100 characters")
    return text


VERBOSITY_HELP = (
    "0: print nothing but warnings and errors; 1 (default): the start, a line per "
    "attempt, a stats line a minute and the stop (unless LOGGING routes django_strait "
    "already); 2 or 3: also debug lines: each claim, what the gate held and why, each "
    "record batch, burst naps."
)


def default_worker_id() -> str:
    """``host-pid-random``: unique per process, readable in the admin."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class Command(BaseCommand):
    help = "Claim due runs in batches and execute them (SIGINT/SIGTERM stop it gracefully)."
    # Django's checks may open a database connection (Django 6's model checks do): a worker
    # started before its database must wait for it, not die in a check. The STRAIT
    # settings are checked in handle(); run `manage.py check` in a deploy as usual.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--queue",
            dest="queues",
            action="append",
            type=queue_name,
            default=[],
            help="Queue to take runs from; repeat for several. Default: every queue.",
        )
        parser.add_argument(
            "--concurrency",
            type=positive_int(10_000),
            default=None,
            help="Most runs executing at once (default STRAIT['WORKER_CONCURRENCY'], 50).",
        )
        parser.add_argument(
            "--batch-size",
            type=positive_int(10_000),
            default=None,
            help="Most runs claimed per round trip (default STRAIT['WORKER_BATCH_SIZE'], 100).",
        )
        parser.add_argument(
            "--processes",
            type=positive_int(1024),
            default=None,
            help="Most child processes for process jobs (execution='process'); "
            "default: the CPU count. Started with the worker when an enabled process job "
            "is in its queues, else at the first process run.",
        )
        parser.add_argument(
            "--burst",
            action="store_true",
            help="Drain the queue, then exit 0: runs due now, and runs held by a concurrency "
            "or rate limit (those clear as runs end and windows pass). It exits when what is "
            "left waits on something else (an open circuit, the budget, a retry delay, a "
            "paused job) and prints how many runs that is, and why.",
        )
        parser.add_argument(
            "--metrics-port",
            type=port_number,
            default=None,
            help="Serve this worker's Prometheus metrics (/metrics) and its health probes "
            "(/livez, /readyz) on PORT (0: any free port), at STRAIT['METRICS_BIND'] "
            "(default 127.0.0.1: this host only).",
        )
        parser.add_argument(
            "--no-webhooks",
            dest="webhooks",
            action="store_false",
            help="Deliver no completion webhooks in this process (other workers deliver them).",
        )
        parser.add_argument(
            "--worker-id", default=None, help="Name this worker (default host-pid-random)."
        )
        add_database_option(parser, "Serve", "every one (one engine per alias in this process).")

    def create_parser(self, prog_name: str, subcommand: str, **kwargs) -> argparse.ArgumentParser:
        """Django's parser, with what -v means for a worker."""
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        for action in parser._actions:  # argparse has no public way to edit an option's help
            if "--verbosity" in action.option_strings:
                action.help = VERBOSITY_HELP
        return parser

    def handle(self, *args, **options) -> None:
        refuse_bad_settings()
        if options["verbosity"] >= 1:
            show_worker_logs(verbose=options["verbosity"] >= 2)
        served = served_aliases(options.get("databases") or [])
        configs = configs_for(
            build_config(options), served,
            first=aliases()[0], listen_database=strait_settings.LISTEN_DATABASE,
        )  # fmt: skip
        worker: Worker | Fleet = Worker(configs[0]) if len(configs) == 1 else Fleet(configs)
        worker.run()
        if worker.left_waiting and options["verbosity"] >= 1:
            self.stdout.write(f"burst done: {worker.left_waiting}")


def served_aliases(asked: list[str]) -> list[str]:
    """The aliases ``--database`` names (each of STRAIT["DATABASES"]), else all of them."""
    known = list(aliases())
    for where in asked:
        if where not in known:
            raise CommandError(
                f"--database {where!r}: not an alias of STRAIT['DATABASES']; "
                f"allowed: {', '.join(known)}"
            )
    return list(dict.fromkeys(asked)) or known


def refuse_bad_settings() -> None:
    """Raise naming every bad STRAIT setting: a worker must not start on them.

    ``manage.py`` runs the system checks first, but ``call_command`` does not.
    """
    errors = strait_settings.errors()
    if errors:
        listed = "\n".join(f"- {error}" for error in errors)
        raise CommandError(f"the STRAIT settings are not valid:\n{listed}")


def show_worker_logs(*, verbose: bool) -> None:
    """Print the worker's lifecycle and stats lines unless LOGGING already routes them.

    Django's default logging shows only warnings; someone who starts a worker
    from a shell expects to see it start, report and stop.
    """
    logger = logging.getLogger("django_strait")
    if logger.handlers or logger.level != logging.NOTSET:
        return  # the project configured it: respect that
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    if logging.getLogger().handlers:
        # Warnings still propagate to the project's root handlers: not twice here.
        handler.addFilter(lambda record: record.levelno < logging.WARNING)
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if verbose else logging.INFO)


def build_config(options: dict) -> WorkerConfig:
    """Merge command options over the STRAIT settings."""
    s = strait_settings
    return WorkerConfig(
        worker_id=options.get("worker_id") or default_worker_id(),
        queues=tuple(options.get("queues") or ()),
        concurrency=options.get("concurrency") or s.WORKER_CONCURRENCY,
        batch_size=options.get("batch_size") or s.WORKER_BATCH_SIZE,
        burst=bool(options.get("burst")),
        poll_interval=s.POLL_INTERVAL,
        shutdown_timeout=s.SHUTDOWN_TIMEOUT,
        heartbeat_interval=max(1.0, s.STALE_AFTER / 5),
        stats_interval=s.STATS_INTERVAL,
        listen_alias=(s.LISTEN_DATABASE or aliases()[0]) if s.LISTEN else None,
        metrics_port=options.get("metrics_port"),
        metrics_bind=s.METRICS_BIND,
        result_max_bytes=s.RESULT_MAX_BYTES,
        user_agent=s.HTTP_USER_AGENT,
        using=aliases()[0],
        webhooks=options.get("webhooks", True),
        webhook_timeout=s.WEBHOOK_TIMEOUT,
        webhook_concurrency=s.WEBHOOK_CONCURRENCY,
        processes=options.get("processes"),
        process_max_runs=s.PROCESS_MAX_RUNS,
    )
