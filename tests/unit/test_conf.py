"""strait_settings: defaults, settings.STRAIT, the environment winning, laziness, reloads."""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.test import override_settings

from django_strait import __version__
from django_strait.conf import KEYS, SettingError, known_env_vars, strait_settings
from django_strait.rules.presets import DEFAULT_PRESETS, parse_chain
from django_strait.rules.retry import BUILTIN, PolicyError, RetryPolicy, merge

ROOT = Path(__file__).resolve().parents[2]


# Settings are read from a clean environment (tests/unit/conftest.py).
pytestmark = pytest.mark.usefixtures("clean_strait_env")


DEFAULTS = {
    "DEFAULT_RETRY": BUILTIN,
    "RESULT_MAX_BYTES": 65536,
    "ALLOWED_PRIVATE_NETWORKS": (),
    "POLL_INTERVAL": 1.0,
    "WORKER_CONCURRENCY": 50,
    "WORKER_BATCH_SIZE": 100,
    "SHUTDOWN_TIMEOUT": 30.0,
    "STALE_AFTER": 300.0,
    "CIRCUIT_FAILURE_THRESHOLD": 5,
    "CIRCUIT_COOLDOWN": 30.0,
    "HEALTH_EWMA_ALPHA": 0.1,
    "LISTEN": True,
    "LISTEN_DATABASE": None,
    "READ_DATABASE": None,
    "PREPARE_STATEMENTS": ("claim", "start", "record"),
    "PLAN_LIFETIME": 10.0,
    "DATABASE": "default",
    "DATABASES": None,
    "QUEUE_DATABASES": {},
    "CONTROL_DATABASE": None,
    "STORAGE": None,
    "HTTP_USER_AGENT": f"django-strait/{__version__}",
    "TRIGGER_MAX_PAYLOAD_BYTES": 1_000_000,
    "WAITING_STALE_AFTER": 3600.0,
    "REAPER_INTERVAL": 30.0,
    "SCHEDULER_INTERVAL": 1.0,
    "PRUNE_INTERVAL": 3600.0,
    "PRUNE_BATCH_SIZE": 1000,
    "RETENTION_DAYS": 30,
    "STATS_INTERVAL": 60.0,
    "UNKNOWN_HANDLER_GRACE": 300.0,
    "METRICS_BIND": "127.0.0.1",
    "METRICS_TOKEN": None,
    "API_THROTTLE_RATE": "600/minute",
    "API_TRIGGER_THROTTLE_RATE": "120/minute",
    "API_AUTH_FAILURE_THROTTLE_RATE": "30/minute",
    "API_BULK_TRIGGER_MAX": 1000,
    "API_MAX_PAYLOAD_BYTES": 2_621_440,
    "WEBHOOK_TIMEOUT": 10.0,
    "WEBHOOK_CONCURRENCY": 50,
    "PRESETS": parse_chain(DEFAULT_PRESETS),
    "PROCESS_MAX_RUNS": 1000,
    "CLAIM_RESCAN_INTERVAL": 5.0,
    "VACUUM_DEAD_ROWS": 10_000,
    "PARTITION_RUNS": True,
    "OJS_REQUIRE_AUTH": True,
    "OJS_CONTENT_TYPE": "application/openjobspec+json",
    "OJS_TEST_DIRECTIVES": False,
    "OJS_VISIBILITY_TIMEOUT": 1800.0,
    "OJS_FETCH_WAIT": 0.0,
}


@override_settings(STRAIT={})
@pytest.mark.parametrize(("name", "expected"), DEFAULTS.items())
def test_strait_settings__defaults(name, expected):
    assert getattr(strait_settings, name) == expected


def test_keys__are_the_documented_ones():
    assert set(KEYS) == set(DEFAULTS)


