"""Making runs on PostgreSQL in one statement: by job name, or many from arrays.

These INSERTs are generated from ``JobRun``'s own fields rather than written in
queries.sql: their constant columns come from :func:`columns.prepared`.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Sequence
from typing import Any

from django.db import connections, transaction
from django.utils import timezone

from django_strait.models import Job, JobRun
from django_strait.storage import columns
from django_strait.storage.sql import server_bound_cursor, text_array

#: Columns trigger() sets itself (or reads from the job row) in insert_by_name.
_BY_NAME = ("payload", "idempotency_key", "job", "queue", "priority", "available_at")
#: What insert_by_name's INSERT returns: what the job row decided, and the id.
_RETURNED = ("id", "job", "queue", "priority")
#: A key's run may be in any leaf of a partitioned runs table, whose unique indexes are
#: per leaf (storage.postgres.layout): the INSERT looks first. On a plain table this is
#: the unique index's own probe; ON CONFLICT still settles two inserts of one key at once.
_KEY_FREE = (
    "NOT EXISTS (SELECT FROM " + JobRun._meta.db_table + " e "
    "WHERE e.job_id = {job} AND e.idempotency_key = {key})"
)


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
    born = _born(alias)
    values, fresh = born.columns(alias, timezone.now())
    params = [text, key, queue, priority, available_at, *values, name]
    if key:
        params.append(key)
    with server_bound_cursor(connections[alias]) as cursor:
        cursor.execute(_by_name_sql(tuple(born.constant), tuple(born.fresh), bool(key)), params)
        row = cursor.fetchone()
    if row is None:
        return None
    return born.run(alias, row, fresh, payload=payload, idempotency_key=key,
                    available_at=available_at)  # fmt: skip


class _Born:
    """A run's columns at birth, prepared once per database: trigger() one by one is hot.

    ``constant`` holds the prepared value of each column that is the same for every
    run (its field's default); ``fresh`` names the columns given a new value per run
    (a callable default such as ``timezone.now``, or ``auto_now``), prepared per call.
    """

    def __init__(self, alias: str) -> None:
        fields = [
            f for f in JobRun._meta.concrete_fields if f.name not in _BY_NAME and not f.primary_key
        ]
        self._fresh = [f for f in fields if _fresh(f)]
        leave_out = (*_BY_NAME, *(f.name for f in self._fresh))
        self.constant = columns.prepared(JobRun(), alias, leave_out)
        self.fresh = [f.column for f in self._fresh]
        concrete = JobRun._meta.concrete_fields
        # A new run's Python values in field order (Model.from_db's positional form).
        self._values = [None if f.primary_key else f.get_default() for f in concrete]
        self._at = {f.attname: i for i, f in enumerate(concrete)}
        self._returned = [self._at[JobRun._meta.get_field(name).attname] for name in _RETURNED]

    def columns(self, alias: str, now: dt.datetime) -> tuple[list[Any], list[Any]]:
        """The prepared values of the constant columns then the fresh ones; the fresh values."""
        fresh = [now if _is_clock(f) else f.get_default() for f in self._fresh]
        connection = connections[alias]
        prepared = [
            f.get_db_prep_save(v, connection) for f, v in zip(self._fresh, fresh, strict=True)
        ]
        return [*self.constant.values(), *prepared], fresh

    def run(self, alias: str, returned: tuple, fresh: list[Any], **values: Any) -> JobRun:
        """The run as the INSERT made it: defaults, ``values``, the fresh values and what it returned."""
        row = list(self._values)
        for f, value in zip(self._fresh, fresh, strict=True):
            row[self._at[f.attname]] = value
        for at, value in zip(self._returned, returned, strict=True):
            row[at] = value
        for name, value in values.items():
            row[self._at[name]] = value
        run = JobRun.from_db(alias, None, row)
        run.idempotency_hit = False
        return run


def _fresh(field: Any) -> bool:
    """Whether each run takes a value of its own for ``field`` (else its default is a constant)."""
    return _is_clock(field) or (field.has_default() and callable(field.default))


def _is_clock(field: Any) -> bool:
    return (
        getattr(field, "auto_now", False)
        or getattr(field, "auto_now_add", False)
        or field.default is timezone.now
    )


@functools.cache
def _born(alias: str) -> _Born:
    return _Born(alias)


@functools.cache
def _by_name_sql(constant: tuple[str, ...], fresh: tuple[str, ...], keyed: bool) -> str:
    columns = (*constant, *fresh)
    returning = ", ".join(f"r.{JobRun._meta.get_field(name).column}" for name in _RETURNED)
    return (
        f"INSERT INTO {JobRun._meta.db_table} AS r "
        f"(payload, idempotency_key, job_id, queue, priority, available_at, {', '.join(columns)}) "
        f"SELECT %s::jsonb, %s, j.id, COALESCE(%s, j.queue), COALESCE(%s, j.priority), %s, "
        f"{', '.join(['%s'] * len(columns))} FROM {Job._meta.db_table} j WHERE j.name = %s "
        f"{'AND ' + _KEY_FREE.format(job='j.id', key='%s') + ' ' if keyed else ''}"
        f"{'ON CONFLICT DO NOTHING ' if keyed else ''}RETURNING {returning}"
    )


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
    each; this is several times faster. Returns the runs made, built from the
    template and the RETURNING (not read again); with keys, only those this call
    inserted (RETURNING skips the conflicts), each with its key, and their ids.
    """
    constant = columns.prepared(template, alias, ("payload", "idempotency_key"))
    sql = _many_sql(tuple(constant), bool(keys))
    runs: list[JobRun] = []
    created: set[int] = set()
    with transaction.atomic(using=alias), server_bound_cursor(connections[alias]) as cursor:
        for start in range(0, len(texts), batch_size):
            chunk = list(texts[start : start + batch_size])
            chunk_keys = list(keys[start : start + batch_size]) if keys else [None] * len(chunk)
            job = [template.job_id] if keys else []
            arrays = [text_array(chunk), text_array(chunk_keys)]
            cursor.execute(sql, [*constant.values(), *arrays, *job])
            rows = cursor.fetchall()
            ids = [row[0] for row in rows]
            if not keys:
                runs.extend(_built(alias, template, ids, payloads[start : start + len(chunk)]))
                continue
            created.update(ids)
            given: dict[str, Any] = {}
            for key, payload in zip(chunk_keys, payloads[start : start + len(chunk)], strict=True):
                given.setdefault(key, payload)  # a key given twice: the first one's row
            made = _built(alias, template, ids, [given[row[1]] for row in rows])
            for run, row in zip(made, rows, strict=True):
                run.idempotency_key = row[1]
            runs.extend(made)
    return runs, created


@functools.cache
def _many_sql(columns: tuple[str, ...], keyed: bool) -> str:
    return (
        f"INSERT INTO {JobRun._meta.db_table} (payload, idempotency_key, {', '.join(columns)}) "
        f"SELECT v.payload::jsonb, v.key, {', '.join(['%s'] * len(columns))} "
        f"FROM unnest(%s::text[], %s::varchar[]) AS v(payload, key) "
        f"{'WHERE (v.key IS NULL OR ' + _KEY_FREE.format(job='%s', key='v.key') + ') ' if keyed else ''}"
        f"{'ON CONFLICT DO NOTHING RETURNING id, idempotency_key' if keyed else 'RETURNING id'}"
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
