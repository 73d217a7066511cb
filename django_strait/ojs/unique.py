"""OJS unique jobs (``options.unique``, ojs-unique-jobs.md): the policy, its key, its conflicts.

The key is the SHA-256 of the canonical JSON (keys sorted at every level) of the
job's type and the dimensions the policy names (``queue``, ``args`` or its
``args_keys``, ``meta_keys`` of ``meta``); it is kept in the run's envelope
(``ojs.unique_key``). An enqueue with a policy locks its type's ``Job`` row to
its commit, so two enqueues of one type see each other: the guarantee is strong
(no two runs with one key in the policy's states), at the price of enqueues of
that type with a policy taking turns.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django_strait.ojs import errors
from django_strait.ojs.states import OJS_STATES
from django_strait.rules.retry import PolicyError, parse_duration

KEYS = ("type", "queue", "args", "meta")
CONFLICTS = ("reject", "replace", "replace_except_schedule", "ignore")
DEFAULT_STATES = ("available", "active", "scheduled", "retryable", "pending")


@dataclass(frozen=True)
class Policy:
    """A checked ``options.unique``."""

    key: str
    states: tuple[str, ...]
    period_secs: float | None
    on_conflict: str


def policy(value: Any, name: str, kind: str, queue: str, args: list, meta: Mapping) -> Policy:
    """Check ``options.unique`` (``name`` is where it sits) and compute the job's key."""
    if not isinstance(value, Mapping):
        raise errors.invalid_request(name, "must be an object {keys, states, period, on_conflict}")
    keys = _names(value.get("keys", ["type"]), f"{name}.keys", KEYS)
    states = _names(value.get("states", list(DEFAULT_STATES)), f"{name}.states", OJS_STATES)
    on_conflict = value.get("on_conflict", "reject")
    if on_conflict not in CONFLICTS:
        raise errors.invalid_request(
            f"{name}.on_conflict", f"must be one of {', '.join(CONFLICTS)}"
        )
    period = value.get("period")
    if period is not None:
        try:
            period = parse_duration(period, field=f"{name}.period")
        except PolicyError as exc:
            raise errors.invalid_request(
                f"{name}.period", f"{exc.problem}; must be {exc.allowed}"
            ) from None
    parts: dict[str, Any] = {"type": kind}
    if "queue" in keys:
        parts["queue"] = queue
    if "args" in keys:
        parts["args"] = _picked(args, value.get("args_keys"), f"{name}.args_keys")
    if "meta" in keys:
        meta_keys = value.get("meta_keys")
        if not meta_keys:
            raise errors.invalid_request(
                f"{name}.meta_keys", "must name meta's keys when keys has meta"
            )
        parts["meta"] = _picked([dict(meta)], meta_keys, f"{name}.meta_keys")
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return Policy(hashlib.sha256(text.encode()).hexdigest(), tuple(states), period, on_conflict)


def _names(value: Any, name: str, allowed: tuple[str, ...]) -> list[str]:
    if not isinstance(value, list) or not value or any(v not in allowed for v in value):
        raise errors.invalid_request(name, f"must be a non-empty array of: {', '.join(allowed)}")
    return value


def _picked(args: list, names: Any, name: str) -> Any:
    """``args`` whole, or the top-level keys ``names`` of its objects (each must be there)."""
    if names is None:
        return args
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise errors.invalid_request(name, "must be an array of key names")
    objects = [a for a in args if isinstance(a, Mapping)]
    picked = {}
    for key in names:
        holder = next((a for a in objects if key in a), None)
        if holder is None:
            raise errors.invalid_request(name, f"{key!r} is not a key of the job's arguments")
        picked[key] = holder[key]
    return picked