def test_strait_settings__missing_strait_setting_means_defaults(settings):
    del settings.STRAIT
    assert strait_settings.WORKER_CONCURRENCY == 50


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("RESULT_MAX_BYTES", 1024, 1024),
        ("ALLOWED_PRIVATE_NETWORKS", ["10.0.0.0/8", "fd00::/8", "192.168.1.5"], None),
        ("POLL_INTERVAL", "250ms", 0.25),
        ("POLL_INTERVAL", dt.timedelta(seconds=2), 2.0),
        ("WORKER_CONCURRENCY", 8, 8),
        ("WORKER_BATCH_SIZE", 10, 10),
        ("SHUTDOWN_TIMEOUT", "PT1M", 60.0),
        ("SHUTDOWN_TIMEOUT", 0, 0.0),
        ("STALE_AFTER", "10m", 600.0),
        ("CIRCUIT_FAILURE_THRESHOLD", 3, 3),
        ("CIRCUIT_COOLDOWN", "1m", 60.0),
        ("HEALTH_EWMA_ALPHA", 1, 1.0),
        ("LISTEN_DATABASE", "default", "default"),
        ("LISTEN_DATABASE", None, None),
        ("READ_DATABASE", None, {}),
        ("READ_DATABASE", "reader", {"": "reader"}),
        ("READ_DATABASE", {"default": "reader"}, {"default": "reader"}),
        ("LISTEN", False, False),
        ("PREPARE_STATEMENTS", False, ()),
        ("PREPARE_STATEMENTS", True, ("claim", "start", "record")),
        ("PREPARE_STATEMENTS", ["record", "claim"], ("claim", "record")),
        ("PREPARE_STATEMENTS", (), ()),
        ("PLAN_LIFETIME", "250ms", 0.25),
        ("HTTP_USER_AGENT", "acme-jobs/2", "acme-jobs/2"),
        ("TRIGGER_MAX_PAYLOAD_BYTES", 10, 10),
        ("API_THROTTLE_RATE", "5/second", "5/second"),
        ("API_THROTTLE_RATE", None, None),
        ("API_TRIGGER_THROTTLE_RATE", " 10/hour ", "10/hour"),
        ("API_BULK_TRIGGER_MAX", 50, 50),
        ("API_MAX_PAYLOAD_BYTES", 1024, 1024),
    ],
)
def test_strait_settings__reads_settings_dict(name, value, expected):
    with override_settings(STRAIT={name: value}):
        got = getattr(strait_settings, name)
    if name == "ALLOWED_PRIVATE_NETWORKS":
        expected = tuple(ipaddress.ip_network(v) for v in value)
    assert got == expected


def test_strait_settings__default_retry_from_settings_merges_over_builtin():
    with override_settings(STRAIT={"DEFAULT_RETRY": {"max_attempts": 5, "initial_delay": "2s"}}):
        assert strait_settings.DEFAULT_RETRY == merge(
            BUILTIN, {"max_attempts": 5, "initial_delay": 2}
        )


def test_strait_settings__default_retry_accepts_a_policy_object():
    policy = merge(BUILTIN, {"strategy": "linear"})
    with override_settings(STRAIT={"DEFAULT_RETRY": policy}):
        assert strait_settings.DEFAULT_RETRY == policy


