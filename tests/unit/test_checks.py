"""The django_strait system checks: every bad STRAIT value reported, none when all is well."""

from __future__ import annotations

import contextlib
import warnings

import pytest
from django.apps import apps as django_apps
from django.conf import settings
from django.core import checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings
from django.test.utils import isolate_apps

from django_strait.checks import (
    check_foreign_keys_into_runs,
    check_settings,
    foreign_keys_into_runs,
)

# Settings are read from a clean environment (tests/unit/conftest.py).
pytestmark = pytest.mark.usefixtures("clean_strait_env")


JOBS_DB = {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}


def run() -> list[checks.CheckMessage]:
    return checks.run_checks(tags=["django_strait"])


def ids(messages) -> list[str]:
    return sorted(m.id for m in messages)


def test_check__test_settings_pass():
    assert run() == []


@override_settings(
    STRAIT={
        "DEFAULT_RETRY": {"max_attempts": 5, "initial_delay": "2s", "strategy": "linear"},
        "ALLOWED_PRIVATE_NETWORKS": ["10.0.0.0/8"],
        "POLL_INTERVAL": "500ms",
        "STALE_AFTER": "PT10M",
        "LISTEN_DATABASE": "default",
        "HTTP_USER_AGENT": "acme/1",
    }
)
def test_check__a_full_valid_configuration_passes():
    assert run() == []


def test_check__is_registered_under_the_django_strait_tag():
    assert "django_strait" in checks.registry.registry.tags_available()
    assert check_settings in checks.registry.registry.get_checks()


@override_settings(STRAIT="POLL_INTERVAL=1")
def test_check__strait_not_a_dict_is_e001():
    (message,) = run()
    assert message.id == "django_strait.E001"
    assert message.msg.startswith("STRAIT: ")
    assert "dict" in message.msg


@override_settings(STRAIT={"POLL_INTERVALS": 1, "DEFUALT_RETRY": {}})
def test_check__unknown_keys_are_e002_listing_allowed_keys():
    messages = run()
    assert ids(messages) == ["django_strait.E002", "django_strait.E002"]
    assert {m.msg.split(":")[0] for m in messages} == {
        "STRAIT.POLL_INTERVALS",
        "STRAIT.DEFUALT_RETRY",
    }
    assert all("POLL_INTERVAL, " in m.msg and "DEFAULT_RETRY" in m.msg for m in messages)


@override_settings(
    STRAIT={
        "POLL_INTERVAL": "fast",
        "WORKER_CONCURRENCY": 0,
        "ALLOWED_PRIVATE_NETWORKS": ["10.0.0.0/8", "nope"],
        "DEFAULT_RETRY": {"jitter": 3, "backoff_coefficient": 0.5},
    }
)
def test_check__reports_every_bad_value_as_e003():
    messages = run()
    assert ids(messages) == ["django_strait.E003"] * 5
    fields = sorted(m.msg.split(":")[0] for m in messages)
    assert fields == [
        "STRAIT.ALLOWED_PRIVATE_NETWORKS[1]",
        "STRAIT.DEFAULT_RETRY.backoff_coefficient",
        "STRAIT.DEFAULT_RETRY.jitter",
        "STRAIT.POLL_INTERVAL",
        "STRAIT.WORKER_CONCURRENCY",
    ]
    poll = next(m for m in messages if m.msg.startswith("STRAIT.POLL_INTERVAL"))
    assert "500ms" in poll.msg  # says what is allowed


@override_settings(STRAIT={"DEFAULT_RETRY": {"strategy": "custom"}})
def test_check__reports_a_policy_that_only_fails_as_a_whole():
    (message,) = run()
    assert message.id == "django_strait.E003"
    assert message.msg.startswith("STRAIT.DEFAULT_RETRY.delays: ")


def test_check__bad_environment_values_are_e004(setenv):
    setenv("STRAIT_POLL_INTERVAL", "fast")
    setenv("STRAIT_DEFAULT_RETRY_MAX_ATTEMPTS", "lots")
    setenv("STRAIT_DEFAULT_RETRY", "{not json")
    messages = run()
    assert ids(messages) == ["django_strait.E004"] * 3
    assert sorted(m.msg.split(":")[0] for m in messages) == [
        "STRAIT_DEFAULT_RETRY",
        "STRAIT_DEFAULT_RETRY_MAX_ATTEMPTS",
        "STRAIT_POLL_INTERVAL",
    ]
    assert all("environment wins" in m.hint for m in messages)


def test_check__environment_fixes_a_bad_setting(setenv):
    with override_settings(STRAIT={"POLL_INTERVAL": "fast"}):
        setenv("STRAIT_POLL_INTERVAL", "2s")
        assert run() == []


