"""The checks of the placement settings: ``DATABASES``, ``QUEUE_DATABASES``, ``CONTROL_DATABASE``.

Each takes ``(value, field)`` like the checks of ``conf_values`` and raises
``PolicyError`` naming the field, the value and what is allowed. The keys that
name an alias of ``STRAIT["DATABASES"]`` are checked against it by ``conf``
(:func:`check_in_strait`), once that key is known good.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from django.conf import settings as django_settings

from django_strait.rules.retry import PolicyError

#: At most this many aliases: the alias at index k of ``STRAIT["DATABASES"]`` numbers its
#: rows from k * 2**48 + 1 (``database.ID_BITS``), so every id stays below 2**53, a
#: number JavaScript and JSON readers hold exactly.
MAX_ALIASES = 32


def _django_aliases() -> list[str]:
    return list(getattr(django_settings, "DATABASES", {}))


def _in_databases(value: Any, field: str) -> str:
    aliases = _django_aliases()
    if not isinstance(value, str) or value not in aliases:
        allowed = f"the alias of an entry in DATABASES ({', '.join(aliases) or 'none defined'})"
        raise PolicyError(field, value, allowed)
    return value


def databases(value: Any, field: str) -> tuple[str, ...] | None:
    """None (``STRAIT["DATABASE"]`` alone), or a non-empty list of distinct aliases of DATABASES."""
    if value is None:
        return None
    allowed = (
        "a non-empty list of aliases of DATABASES, each once (the first holds unlisted queues)"
    )
    if isinstance(value, str | bytes) or not isinstance(value, list | tuple) or not value:
        raise PolicyError(field, value, allowed)
    if len(value) > MAX_ALIASES:
        raise PolicyError(
            field,
            value,
            f"at most {MAX_ALIASES} aliases (each alias's ids in a range of their own below 2**53)",
        )
    checked = tuple(_in_databases(item, f"{field}[{i}]") for i, item in enumerate(value))
    for i, item in enumerate(checked):
        if item in checked[:i]:
            raise PolicyError(f"{field}[{i}]", item, allowed, problem=f"{item!r} is listed twice")
    return checked


def queue_databases(value: Any, field: str) -> dict[str, str]:
    """A dict of queue name (1-100 characters) to an alias of DATABASES."""
    allowed = 'a dict of queue name to an alias of STRAIT["DATABASES"], e.g. {"reports": "jobs2"}'
    if not isinstance(value, Mapping):
        raise PolicyError(field, value, allowed)
    placed = {}
    for queue, where in value.items():
        if not isinstance(queue, str) or not queue or len(queue) > 100 or "\x00" in queue:
            raise PolicyError(field, queue, "queue names of 1 to 100 characters without NUL")
        placed[queue] = _in_databases(where, f"{field}[{queue!r}]")
    return placed


def queue_databases_text(text: str, field: str) -> Any:
    """A JSON object (``{"reports": "jobs2"}``) or ``queue=alias`` pairs separated by commas."""
    if text.lstrip().startswith("{"):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise PolicyError(field, text, f"a JSON object of queue to alias ({exc})") from None
    pairs = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        queue, sep, where = item.partition("=")
        if not sep:
            raise PolicyError(field, item, "queue=alias pairs separated by commas")
        pairs[queue.strip()] = where.strip()
    return pairs


def control_database(value: Any, field: str) -> str | None:
    """None (the first alias of ``STRAIT["DATABASES"]``) or an alias of DATABASES."""
    return None if value is None else _in_databases(value, field)


def check_in_strait(value: str, field: str, strait_aliases: tuple[str, ...]) -> str:
    """Raise unless ``value`` is one of ``STRAIT["DATABASES"]``: django-strait's tables are
    only there."""
    if value not in strait_aliases:
        allowed = f'an alias of STRAIT["DATABASES"] ({", ".join(strait_aliases)})'
        problem = f"{value!r} holds no django-strait tables"
        raise PolicyError(field, value, allowed, problem=problem)
    return value