@pytest.mark.parametrize(
    ("name", "value", "fragment"),
    [
        ("RESULT_MAX_BYTES", 0, "integer >= 1"),
        ("RESULT_MAX_BYTES", "64k", "integer >= 1"),
        ("WORKER_CONCURRENCY", True, "integer >= 1"),
        ("ALLOWED_PRIVATE_NETWORKS", "10.0.0.0/8", "a list of networks"),
        ("ALLOWED_PRIVATE_NETWORKS", ["10.0.0.1/8"], "host bits set"),
        ("ALLOWED_PRIVATE_NETWORKS", ["intranet"], "not a network"),
        ("POLL_INTERVAL", 0, "> 0"),
        ("POLL_INTERVAL", "fast", "500ms"),
        ("STALE_AFTER", "-5m", "negative"),
        ("SHUTDOWN_TIMEOUT", "forever", "PT5M"),
        ("HEALTH_EWMA_ALPHA", 0, "greater than 0"),
        ("HEALTH_EWMA_ALPHA", 1.5, "at most 1"),
        ("LISTEN_DATABASE", "replica", "DATABASES (default, jobs2, reader)"),
        ("READ_DATABASE", "replica", "DATABASES (default, jobs2, reader), a mapping"),
        ("READ_DATABASE", ["reader"], "a mapping of such aliases, or None"),
        ("READ_DATABASE", {"jobs": "reader"}, "STRAIT.READ_DATABASE (key 'jobs')"),
        ("READ_DATABASE", {"default": "replica"}, "STRAIT.READ_DATABASE['default']"),
        ("LISTEN", "no", "True or False"),
        ("LISTEN", 0, "True or False"),
        ("PREPARE_STATEMENTS", None, "True, False or a list of statement names"),
        ("PREPARE_STATEMENTS", "start", "out of claim, start, record"),
        ("PREPARE_STATEMENTS", ["start", "hold"], "'claim' or 'start' or 'record'"),
        ("PLAN_LIFETIME", 0, "> 0"),
        ("DATABASE", None, "DATABASES"),
        ("HTTP_USER_AGENT", "a\r\nX-Evil: 1", "one line"),
        ("HTTP_USER_AGENT", "", "non-empty"),
        ("DEFAULT_RETRY", {"jitter": 2}, "from 0 to 1"),
        ("DEFAULT_RETRY", {"strategy": "custom"}, "non-empty list"),
        ("DEFAULT_RETRY", ["max_attempts"], "object"),
        ("API_THROTTLE_RATE", "600/min", "'600/minute'"),
        ("API_THROTTLE_RATE", "0/minute", "'600/minute'"),
        ("API_TRIGGER_THROTTLE_RATE", 60, "'600/minute'"),
        ("API_BULK_TRIGGER_MAX", 0, "integer >= 1"),
        ("CLAIM_RESCAN_INTERVAL", 0, "> 0"),
        ("VACUUM_DEAD_ROWS", -1, "integer >= 0"),
    ],
)
def test_strait_settings__bad_settings_value_names_the_key(name, value, fragment):
    with override_settings(STRAIT={name: value}):
        with pytest.raises(SettingError) as caught:
            getattr(strait_settings, name)
    err = caught.value
    assert err.field.startswith(f"STRAIT.{name}")
    assert fragment in str(err)
    assert isinstance(err, ImproperlyConfigured)
    assert isinstance(err, PolicyError)
    assert not err.from_environment


def test_strait_settings__a_bad_key_does_not_break_the_others():
    with override_settings(STRAIT={"POLL_INTERVAL": "fast", "WORKER_CONCURRENCY": 4}):
        assert strait_settings.WORKER_CONCURRENCY == 4


def test_strait_settings__strait_must_be_a_dict():
    with override_settings(STRAIT=["POLL_INTERVAL"]):
        with pytest.raises(SettingError, match="^STRAIT: .*must be a dict"):
            strait_settings.POLL_INTERVAL  # noqa: B018


def test_strait_settings__unknown_attribute_lists_known_keys():
    with pytest.raises(AttributeError, match="POLL_INTERVAL"):
        strait_settings.POLL_INTERVALS  # noqa: B018


# --- the environment ----------------------------------------------------------