def test_check__unknown_environment_variable_is_w001(setenv):
    setenv("STRAIT_POLL_INTREVAL", "2s")
    (message,) = run()
    assert message.id == "django_strait.W001"
    assert isinstance(message, checks.Warning)
    assert "STRAIT_POLL_INTREVAL" in message.msg


@override_settings(STRAIT={"WORKER_BATCH_SIZE": -1})
def test_check__manage_py_check_fails_on_errors():
    with pytest.raises(SystemCheckError, match="django_strait.E003"):
        call_command("check", "--tag", "django_strait")


@override_settings(STRAIT={"DEFAULT_RETRY": {"strategy": "function", "function": "os.system"}})
def test_check__a_default_retry_function_not_registered_is_e003():
    [message] = run()
    assert message.id == "django_strait.E003"
    assert "STRAIT.DEFAULT_RETRY.function" in message.msg
    assert "'os.system' is not a registered retry function" in message.msg


@contextlib.contextmanager
def another_database(**more):
    """A second DATABASES alias "jobs" for STRAIT["DATABASE"] (Django warns about the override)."""
    databases = {**settings.DATABASES, "jobs": {"ENGINE": "django.db.backends.sqlite3"}}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Overriding setting DATABASES")
        with override_settings(DATABASES=databases, STRAIT={"DATABASE": "jobs"}, **more):
            yield


def test_check__another_database_without_the_router_is_e005():
    with another_database():
        [message] = run()
    assert message.id == "django_strait.E005"
    assert "django_strait.database.StraitRouter" in message.hint


def test_check__another_database_with_the_router_passes():
    with another_database(DATABASE_ROUTERS=["django_strait.database.StraitRouter"]):
        assert run() == []


@override_settings(STRAIT={"OJS_REQUIRE_AUTH": False}, DEBUG=False)
def test_check__ojs_without_auth_and_without_debug_is_w002():
    (message,) = run()
    assert message.id == "django_strait.W002"
    assert isinstance(message, checks.Warning)
    assert "OJS_REQUIRE_AUTH" in message.msg


@pytest.mark.parametrize(
    ("strait", "debug"), [({"OJS_REQUIRE_AUTH": False}, True), ({"OJS_REQUIRE_AUTH": True}, False)]
)
def test_check__ojs_auth_on_or_debug_is_quiet(strait, debug):
    with override_settings(STRAIT=strait, DEBUG=debug):
        assert run() == []


def test_check__bad_ojs_content_type_is_e003():
    with override_settings(STRAIT={"OJS_CONTENT_TYPE": "text/plain"}):
        (message,) = run()
    assert message.id == "django_strait.E003"
    assert "application/openjobspec+json" in message.msg


def receipts(apps):
    """A project's models that point at runs and attempts, in an isolated app registry."""
    from django.db import models

    from django_strait.models import JobRun, RunAttempt

    class Receipt(models.Model):  # noqa: DJ008 (never shown)
        run = models.ForeignKey(JobRun, on_delete=models.CASCADE)
        attempt = models.OneToOneField(RunAttempt, on_delete=models.CASCADE)
        job_run = models.ForeignKey(JobRun, on_delete=models.CASCADE, db_constraint=False,
                                    related_name="+")  # fmt: skip

        class Meta:
            app_label = "demo"

    class Batch(models.Model):  # noqa: DJ008 (never shown)
        runs = models.ManyToManyField(JobRun, related_name="+")

        class Meta:
            app_label = "demo"

    return [apps.get_app_config("demo")]


def w003(app_configs, databases, **strait) -> list[str]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Overriding setting DATABASES")
        with override_settings(DATABASES={**settings.DATABASES, "default": databases},
                               STRAIT=strait):  # fmt: skip
            return [m.msg.split(" is ")[0] for m in check_foreign_keys_into_runs(app_configs)]


POSTGRES = {"ENGINE": "django.db.backends.postgresql", "NAME": "unused"}


def test_check__a_foreign_key_constraint_into_runs_on_postgresql_is_w003():
    with isolate_apps("example_project.demo") as apps:
        app_configs = receipts(apps)

        found = w003(app_configs, POSTGRES)
        on_sqlite = w003(app_configs, JOBS_DB)
        kept_plain = w003(app_configs, POSTGRES, PARTITION_RUNS=False)

    assert found == ["demo.Receipt.run", "demo.Receipt.attempt", "demo.Batch_runs.jobrun"]
    assert on_sqlite == kept_plain == []


def test_check__the_test_project_has_no_foreign_key_into_runs():
    assert foreign_keys_into_runs(django_apps.get_models(include_auto_created=True)) == []
