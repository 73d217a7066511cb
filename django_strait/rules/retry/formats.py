"""Retry policies written for other systems, read into Strait's fields (docs/retry.md).

A dict policy may be written in Strait's own fields (docs/retry.md), in the Open
Job Spec's (``initial_interval``, ``max_interval``, ``jitter: true``,
``max_attempts: 0``) or in Zizq's (``retry_limit``, ``backoff_base``,
``backoff_exponent``, ``backoff_jitter``), and may start from a named
``preset`` (``"ojs"``, ``"zizq"``, ``"zzz"``). :func:`translate` turns any of
them into Strait's field names; the values are then checked by the policy's
own validators, under the name the user wrote. Mixing two formats in one
policy is an error that names a key of each.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django_strait.rules.retry.durations import parse_duration
from django_strait.rules.retry.errors import PolicyError

__all__ = ["FORMAT_KEYS", "PRESETS", "Source", "translate"]

#: Keys only Strait's own format has (``jitter`` as a number is Strait's too). ``min_delay``,
#: Strait's floor, has no counterpart in OJS or Zizq and may go with either.
STRAIT_KEYS = frozenset(
    {"strategy", "initial_delay", "max_delay", "delays", "jitter_window", "function"}
)
#: Keys only the Open Job Spec's format has (``jitter`` as a boolean is OJS's too).
OJS_KEYS = frozenset(
    {
        "initial_interval",
        "initial_interval_ms",
        "max_interval",
        "max_interval_ms",
        "backoff_strategy",
    }
)
#: Keys only Zizq's format has.
ZIZQ_KEYS = frozenset({"retry_limit", "backoff_base", "backoff_exponent", "backoff_jitter"})
#: Zizq's formula fields: given together or not at all.
ZIZQ_FORMULA = ("backoff_base", "backoff_exponent", "backoff_jitter")
#: Keys that Strait and OJS share; Zizq has its own for these.
NOT_ZIZQ = frozenset({"max_attempts", "backoff_coefficient"})

FORMAT_KEYS: dict[str, frozenset[str]] = {"strait": STRAIT_KEYS, "ojs": OJS_KEYS, "zizq": ZIZQ_KEYS}

#: OJS's jitter: the delay times a uniform factor in [0.5, 1.5), i.e. Strait's jitter 0.5.
OJS_JITTER = 0.5

#: OJS ``backoff_strategy`` (its §3) -> Strait strategy.
OJS_STRATEGIES = {
    "none": "fixed",
    "linear": "linear",
    "exponential": "exponential",
    "polynomial": "polynomial",
}

#: Each system's defaults, in Strait's fields, already normalised.
PRESETS: dict[str, dict[str, Any]] = {
    # OJS retry spec §8, the default policy.
    "ojs": {
        "max_attempts": 3,
        "strategy": "exponential",
        "initial_delay": 1.0,
        "backoff_coefficient": 2.0,
        "max_delay": 300.0,
        "jitter": OJS_JITTER,
        "non_retryable_errors": (),
        "on_exhaustion": "discard",
    },
    # Zizq's server defaults: B = 15 s, E = 4, J = 30 s, 25 retries; a job out of
    # retries is marked dead (a dead letter here).
    "zizq": {
        "max_attempts": 26,
        "strategy": "zizq",
        "initial_delay": 15.0,
        "min_delay": 15.0,
        "backoff_coefficient": 4.0,
        "jitter_window": 30.0,
        "jitter": 0.0,
        "on_exhaustion": "dead_letter",
    },
    # zzz: exponential from a 15 s base, capped at an hour.
    "zzz": {"strategy": "exponential", "initial_delay": 15.0, "max_delay": 3600.0},
}


@dataclass(frozen=True, slots=True)
class Source:
    """A Strait field's value and the key the user wrote it under (for error messages)."""

    value: Any
    key: str
    #: Already normalised (a preset's value, or a translation's): validate again anyway.
    from_preset: bool = False


def translate(raw: Mapping[str, Any], prefix: str) -> tuple[dict[str, Source], list[PolicyError]]:
    """Return ``raw`` in Strait's field names (each with the key it came from), and the problems."""
    errors: list[PolicyError] = []
    fields: dict[str, Source] = {}
    preset = raw.get("preset")
    if "preset" in raw:
        if preset not in PRESETS:
            errors.append(PolicyError(f"{prefix}.preset", preset, f"one of {', '.join(PRESETS)}"))
        else:
            fields.update({k: Source(v, "preset", True) for k, v in PRESETS[preset].items()})
    # null means "inherit" in every format, as it does for Strait's own fields.
    given = {
        k: v for k, v in raw.items() if k != "preset" and not (v is None and k in _FOREIGN_KEYS)
    }
    kind, mixing = _format_of(given, prefix)
    if mixing is not None:
        return fields, [*errors, mixing]
    if kind == "ojs" or (kind is None and preset == "ojs"):
        fields.update(_ojs(given, prefix, errors))
    elif kind == "zizq":
        fields.update(_zizq(given, prefix, errors))
    else:
        fields.update({k: Source(v, k) for k, v in given.items()})
    return fields, errors


