"""Circuit rows, folded with the ORM: by a record (its circuits part) or a write of its own.

Portable, and shared by the record's part (``parts.Circuits``, on databases without
its CTE) and the ORM backend's own verbs (``orm.protection``): an endpoint's
results fold into its circuit (``resilience.policy.after_results``) with the rows
locked in URL order, so two workers' writes never deadlock.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence

from django.db import transaction
from django.db.models import QuerySet

from django_strait.models import EndpointCircuit
from django_strait.rules.resilience.policy import Change, Circuit, Result, after_results
from django_strait.storage.rows import read

#: The largest count of failures a circuit row holds (its column's limit).
MAX_FAILURES = 2**31 - 1

CIRCUIT_FIELDS = ("state", "failures", "opened_at", "last_failure_at", "probe_started_at")


def as_circuit(row: EndpointCircuit) -> Circuit:
    """Return the policy's view of a circuit row."""
    return Circuit(row.endpoint_url, *(getattr(row, name) for name in CIRCUIT_FIELDS))


def apply_circuit_results(
    alias: str, results: Mapping[str, Sequence[Result]], now: dt.datetime, threshold: int
) -> tuple[list[Circuit], list[Change]]:
    """Fold each endpoint's results into its circuit, rows locked in URL order (no deadlock)."""
    circuits = EndpointCircuit.objects.using(alias)
    with transaction.atomic(using=alias):
        failing = sorted(url for url, res in results.items() if Result.FAILURE in res)
        # Only a failure needs a row: a success on an endpoint without one changes nothing.
        circuits.bulk_create(
            [EndpointCircuit(endpoint_url=url, updated_at=now) for url in failing],
            ignore_conflicts=True,
        )
        rows = circuits.select_for_update().filter(endpoint_url__in=list(results))
        written, changes = [], []
        for row in readable_or_fresh(rows.order_by("endpoint_url")):
            before = as_circuit(row)
            after = after_results(before, results[row.endpoint_url], now=now, threshold=threshold)
            written.append(after)
            if after != before or row._state.adding:  # a fresh stand-in: rewrite the row
                save_circuit(alias, row.pk, after, now)
                if after.state != before.state:
                    changes.append(Change(after, before.state))
    return written, changes


def readable_or_fresh(rows: QuerySet[EndpointCircuit]) -> list[EndpointCircuit]:
    """The circuits of ``rows``; one that cannot be read counts as a fresh, closed circuit,
    which its results then write whole (so the bad row is replaced, not kept)."""
    found = read(rows, stand_ins=True)
    return [
        EndpointCircuit(pk=row.pk, endpoint_url=row.endpoint_url)
        if getattr(row, "unreadable", None)
        else row
        for row in found.rows
    ]


def save_circuit(alias: str, pk: int, circuit: Circuit, now: dt.datetime) -> None:
    values = {name: getattr(circuit, name) for name in CIRCUIT_FIELDS}
    # Saturating, as the record's CTE: a count at its column's limit must not fail a write.
    values["failures"] = min(values["failures"], MAX_FAILURES)
    EndpointCircuit.objects.using(alias).filter(pk=pk).update(**values, updated_at=now)
