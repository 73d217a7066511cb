"""The system check of ``STRAIT["STORAGE"]`` (``django_strait.E006``).

``conf`` checks that the setting names a short name or a class that imports; that
the class has every verb and flag of the Storage Protocol is this layer's to say,
and needs the models imported, which ``django_strait.checks`` must not.
"""

from __future__ import annotations

from typing import Any

from django.core import checks
from django.db import DatabaseError

from django_strait.checks import TAG
from django_strait.conf import SettingError, strait_settings
from django_strait.database import aliases, id_range, placed
from django_strait.storage import backend_class
from django_strait.storage.ids import outside_range

HINT = (
    "Name 'orm', 'postgresql', or a class with every method and flag of "
    "django_strait.storage.base.Storage (docs/architecture.md, 'A new storage backend')."
)


@checks.register(TAG)
def check_storage(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """E006: the backend ``STRAIT["STORAGE"]`` names cannot serve ``STRAIT["DATABASE"]``."""
    if strait_settings.errors() or strait_settings.STORAGE is None:
        return []  # a bad value is E003/E004's; None is the database engine's own backend
    try:
        backend_class(strait_settings.DATABASE)
    except SettingError as exc:
        return [checks.Error(str(exc), hint=HINT, id="django_strait.E006")]
    return []


# Only with the database checks (``check --database``, ``migrate``): not among the app's
# own, which must not touch a database (Django 6 runs those with every database listed).
@checks.register(checks.Tags.database)
def check_id_ranges(databases: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """W004: an alias's ids are not in its range, so an id would not say where its row lives.

    A warning, not an error: ``migrate`` runs the database checks first, and is
    what moves the ids (``storage.ids``).
    """
    if databases is None or strait_settings.errors() or not placed():
        return []  # None: a check without --database, which must not touch them
    found = []
    for using in aliases():
        if using not in databases:
            continue
        try:
            tables = outside_range(using)
        except DatabaseError:
            continue  # not migrated yet, or away: migrate says so
        if tables:
            found.append(
                checks.Warning(
                    f"The ids of {', '.join(tables)} on database {using!r} are not in the range "
                    f"of its place in STRAIT['DATABASES'] {id_range(using)}: an id would name "
                    "the wrong database.",
                    hint=f"Run 'manage.py migrate --database {using}' (it moves them), and "
                    "add aliases to STRAIT['DATABASES'] at its end, before they hold rows.",
                    id="django_strait.W004",
                )
            )
    return found
