"""Django system checks for Strait's settings (``manage.py check --tag django_strait``).

| id | problem |
|---|---|
| ``django_strait.E001`` | ``settings.STRAIT`` is not a dict |
| ``django_strait.E002`` | ``settings.STRAIT`` has a key Strait does not know |
| ``django_strait.E003`` | a value in ``settings.STRAIT`` is not allowed |
| ``django_strait.E004`` | a ``STRAIT_*`` environment variable holds a value that is not allowed |
| ``django_strait.W001`` | a ``STRAIT_*`` environment variable that Strait does not read (a typo?) |
| ``django_strait.E005`` | django-strait's tables are not (only) on ``"default"`` (``STRAIT["DATABASE"]`` or ``STRAIT["DATABASES"]``) but ``StraitRouter`` is not installed |
| ``django_strait.W002`` | ``STRAIT["OJS_REQUIRE_AUTH"]`` is False while ``DEBUG`` is off |
| ``django_strait.E006`` | ``STRAIT["STORAGE"]`` names a class that lacks a verb or flag of the Storage Protocol, or the PostgreSQL backend on another database (``storage/checks.py``: it needs the models, this module does not) |
| ``django_strait.W003`` | a project model has a foreign key constraint into runs or attempts, which a partitioned table cannot take |

``django_strait.tasks.StraitBackend`` checks its own ``TASKS`` entry (Django's
task framework runs them): ``E101`` django_strait not installed, ``E102`` a
queue Strait cannot store, ``E103`` bad or unknown ``OPTIONS``, ``E104`` a bad
``OPTIONS["RETRY"]`` policy (docs/django-tasks.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core import checks

from django_strait.conf import SettingError, UnknownSettingError, strait_settings
from django_strait.database import StraitRouter, aliases

TAG = "django_strait"


@checks.register(TAG)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Report every bad ``STRAIT`` setting and ``STRAIT_*`` environment variable."""
    messages: list[checks.CheckMessage] = [_error(exc) for exc in strait_settings.errors()]
    messages.extend(_unknown_env_var(name) for name in strait_settings.unknown_env_vars())
    if not messages:
        messages.extend(_router_missing())
        messages.extend(_ojs_open())
    return messages


def _ojs_open() -> list[checks.CheckMessage]:
    """The OJS binding without API keys lets anyone who reaches it enqueue and take work."""
    if strait_settings.OJS_REQUIRE_AUTH or settings.DEBUG:
        return []
    return [
        checks.Warning(
            "STRAIT['OJS_REQUIRE_AUTH'] is False: anyone who can reach /ojs/ may enqueue, "
            "fetch, ack and cancel jobs without an API key.",
            hint="Keep it True unless only a trusted network reaches the OJS endpoints.",
            id="django_strait.W002",
        )
    ]


ROUTER = "django_strait.database.StraitRouter"


def _router_missing() -> list[checks.CheckMessage]:
    """Without the router, the admin, the API and trigger() would use "default" (docs/security.md)."""
    try:
        where = aliases()
    except SettingError:
        return []  # reported by check_settings
    if where == ("default",):
        return []
    routers = getattr(settings, "DATABASE_ROUTERS", [])
    if any(r == ROUTER or isinstance(r, StraitRouter) for r in routers):
        return []
    setting = "DATABASES" if len(where) > 1 else "DATABASE"
    shown = list(where) if len(where) > 1 else where[0]
    return [
        checks.Error(
            f"STRAIT[{setting!r}] is {shown!r}, but DATABASE_ROUTERS does not "
            f"include {ROUTER!r}: the admin, the REST API and trigger() would use 'default'.",
            hint=f"Add {ROUTER!r} to settings.DATABASE_ROUTERS.",
            id="django_strait.E005",
        )
    ]


def _error(exc: SettingError) -> checks.Error:
    if exc.field == "STRAIT":
        return checks.Error(str(exc), id="django_strait.E001")
    if exc.from_environment:
        hint = "The environment wins over settings.STRAIT; fix or unset the variable."
        return checks.Error(str(exc), hint=hint, id="django_strait.E004")
    if isinstance(exc, UnknownSettingError):
        hint = "Remove the key, or correct its spelling; see docs/settings.md."
        return checks.Error(str(exc), hint=hint, id="django_strait.E002")
    return checks.Error(str(exc), hint="Fix the value in settings.STRAIT.", id="django_strait.E003")


def _unknown_env_var(name: str) -> checks.Warning:
    return checks.Warning(
        f"{name} is set in the environment but Strait reads no such variable.",
        hint="Check the spelling against docs/settings.md, or unset it.",
        id="django_strait.W001",
    )


#: The models whose tables are partitioned on PostgreSQL (storage.postgres.layout).
PARTITIONED_MODELS = ("django_strait.JobRun", "django_strait.RunAttempt")


@checks.register(TAG)
def check_foreign_keys_into_runs(app_configs: Any = None, **kwargs: Any) -> list[checks.Warning]:
    """W003: a foreign key constraint into runs or attempts, where those tables are partitioned.

    A partitioned table has no unique ``id`` of its own (each leaf has its primary
    key), so PostgreSQL refuses a constraint that points at it: the project's
    migration that adds one fails, and migration 0020 and ``strait_partition`` drop
    the ones that exist. ``db_constraint=False`` keeps the relation without one.
    """
    if strait_settings.errors() or not strait_settings.PARTITION_RUNS:
        return []
    engine = settings.DATABASES.get(strait_settings.DATABASE, {}).get("ENGINE", "")
    if "postgresql" not in engine:
        return []
    return [
        checks.Warning(
            f"{model._meta.label}.{field.name} is a foreign key constraint into "
            f"{field.related_model._meta.label}, whose table is partitioned on PostgreSQL: "
            "PostgreSQL refuses such a constraint (migration 0020 and strait_partition "
            "drop one that exists).",
            hint="Declare it with db_constraint=False (or set STRAIT['PARTITION_RUNS'] = False).",
            obj=field,
            id="django_strait.W003",
        )
        for model, field in foreign_keys_into_runs(_models(app_configs))
    ]


def _models(app_configs: Any) -> list[type]:
    if app_configs is None:
        return apps.get_models(include_auto_created=True)
    return [m for config in app_configs for m in config.get_models(include_auto_created=True)]


def foreign_keys_into_runs(models: Iterable[type]) -> list[tuple[type, Any]]:
    """Every (model, field) of ``models`` outside django_strait with a database
    constraint into a partitioned model: foreign keys, one-to-ones, and
    many-to-manys (their through tables' keys)."""
    found = []
    for model in models:
        if model._meta.app_label == "django_strait" and not model._meta.auto_created:
            continue
        for field in model._meta.local_fields:
            target = getattr(field, "related_model", None)
            if (
                field.is_relation
                and target is not None
                and target._meta.label in PARTITIONED_MODELS
                and getattr(field, "db_constraint", False)
            ):
                found.append((model, field))
    return found
