"""Which database django-strait's tables live in: ``STRAIT["DATABASE"]``, chosen in one place.

Every query goes there: the worker's, and those of ``trigger()``, the admin, the
REST API and the commands. With ``STRAIT["DATABASE"]`` other than ``"default"``,
add :class:`StraitRouter` to ``DATABASE_ROUTERS`` (a system check says so):
Django then sends the models' queries and migrations there, and code that
opens a transaction or a cursor asks :func:`alias`.

API keys stay with the users who create them (``ApiKey.created_by`` is a
foreign key to the user model), in the database the router leaves them to.
"""

from __future__ import annotations

from typing import Any

from django_strait.conf import strait_settings

APP_LABEL = "django_strait"
#: Models that belong with the project's users, not with the jobs.
_WITH_USERS = frozenset({"apikey"})


def alias(using: str | None = None) -> str:
    """Return ``using`` if given, else the alias of django-strait's database."""
    return using or strait_settings.DATABASE


def _routed(model: Any) -> str | None:
    meta = model._meta
    if meta.app_label != APP_LABEL or meta.model_name in _WITH_USERS:
        return None
    return strait_settings.DATABASE


class StraitRouter:
    """A database router: django-strait's tables (but API keys) in ``STRAIT["DATABASE"]``."""

    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return _routed(model)

    def db_for_write(self, model: Any, **hints: Any) -> str | None:
        return _routed(model)

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool | None:
        return None

    def allow_migrate(
        self, db: str, app_label: str, model_name: str | None = None, **hints: Any
    ) -> bool | None:
        if app_label != APP_LABEL:
            return None
        if model_name in _WITH_USERS:
            return db == "default"
        # The models, and SQL without a model (the NOTIFY trigger): the jobs' database only.
        return db == strait_settings.DATABASE
