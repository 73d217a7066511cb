"""Which databases django-strait's tables live in, and where each queue's rows are: one place.

One database (the default): ``STRAIT["DATABASE"]``, and every query goes there:
the worker's, and those of ``trigger()``, the admin, the REST API and the
commands. Several: ``STRAIT["DATABASES"]`` lists the aliases holding the tables
(its first is :func:`alias`), ``STRAIT["QUEUE_DATABASES"]`` places queues on
them (:func:`alias_for_queue`; an unlisted queue lives on the first), and a job's
rows (the job, its runs, attempts, holds, workflows, webhook deliveries) live on
its queue's alias. ``STRAIT["CONTROL_DATABASE"]`` (:func:`control_alias`) is the
one home of the protection state the fleet shares: circuits, endpoint health,
and budgets (projects, their ledger days, and the reservations of other
aliases' runs: :func:`control_elsewhere`).

With an alias other than ``"default"``, add :class:`StraitRouter` to
``DATABASE_ROUTERS`` (a system check says so): Django then sends the models'
queries and migrations there, and code that opens a transaction or a cursor
asks :func:`alias`. With several aliases, a query without ``using`` goes to
the first; a row read from an alias is saved back there.

Every row's id says where it lives: the alias at index k of ``STRAIT["DATABASES"]``
numbers its rows from k * 2**48 + 1 (:func:`id_range`, set on ``migrate``), so a
run's id is unique across the aliases and :func:`alias_for_id` finds its alias
from the id alone. The first alias's ids are what a single database's always
were. Append aliases; never reorder them.

API keys stay with the users who create them (``ApiKey.created_by`` is a
foreign key to the user model), in the database the router leaves them to.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError, connections, transaction

from django_strait.conf import strait_settings
from django_strait.rules.conf_placement import MAX_ALIASES

logger = logging.getLogger(__name__)

APP_LABEL = "django_strait"
#: Models that belong with the project's users, not with the jobs.
_WITH_USERS = frozenset({"apikey"})
#: The protection state the fleet shares: on the control database (several aliases).
_CONTROL = frozenset(
    {
        "endpointcircuit", "endpointhealth", "healthsample",
        "project", "budgetledger", "budgetreservation",
    }
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Placement:
    """The placement settings, read once (until the settings are reloaded)."""

    aliases: tuple[str, ...]
    queues: dict[str, str]
    control: str

    @property
    def several(self) -> bool:
        return len(self.aliases) > 1


def _read() -> Placement:
    where = strait_settings.DATABASES or (strait_settings.DATABASE,)
    control = strait_settings.CONTROL_DATABASE or where[0]
    return Placement(where, strait_settings.QUEUE_DATABASES, control)


def placement() -> Placement:
    """The placement settings (a dict lookup: ``alias()`` is on the trigger's path)."""
    return strait_settings.derived("placement", _read)


def alias(using: str | None = None) -> str:
    """Return ``using`` if given, else the alias of django-strait's (first) database."""
    return using or placement().aliases[0]


def aliases() -> tuple[str, ...]:
    """The aliases holding django-strait's tables, the first first (``STRAIT["DATABASES"]``)."""
    return placement().aliases


def alias_for_queue(queue: str) -> str:
    """The alias where the rows of ``queue``'s jobs live (``STRAIT["QUEUE_DATABASES"]``)."""
    where = placement()
    return where.queues.get(queue) or where.aliases[0]


def control_alias() -> str:
    """The alias of the protection state the fleet shares (``STRAIT["CONTROL_DATABASE"]``)."""
    return placement().control


def placed() -> bool:
    """Whether django-strait is on several aliases (else nothing asks where a row lives)."""
    return placement().several


# -- ids that say where a row lives --------------------------------------------------------

#: The alias at index k of ``STRAIT["DATABASES"]`` numbers its rows in
#: (k * 2**ID_BITS, (k + 1) * 2**ID_BITS): 2.8e14 ids an alias, at most MAX_ALIASES.
ID_BITS = 48
assert (MAX_ALIASES << ID_BITS) <= 2**53


def id_range(using: str) -> tuple[int, int]:
    """The ids rows on ``using`` take: above the first, below the second (exclusive bounds)."""
    k = aliases().index(using)
    return max(k << ID_BITS, 0), (k + 1) << ID_BITS


def alias_for_id(pk: object) -> str | None:
    """The alias a row of id ``pk`` lives on, from the id alone; None for no id of ours.

    On one database, every positive id is its. With several, the id's high bits
    name the alias's index in ``STRAIT["DATABASES"]``.
    """
    if isinstance(pk, bool) or not isinstance(pk, int) or pk <= 0:
        return None
    names = aliases()
    if len(names) == 1:
        return names[0]
    k = pk >> ID_BITS
    return names[k] if k < len(names) else None


def on_control(model: Any) -> bool:
    """Whether the router keeps ``model``'s rows on the control database (several aliases)."""
    meta = model._meta
    return meta.app_label == APP_LABEL and meta.model_name in _CONTROL


def _routed(model: Any, hints: dict[str, Any]) -> str | None:
    meta = model._meta
    if meta.app_label != APP_LABEL or meta.model_name in _WITH_USERS:
        return None
    if meta.model_name in _CONTROL and placed():
        return control_alias()
    instance = hints.get("instance")
    if instance is not None and placed():
        # A row read from (or made for) one alias is written back there.
        db = instance._state.db
        if db in aliases():
            return db
    return alias()


def _name(obj: Any) -> str:
    meta = obj._meta
    return meta.model_name if meta.app_label == APP_LABEL else ""


def control_elsewhere(using: str) -> bool:
    """Whether ``using``'s runs keep the shared protection state (circuits, health,
    budgets) on another database, the control one; else in their claim's and their
    record's own statements, as with one database."""
    return placed() and control_alias() != using


class StraitRouter:
    """A database router: django-strait's tables (but API keys) on its aliases."""

    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return _routed(model, hints)

    def db_for_write(self, model: Any, **hints: Any) -> str | None:
        return _routed(model, hints)

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool | None:
        # A job on any alias names its project, which lives on the control database.
        if placed() and {_name(obj1), _name(obj2)} == {"job", "project"}:
            return True
        return None

    def allow_migrate(
        self, db: str, app_label: str, model_name: str | None = None, **hints: Any
    ) -> bool | None:
        if app_label != APP_LABEL:
            return None
        if model_name in _WITH_USERS:
            return db == "default"
        # The models, and SQL without a model (the NOTIFY trigger): the jobs' databases only.
        return db in aliases()


# -- reads off the primary -----------------------------------------------------------------

#: How long the replica's lag query may take before the page reads the primary instead.
LAG_TIMEOUT_MS = 2000


@dataclass(frozen=True, slots=True)
class Reading:
    """Where a page's numbers are read: the replica, how far behind, or why the primary."""

    #: The alias the page reads.
    alias: str
    #: The replica ``STRAIT["READ_DATABASE"]`` names for the jobs' alias ("" when none).
    replica: str = ""
    #: How far the replica's replay is behind its primary, seconds (None when unknown).
    lag_seconds: float | None = None
    #: Why the replica was not read (it did not answer), "" when it was or there is none.
    problem: str = ""

    @property
    def from_replica(self) -> bool:
        return bool(self.replica) and not self.problem


def read_alias(using: str | None = None) -> str:
    """The alias that reads of ``using``'s jobs (default: the jobs' alias) may go to."""
    source = alias(using)
    replicas = strait_settings.READ_DATABASE or {}
    return replicas.get(source) or (replicas.get("") if source == alias() else None) or source


def control_reads(using: str) -> str:
    """Where a page that reads ``using`` reads circuits, health and budgets: ``using`` with
    one database, else the control database (its replica, if ``READ_DATABASE`` names one)."""
    return read_alias(control_alias()) if placed() else using


def reading(using: str | None = None) -> Reading:
    """Where to read ``using``'s dashboards now: its replica, with its lag, else the primary.

    A replica that does not answer (down, or its lag query slower than
    ``LAG_TIMEOUT_MS``) is not read: the page reads the primary and says why.
    """
    source = alias(using)
    replica = read_alias(source)
    if replica == source:
        return Reading(source)
    try:
        lag = replica_lag(replica)
    except DatabaseError as exc:
        logger.warning("the read replica %r did not answer (%s); reading %r", replica, exc, source)
        connections[replica].close()
        return Reading(source, replica, problem=f"{type(exc).__name__}: {exc}".strip()[:300])
    return Reading(replica, replica, lag)


def replica_lag(using: str) -> float | None:
    """How many seconds ``using``'s replay is behind its primary; 0.0 on a primary.

    On PostgreSQL: 0 when the replica has replayed all it received, else the age
    of the last transaction it replayed. None on databases that cannot say (after
    a ``SELECT 1`` that shows it answers).
    """
    connection = connections[using]
    if connection.vendor != "postgresql":
        with connection.cursor() as cursor:  # it answers, but cannot say how far behind
            cursor.execute("SELECT 1")
        return None
    with transaction.atomic(using=using), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL statement_timeout = {LAG_TIMEOUT_MS}")
        cursor.execute(_LAG_SQL)
        (lag,) = cursor.fetchone()
    return None if lag is None else max(float(lag), 0.0)


_LAG_SQL = """
SELECT CASE
    WHEN NOT pg_is_in_recovery() THEN 0
    WHEN pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn() THEN 0
    ELSE extract(epoch FROM clock_timestamp() - pg_last_xact_replay_timestamp())
END
"""
