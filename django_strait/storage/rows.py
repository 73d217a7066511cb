"""Reading rows that may not be readable: each row read, or set aside with an error naming it.

Rows reach the tables by more doors than the model's checks guard: raw SQL, an
older release, a restored backup. PostgreSQL takes values no Python reader can
hold, and a reader of many rows (a duty, a list page, the worker's caches) must
not stop at the one it cannot read. What goes wrong, and where:

- ``'infinity'`` and ``'-infinity'`` in a timestamp or date column: psycopg 3's
  loaders (Django reads text) raise ``DataError`` ("timestamp too large (after
  year 10K): 'infinity'") while the rows are fetched, so one value fails the
  whole query's fetch. The error is raised in the client: the transaction is not
  aborted, and the other rows can be read in another query.
- JSON nested past Python's recursion limit: ``RecursionError`` when the JSON
  field decodes it, again for the whole fetch.
- NaN (``float`` or ``Decimal``) and infinite floats load, but a NaN ``Decimal``
  refuses every comparison (``InvalidOperation``), JSON cannot say them, and no
  bound holds for them; text that is none of a field's choices loads too, and
  then fails whatever maps it (``CircuitState('sideways')``).

:func:`read` evaluates a queryset as it would be evaluated anyway; only when that
fails does it split the rows (by primary key) until each bad one is alone, and
find the fields that cannot be read, one query per field. The rows it reads are
checked for the values that load but cannot be used (non-finite numbers, text
that is not a choice, and any bound the caller names). A row with a problem is
set aside as an :class:`Unreadable`, logged, and given back as a stand-in (its
bad fields None) where the caller shows rows to a person. Nothing is changed in
the table: the reader that owns the row decides what becomes of it (a run fails
with the error, a circuit is rewritten by its next result, a page shows it).
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Generic, TypeVar

from django.core.exceptions import FieldDoesNotExist, ValidationError
from django.db import DatabaseError, InterfaceError, OperationalError, connections
from django.db.models import Model, Q, QuerySet

logger = logging.getLogger(__name__)

M = TypeVar("M")

#: Most ids read in one query while looking for the bad rows of a failed read.
SPLIT_AT = 1000
#: Seconds before the same problem of the same row is logged again (a duty reads every second).
LOG_AGAIN_AFTER = 600.0
_LOGGED_KEPT = 10_000
_logged: dict[tuple[str, Any, str], float] = {}
#: The instants a reader can hold: a day inside Python's years 1 to 9999 (so that any
#: zone can show them). PostgreSQL's go further, and to ±infinity.
EARLIEST = dt.datetime(1, 1, 2, tzinfo=dt.UTC)
LATEST = dt.datetime(9999, 12, 30, tzinfo=dt.UTC)


def readable_instants(field: str, *, dates: bool = False) -> Q:
    """The rows whose timestamp (or, with ``dates``, date) ``field`` a reader can hold.

    What a window (``minute >= an hour ago``) or an aggregate (``Min``, ``Max``) over
    it must keep to: one row's ``'infinity'`` is in every window that has no end, and
    fails the whole answer.
    """
    low, high = (EARLIEST.date(), LATEST.date()) if dates else (EARLIEST, LATEST)
    return Q(**{f"{field}__gte": low, f"{field}__lte": high})


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A row set aside: its table, its id, the field that cannot be read or used, and why."""

    table: str
    pk: Any
    #: The field ("opened_at"), a related row's ("job.headers"), or "" when no one field fails.
    field: str
    #: What is wrong: "cannot be read (DataError: timestamp too large ...)".
    problem: str

    def __str__(self) -> str:
        where = f"field {self.field}" if self.field else "the row"
        return f"{self.table} id {self.pk}, {where}: {self.problem}"


class SetAside(Exception):
    """A reader cannot go on without rows it had to set aside (a workflow without its steps)."""

    def __init__(self, problems: Sequence[Unreadable]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(map(str, self.problems)))


@dataclass(slots=True)
class Read(Generic[M]):
    """What :func:`read` found: the rows it can hand on, and the rows set aside."""

    rows: list[M]
    unreadable: list[Unreadable] = field(default_factory=list)

    def problems_of(self, pk: Any) -> list[Unreadable]:
        """The problems of row ``pk`` (none: it was read whole)."""
        return [u for u in self.unreadable if u.pk == pk]


