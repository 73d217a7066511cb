"""Strait's settings: one lazy, typed object over ``settings.STRAIT`` and ``STRAIT_*`` variables.

``from django_strait.conf import strait_settings`` and read attributes
(``strait_settings.POLL_INTERVAL``). Nothing is read at import time: each key is
parsed on first access, cached, and dropped again when Django's
``setting_changed`` fires for ``STRAIT`` or ``DATABASES`` (``override_settings``)
or when :meth:`StraitSettings.reload` is called.

Every key ``K`` can also come from the environment variable ``STRAIT_K`` (read
with django-environ). The environment wins over ``settings.STRAIT``: settings.py
is code shared by every deployment, the environment is what one deployment says.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import environ
from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from django_strait import __version__
from django_strait.rules import conf_placement
from django_strait.rules.conf_values import (  # the keys' checks and parsers
    OJS_CONTENT_TYPES,
    PREPARABLE,
    _alias,
    _alias_text,
    _alpha,
    _bind_address,
    _bool_text,
    _boolean,
    _duration,
    _float_text,
    _int_text,
    _integer,
    _list_text,
    _networks,
    _ojs_content_type,
    _policy_text,
    _presets,
    _presets_text,
    _rate,
    _rate_text,
    _read_database,
    _read_database_text,
    _secret,
    _statements,
    _statements_text,
    _storage,
    _storage_text,
    _text,
    _user_agent,
)
from django_strait.rules.presets import DEFAULT_PRESETS, Chain, parse_chain
from django_strait.rules.retry import (
    BUILTIN,
    FIELDS,
    PolicyError,
    RetryPolicy,
    check_registered,
    collect_errors,
    merge,
    validate_field,
    validate_partial,
)

ENV_PREFIX = "STRAIT_"
_env = environ.Env()

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class SettingError(PolicyError, ImproperlyConfigured):
    """A bad value in ``settings.STRAIT`` or a ``STRAIT_*`` environment variable."""

    @property
    def from_environment(self) -> bool:
        """Return whether the bad value came from an environment variable."""
        return self.field.startswith(ENV_PREFIX)

    @classmethod
    def of(cls, exc: PolicyError) -> SettingError:
        """Return ``exc`` as a SettingError (unchanged if it already is one)."""
        if isinstance(exc, SettingError):
            return exc
        return cls(exc.field, exc.value, exc.allowed, column=exc.column, problem=exc.problem)


class UnknownSettingError(SettingError):
    """A key in ``settings.STRAIT`` that Strait does not know."""


@dataclass(frozen=True, slots=True)
class Key:
    """One STRAIT key: its default, how a Python value is checked, how env text becomes one."""

    name: str
    default: Any
    check: Callable[[Any, str], Any]
    from_text: Callable[[str, str], Any]

    @property
    def env_var(self) -> str:
        return ENV_PREFIX + self.name


KEYS: dict[str, Key] = {
    key.name: key
    for key in (
        # DEFAULT_RETRY merges several layers field by field: see _policy_layers.
        Key("DEFAULT_RETRY", BUILTIN, lambda value, field: value, _policy_text),
        Key("RESULT_MAX_BYTES", 65536, _integer(1), _int_text),
        Key("ALLOWED_PRIVATE_NETWORKS", (), _networks, _list_text),
        Key("POLL_INTERVAL", 1.0, _duration(positive=True), _text),
        Key("WORKER_CONCURRENCY", 50, _integer(1), _int_text),
        Key("WORKER_BATCH_SIZE", 100, _integer(1), _int_text),
        Key("SHUTDOWN_TIMEOUT", 30.0, _duration(positive=False), _text),
        Key("STALE_AFTER", 300.0, _duration(positive=True), _text),
        Key("CIRCUIT_FAILURE_THRESHOLD", 5, _integer(1), _int_text),
        Key("CIRCUIT_COOLDOWN", 30.0, _duration(positive=False), _text),
        Key("HEALTH_EWMA_ALPHA", 0.1, _alpha, _float_text),
        # Wake-ups by LISTEN/NOTIFY (False: poll only), and on which connection.
        Key("LISTEN", True, _boolean, _bool_text),
        Key("LISTEN_DATABASE", None, _alias(optional=True), _alias_text),
        # Which of the worker's hot statements it prepares, on connections that reach
        # PostgreSQL directly (docs/settings.md, "Prepared statements").
        Key("PREPARE_STATEMENTS", PREPARABLE, _statements, _statements_text),
        # How long a worker's connection keeps its prepared statements (and their plans).
        Key("PLAN_LIFETIME", 10.0, _duration(positive=True), _text),
        Key("DATABASE", "default", _alias(optional=False), _alias_text),
        # A replica the admin's overview and charts and the metrics view read
        # (docs/operations.md, "Reads off the primary").
        Key("READ_DATABASE", None, _read_database, _read_database_text),
        # Several databases (docs/operations.md, "Beyond one PostgreSQL server"): the
        # aliases holding django-strait's tables, each queue's alias, and the alias of
        # the protection state shared by the fleet. None: STRAIT["DATABASE"] alone.
        Key("DATABASES", None, lambda v, f: _databases(v, f), _list_text),
        Key(
            "QUEUE_DATABASES",
            {},
            lambda v, f: _queue_databases(v, f),
            conf_placement.queue_databases_text,
        ),
        Key("CONTROL_DATABASE", None, lambda v, f: _control_database(v, f), _alias_text),
        # The storage backend: None chooses by the database's engine (docs/settings.md).
        Key("STORAGE", None, _storage, _storage_text),
        Key("HTTP_USER_AGENT", f"django-strait/{__version__}", _user_agent, _text),
        Key("TRIGGER_MAX_PAYLOAD_BYTES", 1_000_000, _integer(1), _int_text),
        # Worker operations: periodic duties, each on one host at a time.
        Key("WAITING_STALE_AFTER", 3600.0, _duration(positive=True), _text),
        Key("REAPER_INTERVAL", 30.0, _duration(positive=True), _text),
        Key("SCHEDULER_INTERVAL", 1.0, _duration(positive=True), _text),
        Key("PRUNE_INTERVAL", 3600.0, _duration(positive=True), _text),
        Key("PRUNE_BATCH_SIZE", 1000, _integer(1), _int_text),
        Key("RETENTION_DAYS", 30, _integer(1), _int_text),
        Key("STATS_INTERVAL", 60.0, _duration(positive=True), _text),
        # Rolling deploys: how long a run whose handler a worker does not know is left
        # for a worker that knows it before it fails as handler.unknown (0: at once).
        Key("UNKNOWN_HANDLER_GRACE", 300.0, _duration(positive=False), _text),
        # PostgreSQL under a held horizon: how often a worker claims from the front of
        # the claim index again, and the dead rows past which the leader vacuums runs.
        Key("CLAIM_RESCAN_INTERVAL", 5.0, _duration(positive=True), _text),
        Key("VACUUM_DEAD_ROWS", 10_000, _integer(0), _int_text),
        # Whether migration 0020 partitions the runs table by status class (PostgreSQL).
        Key("PARTITION_RUNS", True, _boolean, _bool_text),
        # Bearer token for the metrics view (staff users need none).
        Key("METRICS_TOKEN", None, _secret, _text),
        # Where a worker's --metrics-port server (metrics, /livez, /readyz) listens.
        Key("METRICS_BIND", "127.0.0.1", _bind_address, _text),
        # The REST API: throttles per client (None turns one off), bulk and body limits.
        Key("API_THROTTLE_RATE", "600/minute", _rate, _rate_text),
        Key("API_TRIGGER_THROTTLE_RATE", "120/minute", _rate, _rate_text),
        # Failed authentications per client address; over it, that address gets 429.
        Key("API_AUTH_FAILURE_THROTTLE_RATE", "30/minute", _rate, _rate_text),
        Key("API_BULK_TRIGGER_MAX", 1000, _integer(1), _int_text),
        Key("API_MAX_PAYLOAD_BYTES", 2_621_440, _integer(1), _int_text),
        # Completion webhooks: each delivery's deadline, and most in flight per worker.
        Key("WEBHOOK_TIMEOUT", 10.0, _duration(positive=True), _text),
        Key("WEBHOOK_CONCURRENCY", 50, _integer(1), _int_text),
        # Process execution (docs/process-execution.md): the memory preset chain, and runs per child.
        Key("PRESETS", parse_chain(DEFAULT_PRESETS), _presets, _presets_text),
        Key("PROCESS_MAX_RUNS", 1000, _integer(1), _int_text),
        # The OJS binding (docs/ojs.md): API keys required, the answers' content type, and
        # the conformance suite's meta.test_directive (off outside tests).
        Key("OJS_REQUIRE_AUTH", True, _boolean, _bool_text),
        Key("OJS_CONTENT_TYPE", OJS_CONTENT_TYPES[0], _ojs_content_type, _text),
        Key("OJS_TEST_DIRECTIVES", False, _boolean, _bool_text),
        # A fetched job's visibility timeout when neither the job nor the fetch names one.
        Key("OJS_VISIBILITY_TIMEOUT", 1800.0, _duration(positive=True), _text),
        # How long the fast door's fetch waits for work when there is none (0: not at all).
        Key("OJS_FETCH_WAIT", 0.0, _duration(positive=False), _text),
    )
}


def _explicit(name: str) -> bool:
    """Whether the key ``name`` is set (in the environment or ``settings.STRAIT``)."""
    return _env_text(KEYS[name].env_var) is not None or name in _strait_dict()


def _databases(value: Any, field: str) -> tuple[str, ...] | None:
    checked = conf_placement.databases(value, field)
    if checked is not None and _explicit("DATABASE"):
        database = _load(KEYS["DATABASE"])
        if checked[0] != database:
            allowed = (
                f"a list whose first alias is STRAIT['DATABASE'] ({database!r}), or no DATABASE"
            )
            problem = f"STRAIT['DATABASE'] is {database!r} but the first alias is {checked[0]!r}"
            raise PolicyError(field, value, allowed, problem=problem)
    return checked


def _strait_aliases() -> tuple[str, ...] | None:
    """``STRAIT["DATABASES"]`` as loaded (None when it or DATABASE is bad: reported there)."""
    try:
        return _load(KEYS["DATABASES"]) or (_load(KEYS["DATABASE"]),)
    except PolicyError:
        return None


def _queue_databases(value: Any, field: str) -> dict[str, str]:
    placed = conf_placement.queue_databases(value, field)
    aliases = _strait_aliases()
    for queue, where in placed.items():
        if aliases is not None:
            conf_placement.check_in_strait(where, f"{field}[{queue!r}]", aliases)
    return placed


def _control_database(value: Any, field: str) -> str | None:
    checked = conf_placement.control_database(value, field)
    aliases = _strait_aliases()
    if checked is not None and aliases is not None:
        conf_placement.check_in_strait(checked, field, aliases)
    return checked


#: How each DEFAULT_RETRY field is read from ``STRAIT_DEFAULT_RETRY_<FIELD>``.
_POLICY_FIELD_TEXT: dict[str, Callable[[str, str], Any]] = {
    "max_attempts": _int_text,
    "backoff_coefficient": _float_text,
    "jitter": _float_text,
    "delays": _list_text,
    "non_retryable_errors": _list_text,
}


def policy_field_env_var(field: str) -> str:
    """Return the environment variable for one DEFAULT_RETRY field."""
    return f"{ENV_PREFIX}DEFAULT_RETRY_{field.upper()}"


def known_env_vars() -> frozenset[str]:
    """Return every ``STRAIT_*`` environment variable Strait reads."""
    return frozenset(k.env_var for k in KEYS.values()) | {policy_field_env_var(f) for f in FIELDS}


def _env_text(name: str) -> str | None:
    # An empty variable counts as unset: compose files often declare names with no value.
    text = _env.str(name, default="")
    return text or None


def _strait_dict() -> Mapping[str, Any]:
    raw = getattr(django_settings, "STRAIT", None)
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise SettingError("STRAIT", raw, f"a dict whose keys are among {', '.join(KEYS)}")
    return raw


def _load(key: Key) -> Any:
    if key.name == "DEFAULT_RETRY":
        return _load_policy()
    text = _env_text(key.env_var)
    if text is not None:
        return key.check(key.from_text(text, key.env_var), key.env_var)
    strait = _strait_dict()
    if key.name in strait:
        return key.check(strait[key.name], f"STRAIT.{key.name}")
    return key.default


def _policy_layers() -> tuple[list[dict[str, Any]], list[PolicyError]]:
    """Return DEFAULT_RETRY's layers, lowest first, and every problem found in them."""
    layers: list[dict[str, Any]] = []
    errors: list[PolicyError] = []
    strait = _strait_dict()
    if strait.get("DEFAULT_RETRY") is not None:
        _add_layer(strait["DEFAULT_RETRY"], "STRAIT.DEFAULT_RETRY", layers, errors)
    text = _env_text(KEYS["DEFAULT_RETRY"].env_var)
    if text is not None:
        try:
            _add_layer(
                _policy_text(text, "STRAIT_DEFAULT_RETRY"), "STRAIT_DEFAULT_RETRY", layers, errors
            )
        except PolicyError as exc:
            errors.append(exc)
    layers.append(_policy_field_layer(errors))
    return layers, errors


