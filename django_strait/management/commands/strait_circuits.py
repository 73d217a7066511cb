"""``manage.py strait_circuits``: list endpoint circuits, or close them."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from django_strait.circuits import reset_all, reset_circuit
from django_strait.models import EndpointCircuit


def endpoint_url(value: str) -> str:
    """Parse --reset: the URL of an endpoint that has a circuit row."""
    if not EndpointCircuit.objects.filter(endpoint_url=value).exists():
        raise argparse.ArgumentTypeError(
            f"no circuit for {value!r}; allowed: an endpoint URL that `strait_circuits` lists"
        )
    return value


class Command(BaseCommand):
    help = (
        "List every endpoint circuit (state, consecutive failures, when it opened), "
        "or close circuits with --reset URL or --reset-all."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        group = parser.add_mutually_exclusive_group()
        group.add_argument(
            "--reset",
            type=endpoint_url,
            metavar="URL",
            help="Close this endpoint's circuit and forget its failures.",
        )
        group.add_argument(
            "--reset-all", action="store_true", help="Close every circuit and forget failures."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["reset"]:
            changed = reset_circuit(options["reset"])
            self.stdout.write(self.style.SUCCESS(_said(options["reset"], changed)))
        elif options["reset_all"]:
            count = reset_all()
            self.stdout.write(self.style.SUCCESS(f"Reset {count} circuit(s)."))
        else:
            self._list()

    def _list(self) -> None:
        rows = EndpointCircuit.objects.order_by("endpoint_url")
        self.stdout.write("state\tfailures\topened_at\tendpoint_url")
        for row in rows:
            opened = row.opened_at.isoformat() if row.opened_at else "-"
            self.stdout.write(f"{row.state}\t{row.failures}\t{opened}\t{row.endpoint_url}")


def _said(url: str, changed: bool) -> str:
    return f"Closed the circuit of {url}." if changed else f"The circuit of {url} was closed."
