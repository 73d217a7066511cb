"""STRAIT["STORAGE"]: which backend ``storage.backend()`` returns, and what a bad value says."""

from __future__ import annotations

import pytest
from django.core import checks
from django.db import connection
from django.test import override_settings

from django_strait.conf import SettingError, strait_settings
from django_strait.storage import (
    OrmStorage,
    PostgresStorage,
    backend,
    backend_class,
    protocol_gaps,
)
from tests.unit.memory import MemoryStorage

# Settings are read from a clean environment (tests/unit/conftest.py).
pytestmark = pytest.mark.usefixtures("clean_strait_env")

ON_POSTGRES = connection.vendor == "postgresql"


def storage_errors() -> list[checks.CheckMessage]:
    return [m for m in checks.run_checks(tags=["django_strait"]) if m.id == "django_strait.E006"]


def test_default__is_the_database_engines_own_backend():
    assert backend_class("default") is (PostgresStorage if ON_POSTGRES else OrmStorage)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("orm", OrmStorage),
        (" orm ", OrmStorage),
        ("django_strait.storage.orm.OrmStorage", OrmStorage),
    ],
)
def test_named__is_the_class_it_names(value, expected):
    with override_settings(STRAIT={"STORAGE": value}):
        assert backend_class("default") is expected
        assert type(backend()) is expected
        assert storage_errors() == []


def test_backend__follows_a_change_of_the_setting():
    with override_settings(STRAIT={"STORAGE": "orm"}):
        assert type(backend()) is OrmStorage
    assert type(backend()) is (PostgresStorage if ON_POSTGRES else OrmStorage)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("mysql", "is neither 'orm' nor 'postgresql' nor a dotted path"),
        ("no_such_package.Storage", "cannot be imported (ModuleNotFoundError"),
        ("django_strait.storage.NoSuchStorage", "cannot be imported (ImportError"),
        ("django_strait.storage.backend", "is a function, not a class"),
        (42, "42 is not allowed"),
        ("", "'' is not allowed"),
    ],
)
def test_bad_value__is_an_error_naming_the_setting_and_what_is_allowed(value, problem):
    with override_settings(STRAIT={"STORAGE": value}):
        with pytest.raises(SettingError) as caught:
            _ = strait_settings.STORAGE
        [error] = [m for m in checks.run_checks(tags=["django_strait"]) if m.level >= checks.ERROR]
    assert caught.value.field == "STRAIT.STORAGE"
    assert problem in str(caught.value)
    assert "an importable class that satisfies the Storage Protocol" in str(caught.value)
    assert error.id == "django_strait.E003"


def test_environment__names_the_variable(monkeypatch):
    monkeypatch.setenv("STRAIT_STORAGE", "nope")
    strait_settings.reload()
    with pytest.raises(SettingError) as caught:
        _ = strait_settings.STORAGE
    assert caught.value.field == "STRAIT_STORAGE"
    monkeypatch.setenv("STRAIT_STORAGE", "orm")
    strait_settings.reload()
    assert strait_settings.STORAGE == "orm"
    assert strait_settings.field("STORAGE") == "STRAIT_STORAGE"


class HalfStorage:
    """Has some verbs of the Protocol, not all."""

    can_listen = False

    def __init__(self, alias: str) -> None:
        self.alias = alias

    def claim(self, *args, **kwargs):
        return []


def test_a_class_lacking_verbs__is_e006_listing_them():
    with override_settings(STRAIT={"STORAGE": f"{__name__}.HalfStorage"}):
        with pytest.raises(SettingError) as caught:
            backend_class("default")
        [error] = storage_errors()
    assert caught.value.field == "STRAIT.STORAGE"
    assert "lacks what the Storage Protocol asks: " in str(caught.value)
    assert "apply_circuit_results, " in str(caught.value)
    assert " claim," not in str(caught.value) and "can_listen" not in str(caught.value)
    assert "record" in error.msg and "docs/architecture.md" in error.hint


@pytest.mark.skipif(ON_POSTGRES, reason="on PostgreSQL the PostgreSQL backend fits")
def test_the_postgresql_backend_on_another_database__is_e006():
    with override_settings(STRAIT={"STORAGE": "postgresql"}):
        [error] = storage_errors()
    assert "cannot run on 'default', a sqlite database" in error.msg


def test_protocol_gaps__none_in_the_projects_backends_and_the_in_memory_one():
    assert protocol_gaps(OrmStorage) == protocol_gaps(PostgresStorage) == []
    assert protocol_gaps(MemoryStorage) == []
    assert "record" in protocol_gaps(HalfStorage) and "alias" not in protocol_gaps(HalfStorage)
