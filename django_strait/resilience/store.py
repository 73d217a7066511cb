"""Reading and writing ``EndpointCircuit`` rows for the policy in :mod:`.policy`."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from django_strait import signals
from django_strait.database import alias
from django_strait.models import EndpointCircuit
from django_strait.resilience.policy import (
    CLOSED,
    HALF_OPEN,
    OPEN,
    Circuit,
    Result,
    after_results,
)

logger = logging.getLogger(__name__)

_FIELDS = ("state", "failures", "opened_at", "last_failure_at", "probe_started_at")


@dataclass(frozen=True, slots=True)
class Change:
    """A circuit whose state changed, and the state it left."""

    circuit: Circuit
    previous_state: str


def as_circuit(row: EndpointCircuit) -> Circuit:
    """Return the policy's view of a row."""
    return Circuit(row.endpoint_url, *(getattr(row, name) for name in _FIELDS))


def load_active(*, using: str | None = None) -> dict[str, Circuit]:
    """Return every circuit that is not closed or has failures counted, by URL."""
    rows = EndpointCircuit.objects.using(using).filter(~Q(state=CLOSED) | Q(failures__gt=0))
    return {row.endpoint_url: as_circuit(row) for row in rows}


def win_probe(
    url: str, *, now: dt.datetime, cooldown: dt.timedelta, lost_before: dt.datetime, using: str
) -> bool:
    """Try to take the single half-open probe of ``url``; True if this call won it.

    One conditional UPDATE: of any number of workers asking at once, the first
    to update the row wins and the others find the condition false.
    """
    cooled = Q(state=OPEN, opened_at__lte=now - cooldown)
    lost = Q(state=HALF_OPEN, probe_started_at__lte=lost_before) | Q(
        state=HALF_OPEN, probe_started_at__isnull=True
    )
    won = (
        EndpointCircuit.objects.using(using)
        .filter(cooled | lost, endpoint_url=url)
        .update(state=HALF_OPEN, probe_started_at=now, updated_at=now)
    )
    return won == 1


def apply_results(
    results: Mapping[str, Sequence[Result]], *, now: dt.datetime, threshold: int, using: str
) -> list[Circuit]:
    """Fold each endpoint's results into its circuit; return the circuits written.

    Sends ``circuit_opened`` / ``circuit_closed`` after the commit for each
    circuit whose state changed. Rows are locked in URL order, so two workers
    recording the same endpoints never deadlock.
    """
    if not results:
        return []
    with transaction.atomic(using=alias(using)):
        _ensure_rows([url for url, res in results.items() if Result.FAILURE in res], now, using)
        rows = (
            EndpointCircuit.objects.using(using)
            .select_for_update()
            .filter(endpoint_url__in=list(results))
            .order_by("endpoint_url")
        )
        written, changes = _fold(rows, results, now, threshold, using)
        _announce_on_commit(changes, using)
    return written


def _ensure_rows(urls: list[str], now: dt.datetime, using: str) -> None:
    # Only a failure needs a row: a success on an endpoint without one changes nothing.
    if urls:
        EndpointCircuit.objects.using(using).bulk_create(
            [EndpointCircuit(endpoint_url=url, updated_at=now) for url in sorted(urls)],
            ignore_conflicts=True,
        )


def _fold(rows, results, now, threshold, using) -> tuple[list[Circuit], list[Change]]:
    written: list[Circuit] = []
    changes: list[Change] = []
    for row in rows:
        before = as_circuit(row)
        after = after_results(before, results[row.endpoint_url], now=now, threshold=threshold)
        written.append(after)
        if after == before:
            continue
        _save(row, after, now, using)
        if after.state != before.state:
            changes.append(Change(after, before.state))
    return written, changes


def _save(row: EndpointCircuit, circuit: Circuit, now: dt.datetime, using: str) -> None:
    values = {name: getattr(circuit, name) for name in _FIELDS}
    EndpointCircuit.objects.using(using).filter(pk=row.pk).update(**values, updated_at=now)


def _announce_on_commit(changes: list[Change], using: str) -> None:
    if changes:
        transaction.on_commit(lambda: _announce(changes), using=alias(using))


def _announce(changes: Iterable[Change]) -> None:
    for change in changes:
        circuit = change.circuit
        if circuit.state == HALF_OPEN:
            continue
        signal = signals.circuit_opened if circuit.state == OPEN else signals.circuit_closed
        if circuit.state == OPEN:
            logger.warning(
                "circuit opened for %s after %s consecutive failures",
                circuit.endpoint_url,
                circuit.failures,
            )
        else:
            logger.info("circuit closed for %s", circuit.endpoint_url)
        signal.send_robust(
            sender=EndpointCircuit,
            endpoint_url=circuit.endpoint_url,
            failures=circuit.failures,
            previous_state=change.previous_state,
        )


def reset_circuit(url: str, *, using: str | None = None) -> bool:
    """Close ``url``'s circuit and forget its failures; True if it was not already so."""
    return _reset(EndpointCircuit.objects.using(using).filter(endpoint_url=url), using) > 0


def reset_all(*, using: str | None = None) -> int:
    """Close every circuit and forget every failure count; return how many changed."""
    return _reset(EndpointCircuit.objects.using(using).all(), using)


def _reset(rows, using: str) -> int:
    now = timezone.now()
    with transaction.atomic(using=alias(using)):
        found = list(
            rows.select_for_update()
            .filter(~Q(state=CLOSED) | Q(failures__gt=0))
            .order_by("endpoint_url")
        )
        for row in found:
            _save(row, Circuit(row.endpoint_url), now, using)
        changes = [
            Change(Circuit(row.endpoint_url), row.state) for row in found if row.state != CLOSED
        ]
        _announce_on_commit(changes, using)
    return len(found)