def _add_layer(raw: Any, prefix: str, layers: list, errors: list) -> None:
    if isinstance(raw, RetryPolicy):
        raw = raw.as_dict()
    problems = collect_errors(raw, prefix=prefix)
    if problems:
        errors.extend(problems)
    else:
        layers.append(validate_partial(raw, prefix=prefix))


def _policy_field_layer(errors: list[PolicyError]) -> dict[str, Any]:
    layer: dict[str, Any] = {}
    for field in FIELDS:
        var = policy_field_env_var(field)
        text = _env_text(var)
        if text is None:
            continue
        try:
            value = _POLICY_FIELD_TEXT.get(field, _text)(text, var)
            layer[field] = validate_field(field, value, field=var)
        except PolicyError as exc:
            errors.append(exc)
    return layer


def _load_policy() -> RetryPolicy:
    layers, errors = _policy_layers()
    if errors:
        raise errors[0]
    return merge(BUILTIN, *layers, prefix="STRAIT.DEFAULT_RETRY")


def _policy_errors() -> list[PolicyError]:
    layers, errors = _policy_layers()
    if not errors:
        try:
            policy = merge(BUILTIN, *layers, prefix="STRAIT.DEFAULT_RETRY")
            # Checked here, not on load: a worker whose code lacks the function falls
            # back to the exponential formula rather than refusing every policy.
            check_registered({"function": policy.function}, prefix="STRAIT.DEFAULT_RETRY")
        except PolicyError as exc:
            errors.append(exc)
    return errors


