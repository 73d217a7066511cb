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
import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import environ
from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import import_string

from django_strait import __version__
from django_strait.presets import DEFAULT_PRESETS, Chain, parse_chain
from django_strait.retry import (
    BUILTIN,
    FIELDS,
    PolicyError,
    RetryPolicy,
    check_registered,
    collect_errors,
    merge,
    parse_duration,
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


# Checks: (value, field) -> the typed value, or PolicyError naming the field.


def _integer(minimum: int) -> Callable[[Any, str], int]:
    def check(value: Any, field: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise PolicyError(field, value, f"an integer >= {minimum}")
        return int(value)

    return check


_POSITIVE = "a duration > 0 (e.g. 1s, 500ms, PT5M)"


def _duration(*, positive: bool) -> Callable[[Any, str], float]:
    def check(value: Any, field: str) -> float:
        try:
            seconds = parse_duration(value, field=field)
        except PolicyError as exc:
            if not positive:
                raise
            # Say what this key allows (> 0), not what durations in general allow (>= 0).
            allowed = exc.allowed.replace(">= 0", "> 0", 1)
            raise PolicyError(field, value, allowed, problem=exc.problem) from None
        if positive and seconds <= 0:
            raise PolicyError(field, value, _POSITIVE)
        return seconds

    return check


def _alpha(value: Any, field: str) -> float:
    allowed = "a number greater than 0 and at most 1 (the weight of the newest sample)"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PolicyError(field, value, allowed)
    if not (math.isfinite(value) and 0 < value <= 1):
        raise PolicyError(field, value, allowed)
    return float(value)


def _networks(value: Any, field: str) -> tuple[Network, ...]:
    if isinstance(value, str | bytes) or not isinstance(value, list | tuple):
        raise PolicyError(field, value, "a list of networks in CIDR form, e.g. ['10.0.0.0/8']")
    return tuple(_network(item, f"{field}[{i}]") for i, item in enumerate(value))


def _network(item: Any, field: str) -> Network:
    if isinstance(item, ipaddress.IPv4Network | ipaddress.IPv6Network):
        return item
    allowed = "a network in CIDR form (10.0.0.0/8, fd00::/8) or a single address"
    if not isinstance(item, str):
        raise PolicyError(field, item, allowed)
    try:
        return ipaddress.ip_network(item.strip())
    except ValueError as exc:
        # e.g. "10.0.0.1/8 has host bits set": say which part is wrong.
        raise PolicyError(
            field, item, allowed, problem=f"{item!r} is not a network ({exc})"
        ) from None


def _alias(*, optional: bool) -> Callable[[Any, str], str | None]:
    def check(value: Any, field: str) -> str | None:
        if value is None and optional:
            return None
        aliases = list(getattr(django_settings, "DATABASES", {}))
        if not isinstance(value, str) or value not in aliases:
            allowed = f"the alias of an entry in DATABASES ({', '.join(aliases) or 'none defined'})"
            raise PolicyError(field, value, allowed + (", or None" if optional else ""))
        return value

    return check


#: The worker's statements that PREPARE_STATEMENTS may name.
PREPARABLE = ("claim", "start", "record")


def _statements(value: Any, field: str) -> tuple[str, ...]:
    """True (all of PREPARABLE), False (none), or a list of their names."""
    if isinstance(value, bool):
        return PREPARABLE if value else ()
    allowed = f"True, False or a list of statement names out of {', '.join(PREPARABLE)}"
    if isinstance(value, str | bytes) or not isinstance(value, list | tuple):
        raise PolicyError(field, value, allowed)
    for i, name in enumerate(value):
        if name not in PREPARABLE:
            raise PolicyError(f"{field}[{i}]", name, " or ".join(repr(n) for n in PREPARABLE))
    return tuple(n for n in PREPARABLE if n in value)


def _statements_text(text: str, field: str) -> Any:
    """``true``/``false`` as for a boolean, else names: ``start,record`` or ``["start"]``."""
    if text.strip().lower() in _TRUE_TEXT + _FALSE_TEXT:
        return _bool_text(text, field)
    return _list_text(text, field)


def _user_agent(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value.strip() or any(c in value for c in "\r\n\0"):
        raise PolicyError(field, value, "a non-empty string on one line")
    return value


def _bind_address(value: Any, field: str) -> str:
    """An address a worker's metrics server listens on: an IPv4 or IPv6 address."""
    try:
        return str(ipaddress.ip_address(value.strip() if isinstance(value, str) else value))
    except ValueError:
        allowed = "an IP address to listen on, e.g. 127.0.0.1 (this host only), 0.0.0.0 or ::"
        raise PolicyError(field, value, allowed) from None


def _boolean(value: Any, field: str) -> bool:
    if not isinstance(value, bool):
        raise PolicyError(field, value, "True or False")
    return value


#: The content types the OJS binding may answer with (docs/ojs.md).
OJS_CONTENT_TYPES = ("application/openjobspec+json", "application/json")


def _ojs_content_type(value: Any, field: str) -> str:
    if value not in OJS_CONTENT_TYPES:
        raise PolicyError(field, value, " or ".join(repr(t) for t in OJS_CONTENT_TYPES))
    return value


#: The backends ``STRAIT["STORAGE"]`` may name without a dotted path (``storage.BACKENDS``).
STORAGE_NAMES = ("orm", "postgresql")

STORAGE_ALLOWED = (
    "None (chosen by the database's engine), 'orm', 'postgresql', or the dotted path of "
    "an importable class that satisfies the Storage Protocol (django_strait.storage.base)"
)


def _storage(value: Any, field: str) -> str | None:
    """None, a short name, or the dotted path of a class that imports.

    Whether the class has every verb of the Protocol is the storage layer's to say
    (``storage.backend_class``, and the system check E006): this layer is below it.
    """
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise PolicyError(field, value, STORAGE_ALLOWED)
    name = value.strip()
    if name in STORAGE_NAMES:
        return name
    if "." not in name:
        problem = f"{name!r} is neither {' nor '.join(map(repr, STORAGE_NAMES))} nor a dotted path"
        raise PolicyError(field, value, STORAGE_ALLOWED, problem=problem)
    try:
        found = import_string(name)
    except Exception as exc:  # noqa: BLE001 (any failure to import is this setting's to name)
        problem = f"{name!r} cannot be imported ({type(exc).__name__}: {exc})"
        raise PolicyError(field, value, STORAGE_ALLOWED, problem=problem) from None
    if not isinstance(found, type):
        problem = f"{name!r} is a {type(found).__name__}, not a class"
        raise PolicyError(field, value, STORAGE_ALLOWED, problem=problem)
    return name


# Environment text -> a Python value for the key's check.


def _text(text: str, field: str) -> str:
    return text


def _int_text(text: str, field: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise PolicyError(field, text, "an integer, e.g. 50") from None


def _float_text(text: str, field: str) -> float:
    try:
        return float(text.strip())
    except ValueError:
        raise PolicyError(field, text, "a number, e.g. 0.1") from None


_TRUE_TEXT = ("true", "1", "yes", "on")
_FALSE_TEXT = ("false", "0", "no", "off")


def _bool_text(text: str, field: str) -> bool:
    word = text.strip().lower()
    if word not in _TRUE_TEXT + _FALSE_TEXT:
        allowed = f"one of {', '.join(_TRUE_TEXT)} or {', '.join(_FALSE_TEXT)}"
        raise PolicyError(field, text, allowed)
    return word in _TRUE_TEXT


def _list_text(text: str, field: str) -> list[Any]:
    """Read a JSON list (``["a", "b"]``) or comma-separated values (``a, b``)."""
    if text.lstrip().startswith("["):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PolicyError(
                field, text, f"a JSON list or comma-separated values ({exc})"
            ) from None
        return value
    return [item.strip() for item in text.split(",") if item.strip()]


def _secret(value: Any, field: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) < 16 or value != value.strip():
        raise PolicyError(field, "<hidden>", "a string of at least 16 characters, or None")
    return value


_RATE_PERIODS = ("second", "minute", "hour", "day")


def _rate(value: Any, field: str) -> str | None:
    """Check a DRF throttle rate: ``"<requests>/<second|minute|hour|day>"``, or None (off)."""
    if value is None:
        return None
    allowed = "a rate like '600/minute' (requests per second, minute, hour or day), or None"
    if not isinstance(value, str):
        raise PolicyError(field, value, allowed)
    count, _, period = value.strip().partition("/")
    if not count.isdigit() or int(count) < 1 or period not in _RATE_PERIODS:
        raise PolicyError(field, value, allowed)
    return f"{int(count)}/{period}"


def _rate_text(text: str, field: str) -> str | None:
    return None if text.strip().lower() == "none" else text


def _storage_text(text: str, field: str) -> str | None:
    """``none`` (by the database's engine), else the name or dotted path as written."""
    return None if text.strip().lower() == "none" else text


def _alias_text(text: str, field: str) -> str:
    return text.strip()


def _policy_text(text: str, field: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        allowed = 'a JSON object of policy fields, e.g. {"max_attempts": 5, "initial_delay": "2s"}'
        raise PolicyError(field, text, allowed, problem=f"invalid JSON ({exc})") from None


def _presets(value: Any, field: str) -> Chain:
    return value if isinstance(value, Chain) else parse_chain(value, field)


def _presets_text(text: str, field: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        allowed = 'a JSON object of preset name -> memory, e.g. {"micro": "256MB", "small": "1GB"}'
        raise PolicyError(field, text, allowed, problem=f"invalid JSON ({exc})") from None


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
        Key("OJS_VISIBILITY_TIMEOUT", 30.0, _duration(positive=True), _text),
    )
}

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
    OJS_VISIBILITY_TIMEOUT: float

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
