"""``manage.py strait_api_key``: create, list and revoke API keys for the REST API."""

from __future__ import annotations

import argparse
import datetime as dt
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from django_strait.api.auth import (
    ScopeError,
    check_queues,
    issue_key,
    key_queues,
    key_state,
    revoke_key,
)
from django_strait.models import SCOPES, ApiKey
from django_strait.rules.retry import PolicyError, parse_duration


def scope(value: str) -> str:
    """Parse --scope: one of SCOPES."""
    if value not in SCOPES:
        raise argparse.ArgumentTypeError(f"{value!r} is not a scope; allowed: {', '.join(SCOPES)}")
    return value


def queue(value: str) -> str:
    """Parse --queue: a queue name a key may be limited to."""
    try:
        return check_queues([value])[0]
    except ScopeError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def expiry(value: str) -> dt.datetime:
    """Parse --expires-in: a duration greater than zero, from now."""
    try:
        seconds = parse_duration(value, field="--expires-in")
    except PolicyError as exc:
        raise argparse.ArgumentTypeError(f"{exc.problem}; allowed: {exc.allowed}") from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{value!r} is zero; allowed: a duration > 0 (90d, P365D)")
    return timezone.now() + dt.timedelta(seconds=seconds)


class Command(BaseCommand):
    help = "Create, list or revoke API keys (Authorization: Api-Key <key>)."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="create|list|revoke")
        create = actions.add_parser("create", help="Create a key and print it (once).")
        create.add_argument("name", help="What the key is for, e.g. 'billing service'.")
        create.add_argument(
            "--scope", dest="scopes", type=scope, action="append", required=True,
            metavar="SCOPE", help=f"Repeat for several. One of: {', '.join(SCOPES)}.",
        )  # fmt: skip
        create.add_argument(
            "--queue", dest="queues", type=queue, action="append", default=[], metavar="QUEUE",
            help="Limit the key to this queue's jobs and runs (fetch, ack, enqueue, read); "
            "repeat for several. Default: every queue.",
        )  # fmt: skip
        create.add_argument(
            "--expires-in", type=expiry, metavar="DURATION", help="e.g. 90d; default: never."
        )
        actions.add_parser("list", help="List keys: prefix, name, scopes, state, last used.")
        revoke = actions.add_parser("revoke", help="Revoke a key by its prefix.")
        revoke.add_argument("prefix", help="The part of the key before the dot.")

    def handle(self, *args: Any, **options: Any) -> None:
        getattr(self, f"_{options['action']}")(options)

    def _create(self, options: dict[str, Any]) -> None:
        try:
            row, key = issue_key(
                options["name"], options["scopes"], queues=options["queues"],
                expires_at=options["expires_in"],
            )  # fmt: skip
        except ScopeError as exc:
            raise CommandError(str(exc)) from None
        queues = ", ".join(row.queues) or "every queue"
        self.stdout.write(
            f"Created API key {row.name!r} ({row.prefix}) with {', '.join(row.scopes)} on {queues}."
        )
        self.stdout.write("Store it now; it is not shown again:")
        self.stdout.write(key)

    def _list(self, options: dict[str, Any]) -> None:
        now = timezone.now()
        for row in ApiKey.objects.order_by("name", "pk"):
            used = row.last_used_at.isoformat() if row.last_used_at else "never"
            queues = key_queues(row)
            on = "all queues" if queues is None else "queues: " + ", ".join(sorted(queues))
            self.stdout.write(
                f"{row.prefix}  {row.name}  [{', '.join(row.scopes)}]  {on}  "
                f"{key_state(row, now)}  last used: {used}"
            )

    def _revoke(self, options: dict[str, Any]) -> None:
        try:
            row = revoke_key(options["prefix"])
        except ApiKey.DoesNotExist:
            raise CommandError(
                f"no API key has the prefix {options['prefix']!r}; see `strait_api_key list`"
            ) from None
        self.stdout.write(f"Revoked API key {row.name!r} ({row.prefix}).")