@pytest.mark.parametrize(
    ("var", "text", "name", "expected"),
    [
        ("STRAIT_RESULT_MAX_BYTES", "2048", "RESULT_MAX_BYTES", 2048),
        ("STRAIT_POLL_INTERVAL", "500ms", "POLL_INTERVAL", 0.5),
        ("STRAIT_POLL_INTERVAL", "2.5", "POLL_INTERVAL", 2.5),
        ("STRAIT_SHUTDOWN_TIMEOUT", "PT2M", "SHUTDOWN_TIMEOUT", 120.0),
        ("STRAIT_WORKER_CONCURRENCY", " 12 ", "WORKER_CONCURRENCY", 12),
        ("STRAIT_HEALTH_EWMA_ALPHA", "0.5", "HEALTH_EWMA_ALPHA", 0.5),
        ("STRAIT_LISTEN_DATABASE", "default", "LISTEN_DATABASE", "default"),
        ("STRAIT_READ_DATABASE", "reader", "READ_DATABASE", {"": "reader"}),
        ("STRAIT_READ_DATABASE", '{"default": "reader"}', "READ_DATABASE", {"default": "reader"}),
        ("STRAIT_LISTEN", "false", "LISTEN", False),
        ("STRAIT_LISTEN", " Off ", "LISTEN", False),
        ("STRAIT_PREPARE_STATEMENTS", "0", "PREPARE_STATEMENTS", ()),
        ("STRAIT_PREPARE_STATEMENTS", "yes", "PREPARE_STATEMENTS", ("claim", "start", "record")),
        ("STRAIT_PREPARE_STATEMENTS", "record, start", "PREPARE_STATEMENTS", ("start", "record")),
        ("STRAIT_HTTP_USER_AGENT", "ops/1", "HTTP_USER_AGENT", "ops/1"),
        (
            "STRAIT_ALLOWED_PRIVATE_NETWORKS",
            "10.0.0.0/8, fd00::/8",
            "ALLOWED_PRIVATE_NETWORKS",
            (ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("fd00::/8")),
        ),
        (
            "STRAIT_ALLOWED_PRIVATE_NETWORKS",
            '["172.16.0.0/12"]',
            "ALLOWED_PRIVATE_NETWORKS",
            (ipaddress.ip_network("172.16.0.0/12"),),
        ),
    ],
)
def test_strait_settings__environment_wins_over_settings(setenv, var, text, name, expected):
    with override_settings(STRAIT={"POLL_INTERVAL": 9, "WORKER_CONCURRENCY": 9}):
        setenv(var, text)
        assert getattr(strait_settings, name) == expected


def test_strait_settings__empty_environment_variable_counts_as_unset(setenv):
    with override_settings(STRAIT={"POLL_INTERVAL": 9}):
        setenv("STRAIT_POLL_INTERVAL", "")
        assert strait_settings.POLL_INTERVAL == 9.0


@pytest.mark.parametrize(
    ("var", "text", "fragment"),
    [
        ("STRAIT_WORKER_CONCURRENCY", "many", "an integer"),
        ("STRAIT_WORKER_CONCURRENCY", "0", "integer >= 1"),
        ("STRAIT_POLL_INTERVAL", "soon", "500ms"),
        ("STRAIT_LISTEN", "never", "one of true, 1, yes, on or false"),
        ("STRAIT_HEALTH_EWMA_ALPHA", "half", "a number"),
        ("STRAIT_ALLOWED_PRIVATE_NETWORKS", "10.0.0.0/33", "not a network"),
        ("STRAIT_ALLOWED_PRIVATE_NETWORKS", "[10.0.0.0/8", "JSON list"),
        ("STRAIT_DEFAULT_RETRY", "{max_attempts: 5}", "invalid JSON"),
        ("STRAIT_DEFAULT_RETRY", '{"max_attempts": 0}', "integer from 1"),
        ("STRAIT_DEFAULT_RETRY_JITTER", "lots", "a number"),
        ("STRAIT_DEFAULT_RETRY_JITTER", "5", "from 0 to 1"),
        ("STRAIT_DEFAULT_RETRY_STRATEGY", "random", "one of"),
    ],
)
def test_strait_settings__bad_environment_value_names_the_variable(setenv, var, text, fragment):
    name = next(k for k in sorted(KEYS, key=len, reverse=True) if var.startswith(f"STRAIT_{k}"))
    setenv(var, text)
    with pytest.raises(SettingError) as caught:
        getattr(strait_settings, name)
    assert caught.value.field.startswith(var)
    assert caught.value.from_environment
    assert fragment in str(caught.value)