def read(
    rows: QuerySet,
    *,
    bounded: Sequence[str] = (),
    stand_ins: bool = False,
    log: bool = True,
) -> Read:
    """Evaluate ``rows``; set aside each row that cannot be read or used, naming its field.

    ``bounded`` names fields whose validators (the bounds every write path checks)
    the rows must pass. With ``stand_ins``, a set-aside row stays in ``rows`` in
    its place, its bad fields None and its problems in ``row.unreadable``; without,
    it is left out. A failure that is not one row's (a lost connection, a
    statement the database refused inside a transaction) is raised.
    """
    try:
        found = list(rows)
    except Exception as exc:
        if not one_rows_doing(rows.db, exc):
            raise
        found, unreadable = _split(rows, exc)
    else:
        unreadable = []
    split = bool(unreadable)
    kept = []
    computed = tuple(rows.query.annotation_select)
    for row in found:
        problems = _unusable(row, bounded, computed) if isinstance(row, Model) else []
        if problems:
            unreadable += problems
            row = _stand_in(row, problems) if stand_ins else None
        if row is not None:
            kept.append(row)
    if stand_ins and split:
        kept = _in_order(rows, kept, unreadable)
    if log:
        for problem in unreadable:
            say(problem)
    return Read(kept, unreadable)


def check_finite(table: str, pk: Any, **values: Any) -> None:
    """Raise :class:`SetAside` naming each of ``values`` (by field) that is not a finite number:
    for a reader that reads numbers by raw SQL (a ledger in the claim), not through :func:`read`."""
    problems = [
        Unreadable(table, pk, name, problem)
        for name, value in values.items()
        if (problem := _unusable_number(value)) is not None
    ]
    if problems:
        raise SetAside(problems)


def explain(rows: QuerySet, exc: BaseException) -> None:
    """Raise :class:`SetAside` naming the rows of ``rows`` that cannot be read, if ``exc``
    (raised reading them some other way) was theirs; else return, for the caller to raise."""
    if one_rows_doing(rows.db, exc):
        found = read(rows, log=False)
        if found.unreadable:
            raise SetAside(found.unreadable) from exc


def forget() -> None:
    """Forget the rows this process set aside: the next read names them anew, and logs them."""
    _logged.clear()
    _known.clear()


def say(problem: Unreadable) -> None:
    """Log a row set aside: once per row and problem every ``LOG_AGAIN_AFTER`` seconds."""
    key = (problem.table, problem.pk, problem.field)
    now = time.monotonic()
    if now - _logged.get(key, -LOG_AGAIN_AFTER) < LOG_AGAIN_AFTER:
        return
    if len(_logged) >= _LOGGED_KEPT:
        _logged.clear()
    _logged[key] = now
    logger.error(
        "set aside %s", problem,
        extra={"table": problem.table, "row_id": problem.pk, "field": problem.field},
    )  # fmt: skip


