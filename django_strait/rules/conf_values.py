"""The checks and parsers of Strait's settings (``conf.KEYS``): each names the field it rejects.

A check takes ``(value, field)`` from ``settings.STRAIT`` and returns the typed
value; a parser takes ``(text, field)`` from a ``STRAIT_*`` environment variable.
Either raises ``PolicyError`` naming the field, which ``conf`` turns into a
``SettingError``.
"""

from __future__ import annotations

import ipaddress
import json
import math
from collections.abc import Callable
from typing import Any

import environ
from django.conf import settings as django_settings
from django.utils.module_loading import import_string

from django_strait.rules.presets import Chain, parse_chain
from django_strait.rules.retry import PolicyError, parse_duration

_env = environ.Env()

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


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


def _read_database(value: Any, field: str) -> dict[str, str]:
    """None, a read alias (for ``STRAIT["DATABASE"]``), or {jobs' alias: read alias}.

    Returned as a mapping; a string is keyed ``""``, the jobs' alias whatever its name.
    """
    if value is None:
        return {}
    aliases = list(getattr(django_settings, "DATABASES", {}))
    allowed = f"the alias of an entry in DATABASES ({', '.join(aliases) or 'none defined'})"
    if isinstance(value, str):
        if value not in aliases:
            raise PolicyError(field, value, allowed + ", a mapping of such aliases, or None")
        return {"": value}
    if not isinstance(value, dict):
        raise PolicyError(field, value, allowed + ", a mapping of such aliases, or None")
    for source, read in value.items():
        if source not in aliases:
            raise PolicyError(f"{field} (key {source!r})", source, allowed)
        if read not in aliases:
            raise PolicyError(f"{field}[{source!r}]", read, allowed)
    return dict(value)


def _read_database_text(text: str, field: str) -> Any:
    text = text.strip()
    if not text.startswith("{"):
        return text or None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        allowed = 'an alias, or a JSON object of alias -> read alias, e.g. {"default": "replica"}'
        raise PolicyError(field, text, allowed, problem=f"invalid JSON ({exc})") from None


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
