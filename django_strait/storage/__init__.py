"""Where runs are stored and moved: backends behind one interface, chosen by a setting.

``backend()`` returns the backend of ``STRAIT["DATABASE"]``: the class
``STRAIT["STORAGE"]`` names (``"orm"``, ``"postgresql"``, or the dotted path of a
class outside this package), else, by the database's engine,
:class:`~django_strait.storage.postgres.PostgresStorage` on PostgreSQL and
:class:`~django_strait.storage.orm.OrmStorage` (the portable ORM) on every other.
The two are siblings that share ``storage.common``; each implements
:class:`~django_strait.storage.base.Storage`, and no other module asks which
database it is on. tests/conformance runs one suite on any of them
(docs/architecture.md, "A new storage backend").
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from django.core.signals import setting_changed
from django.db import connections
from django.dispatch import receiver
from django.utils.module_loading import import_string

from django_strait.conf import SettingError, strait_settings
from django_strait.database import alias as strait_alias
from django_strait.rules.conf_values import STORAGE_ALLOWED
from django_strait.storage.base import Storage
from django_strait.storage.orm import OrmStorage
from django_strait.storage.postgres import PostgresStorage
from django_strait.storage.values import (
    Claimed,
    Hold,
    Record,
    RecordBatch,
    Recorded,
    Rescued,
    Stale,
    Waiting,
)

__all__ = [
    "BACKENDS",
    "Claimed",
    "Hold",
    "OrmStorage",
    "PostgresStorage",
    "Record",
    "RecordBatch",
    "Recorded",
    "Rescued",
    "Stale",
    "Storage",
    "Waiting",
    "backend",
    "backend_class",
    "protocol_gaps",
    "protocol_members",
]

#: The backends ``STRAIT["STORAGE"]`` names without a dotted path ("postgresql" is
#: also Django's vendor name for PostgreSQL: the default there).
BACKENDS: dict[str, type[Storage]] = {"orm": OrmStorage, "postgresql": PostgresStorage}


def backend(alias: str | None = None) -> Storage:
    """Return the storage backend of ``alias`` (default: ``STRAIT["DATABASE"]``)."""
    return _backend(strait_alias(alias))


@functools.cache
def _backend(alias: str) -> Storage:
    return backend_class(alias)(alias)


@receiver(setting_changed)
def _forget_backends(*, setting: str, **kwargs: Any) -> None:
    # A test that changes STRAIT["STORAGE"] or the databases gets the backend they say.
    if setting in ("STRAIT", "DATABASES"):
        _backend.cache_clear()


def backend_class(alias: str) -> type[Storage]:
    """The class ``STRAIT["STORAGE"]`` names, or the default of ``alias``'s database engine.

    Raises ``SettingError`` naming the setting when the class lacks a verb of the
    Protocol, or names the PostgreSQL backend on another database.
    """
    name = strait_settings.STORAGE
    if name is None:
        return BACKENDS["postgresql" if connections[alias].vendor == "postgresql" else "orm"]
    cls = BACKENDS[name] if name in BACKENDS else import_string(name)
    field = strait_settings.field("STORAGE")
    missing = protocol_gaps(cls)
    if missing:
        problem = f"{name!r} lacks what the Storage Protocol asks: {', '.join(missing)}"
        raise SettingError(field, name, STORAGE_ALLOWED, problem=problem)
    vendor = connections[alias].vendor
    if cls is PostgresStorage and vendor != "postgresql":
        problem = f"the PostgreSQL backend cannot run on {alias!r}, a {vendor} database"
        raise SettingError(field, name, "'orm' or a backend for that database", problem=problem)
    return cls


#: Members of the Protocol an instance sets for itself (the class need not have them).
_SET_BY_INSTANCE = frozenset({"alias"})


def protocol_members() -> set[str]:
    """Every verb and flag of the Storage Protocol, gathered from each of its concerns
    (``storage.base``: ``RunVerbs``, ``ProtectionVerbs``, ...), the instance's own left out."""
    wanted: set[str] = set()
    for concern in Storage.__mro__:
        if concern.__module__ == Storage.__module__:
            wanted |= {name for name in vars(concern) if not name.startswith("_")}
            wanted |= set(inspect.get_annotations(concern)) - _SET_BY_INSTANCE
    return wanted


def protocol_gaps(cls: type) -> list[str]:
    """Every member of the Storage Protocol (verb or flag) that ``cls`` does not have."""
    return sorted(name for name in protocol_members() if not hasattr(cls, name))
