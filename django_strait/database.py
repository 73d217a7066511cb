"""Which databases django-strait's tables live in, and where each queue's rows are: one place.

One database (the default): ``STRAIT["DATABASE"]``, and every query goes there:
the worker's, and those of ``trigger()``, the admin, the REST API and the
commands. Several: ``STRAIT["DATABASES"]`` lists the aliases holding the tables
(its first is :func:`alias`), ``STRAIT["QUEUE_DATABASES"]`` places queues on
them (:func:`alias_for_queue`; an unlisted queue lives on the first), and a job's
rows (the job, its runs, attempts, holds, workflows, webhook deliveries) live on
its queue's alias. ``STRAIT["CONTROL_DATABASE"]`` (:func:`control_alias`) is the
one home of the protection state the fleet shares.

With an alias other than ``"default"``, add :class:`StraitRouter` to
``DATABASE_ROUTERS`` (a system check says so): Django then sends the models'
queries and migrations there, and code that opens a transaction or a cursor
asks :func:`alias`. With several aliases, a query without ``using`` goes to
the first; a row read from an alias is saved back there.

API keys stay with the users who create them (``ApiKey.created_by`` is a
foreign key to the user model), in the database the router leaves them to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django_strait.conf import strait_settings

APP_LABEL = "django_strait"
#: Models that belong with the project's users, not with the jobs.
_WITH_USERS = frozenset({"apikey"})
#: The protection state the fleet shares: on the control database (several aliases).
_CONTROL = frozenset({"endpointcircuit", "endpointhealth", "healthsample"})


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


class StraitRouter:
    """A database router: django-strait's tables (but API keys) on its aliases."""

    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return _routed(model, hints)

    def db_for_write(self, model: Any, **hints: Any) -> str | None:
        return _routed(model, hints)

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool | None:
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