def _format_of(given: Mapping[str, Any], prefix: str) -> tuple[str | None, PolicyError | None]:
    seen: dict[str, str] = {}
    for key, value in given.items():
        kind = _format_of_key(key, value)
        if kind is not None:
            seen.setdefault(kind, key)
    if "zizq" in seen:
        clash = next((k for k in given if k in NOT_ZIZQ), None)
        if clash is not None:
            seen.setdefault("strait", clash)
    if len(seen) > 1:
        (a, key_a), (b, key_b) = list(seen.items())[:2]
        return None, PolicyError(
            prefix,
            f"{key_a!r} and {key_b!r}",
            "one format per policy: Strait's fields, OJS's or Zizq's (docs/retry.md)",
            problem=f"{key_a!r} is {_NAMES[a]} and {key_b!r} is {_NAMES[b]}",
        )
    return next(iter(seen), None), None


_FOREIGN_KEYS = OJS_KEYS | ZIZQ_KEYS
_NAMES = {"strait": "a Strait field", "ojs": "an OJS field", "zizq": "a Zizq field"}


def _format_of_key(key: str, value: Any) -> str | None:
    if key == "jitter":
        if isinstance(value, bool):
            return "ojs"
        return "strait" if isinstance(value, int | float) else None
    for kind, keys in FORMAT_KEYS.items():
        if key in keys:
            return kind
    return None


def _ojs(given: Mapping[str, Any], prefix: str, errors: list[PolicyError]) -> dict[str, Source]:
    fields: dict[str, Source] = {}
    for key, value in given.items():
        target = _OJS_RENAMES.get(key, key)
        if key.endswith("_ms"):
            value = _milliseconds(value, f"{prefix}.{key}", errors)
        elif key == "jitter":
            value = _ojs_jitter(value, f"{prefix}.{key}", errors)
        elif key == "max_attempts" and value == 0 and not isinstance(value, bool):
            value = 1  # OJS: 0 means no retry, the same as 1
        elif key == "backoff_strategy":
            value = _ojs_strategy(value, f"{prefix}.{key}", errors)
        if target in fields and key != target:
            errors.append(_twice(prefix, fields[target].key, key))
        fields[target] = Source(value, key)
    return fields


_OJS_RENAMES = {
    "initial_interval": "initial_delay",
    "initial_interval_ms": "initial_delay",
    "max_interval": "max_delay",
    "max_interval_ms": "max_delay",
    "backoff_strategy": "strategy",
}


def _ojs_jitter(value: Any, field: str, errors: list[PolicyError]) -> Any:
    if not isinstance(value, bool):
        errors.append(PolicyError(field, value, "true or false (OJS) or a number from 0 to 1"))
        return None
    return OJS_JITTER if value else 0.0


def _ojs_strategy(value: Any, field: str, errors: list[PolicyError]) -> Any:
    if value not in OJS_STRATEGIES:
        errors.append(PolicyError(field, value, f"one of {', '.join(OJS_STRATEGIES)}"))
        return None
    return OJS_STRATEGIES[value]


def _zizq(given: Mapping[str, Any], prefix: str, errors: list[PolicyError]) -> dict[str, Source]:
    named = [k for k in ZIZQ_FORMULA if k in given]
    if named and len(named) < len(ZIZQ_FORMULA):
        missing = [k for k in ZIZQ_FORMULA if k not in given]
        errors.append(
            PolicyError(
                f"{prefix}.{missing[0]}",
                None,
                f"given with {', '.join(named)}: Zizq's {', '.join(ZIZQ_FORMULA)} "
                "go together or not at all",
                problem="is missing",
            )
        )
    fields: dict[str, Source] = {}
    for key, value in given.items():
        field = f"{prefix}.{key}"
        if key == "retry_limit":
            fields["max_attempts"] = Source(_retry_limit(value, field, errors), key)
        elif key in ("backoff_base", "backoff_jitter"):
            target = "initial_delay" if key == "backoff_base" else "jitter_window"
            fields[target] = Source(_milliseconds_or_duration(value, field, errors), key)
        elif key == "backoff_exponent":
            fields["backoff_coefficient"] = Source(value, key)
        else:
            fields[key] = Source(value, key)
    floor = _seconds(fields["initial_delay"].value) if "initial_delay" in fields else None
    if floor and "min_delay" not in given:
        # Zizq's base is "the minimum delay between job retries": Strait's floor too.
        fields["min_delay"] = Source(floor, "backoff_base")
    if named:
        fields["strategy"] = Source("zizq", named[0])
        fields["jitter"] = Source(0.0, named[0])  # Zizq's randomness is its additive jitter
    return fields


def _retry_limit(value: Any, field: str, errors: list[PolicyError]) -> Any:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        errors.append(
            PolicyError(field, value, "an integer >= 0 (retries after the first attempt)")
        )
        return None
    return value + 1


def _milliseconds(value: Any, field: str, errors: list[PolicyError]) -> Any:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        errors.append(PolicyError(field, value, "a number of milliseconds >= 0"))
        return None
    return value / 1000


def _milliseconds_or_duration(value: Any, field: str, errors: list[PolicyError]) -> Any:
    # Zizq's own numbers are milliseconds; a string keeps Strait's duration syntax.
    if isinstance(value, str):
        return value
    return _milliseconds(value, field, errors)


def _seconds(value: Any) -> float | None:
    try:
        return parse_duration(value, field="backoff_base")
    except PolicyError:
        return None  # reported where initial_delay is validated


def _twice(prefix: str, first: str, second: str) -> PolicyError:
    return PolicyError(
        prefix,
        f"{first!r} and {second!r}",
        "one of the two",
        problem=f"{first!r} and {second!r} set the same field",
    )