def test_default_retry__layers_settings_env_json_then_env_fields(setenv):
    strait = {"DEFAULT_RETRY": {"max_attempts": 2, "jitter": 0.1, "strategy": "linear"}}
    with override_settings(STRAIT=strait):
        setenv("STRAIT_DEFAULT_RETRY", '{"max_attempts": 4, "initial_delay": "3s"}')
        setenv("STRAIT_DEFAULT_RETRY_MAX_ATTEMPTS", "5")
        setenv("STRAIT_DEFAULT_RETRY_NON_RETRYABLE_ERRORS", "auth.*, http.404")
        setenv("STRAIT_DEFAULT_RETRY_DELAYS", "1s,PT1M")
        setenv("STRAIT_DEFAULT_RETRY_MIN_DELAY", "500ms")
        got = strait_settings.DEFAULT_RETRY
    assert got == RetryPolicy(
        max_attempts=5,
        strategy="linear",
        initial_delay=3.0,
        jitter=0.1,
        min_delay=0.5,
        delays=(1.0, 60.0),
        non_retryable_errors=("auth.*", "http.404"),
    )


def test_default_retry__env_fields_complete_a_custom_strategy(setenv):
    with override_settings(STRAIT={"DEFAULT_RETRY": {"strategy": "custom", "delays": [1]}}):
        setenv("STRAIT_DEFAULT_RETRY_DELAYS", '["5s", 10]')
        assert strait_settings.DEFAULT_RETRY.delays == (5.0, 10.0)


def test_known_env_vars__covers_every_key_and_policy_field():
    names = known_env_vars()
    assert "STRAIT_POLL_INTERVAL" in names
    assert "STRAIT_DEFAULT_RETRY" in names
    assert "STRAIT_DEFAULT_RETRY_MAX_ATTEMPTS" in names
    assert "STRAIT_DEFAULT_RETRY_JITTER_WINDOW" in names


# --- laziness and reloads ---------------------------------------------------------


def test_strait_settings__caches_until_reload(monkeypatch):
    assert strait_settings.WORKER_BATCH_SIZE == 100
    monkeypatch.setenv("STRAIT_WORKER_BATCH_SIZE", "7")
    assert strait_settings.WORKER_BATCH_SIZE == 100  # cached
    strait_settings.reload()
    assert strait_settings.WORKER_BATCH_SIZE == 7


def test_strait_settings__override_settings_resets_the_cache():
    assert strait_settings.WORKER_BATCH_SIZE == 100
    with override_settings(STRAIT={"WORKER_BATCH_SIZE": 3}):
        assert strait_settings.WORKER_BATCH_SIZE == 3
    assert strait_settings.WORKER_BATCH_SIZE == 100


def test_strait_settings__a_databases_change_resets_the_cache(monkeypatch):
    # LISTEN_DATABASE and DATABASE are checked against DATABASES, so a change there counts.
    assert strait_settings.WORKER_BATCH_SIZE == 100
    monkeypatch.setenv("STRAIT_WORKER_BATCH_SIZE", "7")
    setting_changed.send(
        sender=None, setting="DATABASES", value=django_settings.DATABASES, enter=False
    )
    assert strait_settings.WORKER_BATCH_SIZE == 7


def test_strait_settings__other_setting_changes_keep_the_cache(monkeypatch):
    assert strait_settings.WORKER_BATCH_SIZE == 100
    monkeypatch.setenv("STRAIT_WORKER_BATCH_SIZE", "7")
    with override_settings(TIME_ZONE="Europe/Paris"):
        assert strait_settings.WORKER_BATCH_SIZE == 100


@pytest.mark.parametrize("module", ["django_strait.conf", "django_strait.checks"])
def test_import__reads_no_settings(module):
    # Without DJANGO_SETTINGS_MODULE any settings access raises ImproperlyConfigured.
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    done = subprocess.run(
        [sys.executable, "-c", f"import {module}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