def problem_of(exc: BaseException) -> str:
    """Say what an exception raised by reading a value was: 'cannot be read (DataError: ...)'."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"cannot be read ({type(exc).__name__}{': ' + text[:300] if text else ''})"


# -- finding the bad rows of a read that failed ------------------------------------------


def one_rows_doing(alias: str, exc: BaseException) -> bool:
    """Whether ``exc``, raised reading rows of ``alias``, may be one row's fault, and the
    others can still be read on the same connection."""
    if not isinstance(exc, Exception) or isinstance(exc, InterfaceError | OperationalError):
        return False  # the connection (or the process), not a row
    if isinstance(exc, DatabaseError) and connections[alias].in_atomic_block:
        # The server refused the statement: its transaction is aborted. A value the
        # client cannot load (psycopg's DataError for 'infinity') leaves it usable.
        return getattr(exc.__cause__, "sqlstate", None) is None
    return True


def _split(rows: QuerySet, exc: Exception) -> tuple[list, list[Unreadable]]:
    """Read ``rows`` in halves until each row that fails is alone; name its fields.

    A row this process found bad before, read the same way, is read alone first and,
    still bad, named as it was: a duty that meets it every second pays two queries for
    it, not one per field (until ``LOG_AGAIN_AFTER`` has passed, when it is named anew).
    """
    whole = _unsliced(rows)
    pks = list(rows.values_list("pk", flat=True))
    shape = (rows.model._meta.db_table, tuple(_fields_read(rows)))
    now = time.monotonic()
    known = {pk: problems for pk in pks if (problems := _recall(shape, pk, now))}
    found: list = []
    unreadable: list[Unreadable] = []
    for pk, problems in known.items():
        try:
            found += list(whole.filter(pk=pk))  # fixed since
        except Exception as again:
            if not one_rows_doing(rows.db, again):
                raise
            unreadable += problems
    rest = [pk for pk in pks if pk not in known]
    pending = [rest[i : i + SPLIT_AT] for i in range(0, len(rest), SPLIT_AT)]
    while pending:
        part = pending.pop(0)
        try:
            found += list(whole.filter(pk__in=part))
        except Exception as again:
            if not one_rows_doing(rows.db, again):
                raise
            if len(part) > 1:
                half = len(part) // 2
                pending[:0] = [part[:half], part[half:]]
            else:
                problems = _why(whole, part[0], again)
                _remember(shape, part[0], problems, now)
                unreadable += problems
    if found and isinstance(found[0], Model):
        at = {pk: n for n, pk in enumerate(pks)}  # in the query's order, as read whole
        found.sort(key=lambda row: at[row.pk])
    return found, unreadable


#: (table, fields read, id) -> (when, problems): rows this process found it cannot read.
_known: dict[tuple, tuple[float, list[Unreadable]]] = {}


def _recall(shape: tuple, pk: Any, now: float) -> list[Unreadable] | None:
    found = _known.get((*shape, pk))
    return found[1] if found is not None and now - found[0] < LOG_AGAIN_AFTER else None


def _remember(shape: tuple, pk: Any, problems: list[Unreadable], now: float) -> None:
    if len(_known) >= _LOGGED_KEPT:
        _known.clear()
    _known[(*shape, pk)] = (now, problems)


def _unsliced(rows: QuerySet) -> QuerySet:
    whole = rows._chain()  # type: ignore[attr-defined]
    whole.query.clear_limits()
    return whole


def _why(rows: QuerySet, pk: Any, exc: Exception) -> list[Unreadable]:
    """Name the fields of row ``pk`` that cannot be read: one query per field."""
    table = rows.model._meta.db_table
    one = rows.filter(pk=pk)
    bad = [
        Unreadable(table, pk, name.replace("__", "."), problem_of(error))
        for name in _fields_read(rows)
        if (error := _fails(one, name)) is not None
    ]
    return bad or [Unreadable(table, pk, "", problem_of(exc))]


def _fields_read(rows: QuerySet) -> list[str]:
    """The fields (and related rows' fields) that ``rows`` loads."""
    query = rows.query
    # The row's own columns too when it is read as values: an annotation that fails
    # (``Coalesce("heartbeat_at", ...)``) is then traced to the column that does.
    own = [f.attname for f in rows.model._meta.concrete_fields]
    named, deferring = query.deferred_loading
    if not query.values_select and named:  # only(...) or defer(...): what it reads
        meta = rows.model._meta
        mine = {meta.pk.attname if n == "pk" else meta.get_field(n).attname
                for n in named if "__" not in n}  # fmt: skip
        own = [n for n in own if (n in mine) != deferring or n == meta.pk.attname]
    names = [n for n in query.values_select if n not in own] + own
    names += list(query.annotation_select)
    related = query.select_related
    if isinstance(related, dict):
        names += [name for path in _paths(related) for name in _related_fields(rows.model, path)]
    return names


def _paths(tree: dict, prefix: str = "") -> Iterable[str]:
    for name, below in tree.items():
        yield prefix + name
        yield from _paths(below, f"{prefix}{name}__")


def _related_fields(model: type[Model], path: str) -> list[str]:
    for part in path.split("__"):
        model = model._meta.get_field(part).related_model  # type: ignore[assignment]
    return [f"{path}__{f.attname}" for f in model._meta.concrete_fields]


def _fails(one: QuerySet, name: str) -> Exception | None:
    try:
        list(one.values_list(name))
    except Exception as exc:
        return exc
    return None


# -- values that load but cannot be used ---------------------------------------------------


def _unusable(row: Model, bounded: Sequence[str], computed: Sequence[str]) -> list[Unreadable]:
    """The loaded fields (and ``computed`` annotations) of ``row`` that no reader can use,
    and the fields out of ``bounded``'s bounds."""
    loaded = row.__dict__
    table = row._meta.db_table
    problems = [
        Unreadable(table, row.pk, name, problem)
        for name in computed
        if (problem := _unusable_number(loaded.get(name))) is not None
    ]
    for f in row._meta.concrete_fields:
        if f.attname not in loaded:
            continue  # deferred: not read
        problem = _unusable_value(f, loaded[f.attname])
        if problem is None and f.name in bounded:
            problem = _out_of_bounds(f, loaded[f.attname])
        if problem is not None:
            problems.append(Unreadable(row._meta.db_table, row.pk, f.name, problem))
    return problems


def _unusable_number(value: Any) -> str | None:
    if isinstance(value, float) and not math.isfinite(value):
        return f"is {value!r}, not a finite number"
    if isinstance(value, Decimal) and not value.is_finite():
        return f"is {value}, not a finite number"
    return None


def _unusable_value(f: Any, value: Any) -> str | None:
    problem = _unusable_number(value)
    if problem is not None:
        return problem
    if f.choices and value not in _choice_values(f) and not (value in (None, "") and f.blank):
        return f"is {value!r}, not one of {', '.join(map(repr, _choice_values(f)))}"
    return None


def _choice_values(f: Any) -> tuple:
    return tuple(key for key, _ in f.flatchoices)


def _out_of_bounds(f: Any, value: Any) -> str | None:
    if value is None:
        return None
    try:
        f.run_validators(value)
    except ValidationError as exc:
        return " ".join(exc.messages)
    return None


# -- stand-ins: a set-aside row, shown --------------------------------------------------------


def _stand_in(row: Model, problems: list[Unreadable]) -> Model:
    """``row`` with its unusable fields None, and its problems in ``row.unreadable``."""
    for problem in problems:
        row.__dict__[_attname(row, problem.field)] = None
    row.unreadable = problems  # type: ignore[attr-defined]
    return row


def _attname(row: Model, name: str) -> str:
    """Where ``row`` keeps field (or annotation) ``name``."""
    try:
        return row._meta.get_field(name).attname  # type: ignore[union-attr]
    except FieldDoesNotExist:
        return name


def _in_order(rows: QuerySet, kept: list, unreadable: list[Unreadable]) -> list:
    """The rows read and stand-ins for the rows that could not be, in the query's order."""
    by_pk = {row.pk: row for row in kept if isinstance(row, Model)}
    if len(by_pk) != len(kept):
        return kept  # not model rows: nothing to stand in for them
    problems: dict[Any, list[Unreadable]] = {}
    for problem in unreadable:
        problems.setdefault(problem.pk, []).append(problem)
    order = list(rows.values_list("pk", flat=True))
    return [
        by_pk[pk] if pk in by_pk else _build_stand_in(rows, pk, problems[pk])
        for pk in order
        if pk in by_pk or pk in problems
    ]


def _build_stand_in(rows: QuerySet, pk: Any, problems: list[Unreadable]) -> Model:
    """A row that could not be read, built from the fields that can, the others None."""
    model = rows.model
    own = {f.name for f in model._meta.concrete_fields}
    bad = [p.field for p in problems if p.field in own]
    try:
        row = _unsliced(rows).select_related(None).defer(*bad).get(pk=pk)
    except Exception:
        row = model(pk=pk)
        row.__dict__.update(
            {f.attname: None for f in model._meta.concrete_fields if f.name != "id"}
        )
        row._state.adding = False
        row._state.db = rows.db
    for name in bad:
        row.__dict__[model._meta.get_field(name).attname] = None
    for relation, fields in _by_relation(problems).items():
        _stand_in_related(row, relation, fields, [p for p in problems if p.field in fields])
    row.unreadable = problems  # type: ignore[attr-defined]
    return row


def _by_relation(problems: list[Unreadable]) -> dict[str, list[str]]:
    """The related rows' fields among ``problems`` ("job.headers"), by relation: one level."""
    found: dict[str, list[str]] = {}
    for problem in problems:
        relation, dot, name = problem.field.partition(".")
        if dot and "." not in name:
            found.setdefault(relation, []).append(problem.field)
    return found


def _stand_in_related(row: Model, relation: str, fields: list[str], problems: list) -> None:
    """Put a stand-in of ``row``'s related row in its cache, so that reading it does not fail."""
    f = row._meta.get_field(relation)
    pk = getattr(row, f.attname, None)  # type: ignore[union-attr]
    if pk is None:
        return
    names = [name.partition(".")[2] for name in fields]
    related = f.related_model._meta.default_manager.using(row._state.db)  # type: ignore[union-attr]
    try:
        other = related.defer(*names).get(pk=pk)
    except Exception:
        return  # left to load (and fail) where it is read
    for name in names:
        other.__dict__[other._meta.get_field(name).attname] = None
    other.unreadable = [  # type: ignore[attr-defined]
        Unreadable(other._meta.db_table, pk, p.field.partition(".")[2], p.problem) for p in problems
    ]
    setattr(row, relation, other)
