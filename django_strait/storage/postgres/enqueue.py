"""Making runs on PostgreSQL in one statement: by job name, or many from arrays.

These INSERTs are generated from ``JobRun``'s own fields rather than written in
queries.sql: their constant columns come from :func:`columns.prepared`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

from django.db import connections, transaction
from django.utils import timezone

from django_strait.models import Job, JobRun
from django_strait.sql import server_bound_cursor
from django_strait.storage import columns

#: Columns trigger() sets itself (or reads from the job row) in insert_by_name.
_BY_NAME = ("payload", "idempotency_key", "job", "queue", "priority", "available_at")


def insert_by_name(
    alias: str,
    name: str,
    payload: Any,
    text: str,
    *,
    key: str | None,
    available_at: Any,
    priority: int | None,
    queue: str | None,
) -> JobRun | None:
    """INSERT one run reading job id, queue and priority from the job row, in one statement.

    Returns None when nothing was inserted (no such job, or the key is taken): the
    caller then takes the ORM's way, which says which.
    """
    template = JobRun(available_at=available_at, created_at=timezone.now())
    constant = columns.prepared(template, alias, _BY_NAME)
    params = [text, key, queue, priority, available_at, *constant.values(), name]
    with server_bound_cursor(connections[alias]) as cursor:
        cursor.execute(_by_name_sql(tuple(constant), bool(key)), params)
        row = cursor.fetchone()
    if row is None:
        return None
    run = JobRun.from_db(alias, None, _decoded(row))
    run.payload = payload
    run.idempotency_hit = False
    return run


@functools.cache
def _by_name_sql(columns: tuple[str, ...], keyed: bool) -> str:
    returning = ", ".join(f"r.{f.column}" for f in JobRun._meta.concrete_fields)
    return (
        f"INSERT INTO {JobRun._meta.db_table} AS r "
        f"(payload, idempotency_key, job_id, queue, priority, available_at, {', '.join(columns)}) "
        f"SELECT %s::jsonb, %s, j.id, COALESCE(%s, j.queue), COALESCE(%s, j.priority), %s, "
        f"{', '.join(['%s'] * len(columns))} FROM {Job._meta.db_table} j WHERE j.name = %s "
        f"{'ON CONFLICT DO NOTHING ' if keyed else ''}RETURNING {returning}"
    )


def _decoded(row: tuple) -> list:
    # Server-side binding returns jsonb already decoded; from_db expects JSONField text.
    values = list(row)
    for i, f in enumerate(JobRun._meta.concrete_fields):
        if f.get_internal_type() == "JSONField" and values[i] is not None:
            if not isinstance(values[i], str):
                values[i] = json.dumps(values[i])
    return values


def insert_many(
    alias: str,
    template: JobRun,
    payloads: Sequence[Any],
    texts: Sequence[str],
    keys: Sequence[str] | None,
    batch_size: int,
) -> tuple[list[JobRun], set[int]]:
    """One INSERT per batch: payloads and keys as arrays, every other column a constant.

    ``bulk_create`` prepares ~20 fields per object and splices them one parameter
    each; this is several times faster. With keys, returns which rows this call
    inserted (RETURNING skips the conflicts).
    """
    constant = columns.prepared(template, alias, ("payload", "idempotency_key"))
    sql = _many_sql(tuple(constant), bool(keys))
    runs: list[JobRun] = []
    created: set[int] = set()
    with transaction.atomic(using=alias), server_bound_cursor(connections[alias]) as cursor:
        for start in range(0, len(texts), batch_size):
            chunk = list(texts[start : start + batch_size])
            chunk_keys = list(keys[start : start + batch_size]) if keys else [None] * len(chunk)
            cursor.execute(sql, [*constant.values(), chunk, chunk_keys])
            ids = [row[0] for row in cursor.fetchall()]
            if keys:
                created.update(ids)
            else:
                runs.extend(_built(alias, template, ids, payloads[start : start + len(chunk)]))
    return runs, created


@functools.cache
def _many_sql(columns: tuple[str, ...], keyed: bool) -> str:
    return (
        f"INSERT INTO {JobRun._meta.db_table} (payload, idempotency_key, {', '.join(columns)}) "
        f"SELECT v.payload::jsonb, v.key, {', '.join(['%s'] * len(columns))} "
        f"FROM unnest(%s::text[], %s::varchar[]) AS v(payload, key) "
        f"{'ON CONFLICT DO NOTHING ' if keyed else ''}RETURNING id"
    )


def _built(alias: str, template: JobRun, ids: list[int], payloads: Sequence[Any]) -> list[JobRun]:
    """Runs as the INSERT made them, built the way querysets build rows (positionally)."""
    fields = JobRun._meta.concrete_fields
    values = [getattr(template, f.attname) for f in fields]
    pk_at = next(i for i, f in enumerate(fields) if f.primary_key)
    payload_at = next(i for i, f in enumerate(fields) if f.name == "payload")
    runs = []
    for pk, payload in zip(ids, payloads, strict=True):
        values[pk_at], values[payload_at] = pk, payload
        runs.append(JobRun.from_db(alias, None, values))
    return runs
