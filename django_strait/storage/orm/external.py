"""External workers' runs with the ORM (docs/ojs.md): fetch, visibility, and the envelope.

An OJS worker fetches runs of external-worker jobs over HTTP; each fetched run
is claimed and started like a worker's, and carries a deadline
(``visible_until``): its visibility timeout, pushed on by heartbeats. The
reaper rescues it at that deadline instead of at ``STALE_AFTER``.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from django.db import connections, transaction

from django_strait.models import JobRun
from django_strait.rules.states import RunStatus
from django_strait.storage.orm import claims
from django_strait.storage.values import Claimed, Envelope


def claim(
    alias: str, worker_id: str, queues: Sequence[str], limit: int, now: dt.datetime
) -> list[Claimed]:
    """Claim up to ``limit`` due external runs, the first queue first, then the next."""
    taken: list[Claimed] = []
    for queue in queues:
        if len(taken) >= limit:
            break
        taken += claims.claim(alias, worker_id, [queue], limit - len(taken), now, external=True)
    return taken


def set_deadlines(
    alias: str, worker_id: str, deadlines: Mapping[int, dt.datetime], now: dt.datetime
) -> list[int]:
    """Give executing runs ``worker_id`` holds their deadline (a fetch, a heartbeat).

    Return those that took it; a run requeued and fetched by another worker meanwhile
    keeps its own (a stale worker's heartbeat extends nothing of another's).
    """
    moved = []
    for run_id, until in deadlines.items():
        runs = JobRun.objects.using(alias).filter(
            pk=run_id, status=RunStatus.EXECUTING, claimed_by=worker_id
        )
        if runs.update(visible_until=until, heartbeat_at=now, updated_at=now):
            moved.append(run_id)
    return moved


def set_ids(alias: str, ids: Mapping[int, uuid.UUID]) -> list[int]:
    """Give each run its OJS id, unless it has one; return the runs that took theirs."""
    runs = JobRun.objects.using(alias)
    return [
        rid
        for rid, key in ids.items()
        if runs.filter(pk=rid, ojs_id__isnull=True).update(ojs_id=key)
    ]


def set_envelopes(alias: str, envelopes: Sequence[Envelope]) -> None:
    """One prepared UPDATE per run: its OJS id, envelope and (if given) due time."""
    connection = connections[alias]
    table = connection.ops.quote_name(JobRun._meta.db_table)
    with connection.cursor() as cursor:
        cursor.executemany(
            f"UPDATE {table} SET ojs_id = %s, ojs = %s, "
            "available_at = COALESCE(%s, available_at) WHERE id = %s",
            envelope_rows(connection, envelopes),
        )


def envelope_rows(connection: Any, envelopes: Sequence[Envelope]) -> list[tuple]:
    """Each envelope as the database takes it: (ojs_id, ojs, due, run id)."""
    fields = {name: JobRun._meta.get_field(name) for name in ("ojs_id", "ojs", "available_at")}
    return [
        (
            fields["ojs_id"].get_db_prep_save(e.ojs_id, connection),
            fields["ojs"].get_db_prep_save(e.envelope, connection),
            fields["available_at"].get_db_prep_save(e.due, connection),
            e.run_id,
        )
        for e in envelopes
    ]


def set_retry_delay(alias: str, run_id: int, delay_ms: int) -> bool:
    """Note in a run's OJS envelope the delay its retry was given (``retry_delay_ms``)."""
    with transaction.atomic(using=alias):
        runs = JobRun.objects.using(alias).filter(pk=run_id)
        envelope = runs.select_for_update().values_list("ojs", flat=True).first()
        if not isinstance(envelope, dict) and envelope is not None:
            envelope = None  # a row written around the binding: the delay alone
        return bool(runs.update(ojs={**(envelope or {}), "retry_delay_ms": delay_ms}))


def set_progress(
    alias: str, run_id: int, worker: str, attempt: int, progress: dict[str, Any]
) -> dict[str, Any] | None:
    """Keep ``progress`` in the OJS envelope of the attempt ``worker`` holds (``attempt``),
    never lowering its ``progress`` number; return what is kept, or None if it does not hold it."""
    with transaction.atomic(using=alias):
        runs = JobRun.objects.using(alias).filter(
            pk=run_id, status=RunStatus.EXECUTING, claimed_by=worker, attempt=attempt
        )
        envelope = runs.select_for_update().values_list("ojs", flat=True).first()
        if envelope is None and not runs.exists():
            return None
        envelope = envelope if isinstance(envelope, dict) else {}
        before = envelope.get("progress")
        if isinstance(before, dict) and before.get("attempt") == attempt:
            number, old = progress.get("progress"), before.get("progress")
            if isinstance(old, int | float) and (number is None or number < old):
                progress = {**progress, "progress": old}  # never backwards in one attempt
        kept = {**progress, "attempt": attempt}
        runs.update(ojs={**envelope, "progress": kept})
        return kept