class StraitSettings:
    """The ``STRAIT`` settings, parsed on first access and cached until reloaded."""

    DEFAULT_RETRY: RetryPolicy
    RESULT_MAX_BYTES: int
    ALLOWED_PRIVATE_NETWORKS: tuple[Network, ...]
    POLL_INTERVAL: float
    WORKER_CONCURRENCY: int
    WORKER_BATCH_SIZE: int
    SHUTDOWN_TIMEOUT: float
    STALE_AFTER: float
    CIRCUIT_FAILURE_THRESHOLD: int
    CIRCUIT_COOLDOWN: float
    HEALTH_EWMA_ALPHA: float
    LISTEN: bool
    LISTEN_DATABASE: str | None
    PREPARE_STATEMENTS: tuple[str, ...]
    PLAN_LIFETIME: float
    DATABASE: str
    DATABASES: tuple[str, ...] | None
    QUEUE_DATABASES: dict[str, str]
    CONTROL_DATABASE: str | None
    STORAGE: str | None
    HTTP_USER_AGENT: str
    TRIGGER_MAX_PAYLOAD_BYTES: int
    WAITING_STALE_AFTER: float
    REAPER_INTERVAL: float
    SCHEDULER_INTERVAL: float
    PRUNE_INTERVAL: float
    PRUNE_BATCH_SIZE: int
    RETENTION_DAYS: int
    STATS_INTERVAL: float
    UNKNOWN_HANDLER_GRACE: float
    CLAIM_RESCAN_INTERVAL: float
    VACUUM_DEAD_ROWS: int
    PARTITION_RUNS: bool
    METRICS_TOKEN: str | None
    METRICS_BIND: str
    API_THROTTLE_RATE: str | None
    API_TRIGGER_THROTTLE_RATE: str | None
    API_AUTH_FAILURE_THROTTLE_RATE: str | None
    API_BULK_TRIGGER_MAX: int
    API_MAX_PAYLOAD_BYTES: int
    WEBHOOK_TIMEOUT: float
    WEBHOOK_CONCURRENCY: int
    PRESETS: Chain
    PROCESS_MAX_RUNS: int
    OJS_REQUIRE_AUTH: bool
    OJS_CONTENT_TYPE: str
    OJS_TEST_DIRECTIVES: bool
    OJS_FETCH_WAIT: float
    OJS_VISIBILITY_TIMEOUT: float
    READ_DATABASE: dict[str, str] | None

    def __init__(self) -> None:
        self._cache: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        key = KEYS.get(name)
        if key is None or name.startswith("_"):
            raise AttributeError(f"STRAIT has no setting {name!r}; known: {', '.join(KEYS)}")
        cache = self.__dict__.setdefault("_cache", {})
        if name not in cache:
            try:
                cache[name] = _load(key)
            except PolicyError as exc:
                raise SettingError.of(exc) from None
        return cache[name]

    def derived(self, name: str, compute: Callable[[], Any]) -> Any:
        """A value computed from keys by ``compute()`` (``database``'s placement), cached
        with them: one dict lookup per read, dropped when they are reloaded."""
        cache = self.__dict__.setdefault("_cache", {})
        key = ("derived", name)
        try:
            return cache[key]
        except KeyError:
            cache[key] = value = compute()
            return value

    def field(self, name: str) -> str:
        """The name of the setting ``name``'s value came from: its variable, else ``STRAIT.<name>``."""
        key = KEYS[name]
        return key.env_var if _env_text(key.env_var) is not None else f"STRAIT.{name}"

    def reload(self) -> None:
        """Forget every parsed value; the next access reads settings and the environment again."""
        self.__dict__.setdefault("_cache", {}).clear()

    def errors(self) -> list[SettingError]:
        """Return every bad value across ``settings.STRAIT`` and the environment."""
        try:
            strait = _strait_dict()
        except PolicyError as exc:
            return [SettingError.of(exc)]
        found: list[PolicyError] = [
            UnknownSettingError(
                f"STRAIT.{name}", name, f"one of {', '.join(KEYS)}", problem=f"unknown key {name!r}"
            )
            for name in strait
            if name not in KEYS
        ]
        found.extend(_policy_errors())
        for key in KEYS.values():
            if key.name == "DEFAULT_RETRY":
                continue
            try:
                _load(key)
            except PolicyError as exc:
                found.append(exc)
        return [SettingError.of(exc) for exc in found]

    def unknown_env_vars(self) -> list[str]:
        """Return ``STRAIT_*`` environment variables that Strait does not read (likely typos)."""
        known = known_env_vars()
        return sorted(n for n in os.environ if n.startswith(ENV_PREFIX) and n not in known)


strait_settings = StraitSettings()


@receiver(setting_changed)
def _reload_on_change(*, setting: str, **kwargs: Any) -> None:
    # DATABASES too: LISTEN_DATABASE and DATABASE are checked against it.
    if setting in ("STRAIT", "DATABASES"):
        strait_settings.reload()
