"""Memory presets: the ordered chain a process job climbs after an out-of-memory kill (docs/process-execution.md).

Pure values and functions: the settings check (``conf``), the model checks,
the worker's choice of a run's preset and the decision after an OOM all read
the same chain. Sizes are binary, as Docker and Kubernetes read them:
``256MB`` is 256 MiB.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django_strait.rules.retry.errors import PolicyError

#: The chain docs/process-execution.md describes, smallest first.
DEFAULT_PRESETS: dict[str, str] = {
    "micro": "256MB",
    "small-1x": "512MB",
    "small-2x": "1GB",
    "medium": "2GB",
    "large-1x": "4GB",
    "large-2x": "8GB",
}

#: The error type and attempt outcome of a child killed for memory.
OOM_ERROR = "system.oom"
OOM_OUTCOME = "oom"
#: How long a recommendation lasts after the OOM that made it.
RECOMMENDATION_TTL_SECS = 24 * 3600.0
#: Longest preset name (the Job/JobRun/RunAttempt columns' length).
NAME_MAX_LENGTH = 50
#: Most presets in a chain, and the smallest and largest limit one may set.
MAX_PRESETS = 20
MIN_BYTES = 16 * 2**20
MAX_BYTES = 2**50

_UNITS = {"": 1, "B": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
_ALLOWED_SIZE = "a size such as '256MB', '1GB' or a number of bytes"


@dataclass(frozen=True, slots=True)
class Preset:
    """One step of the chain: its name and its memory limit in bytes."""

    name: str
    limit_bytes: int


@dataclass(frozen=True, slots=True)
class Chain:
    """The presets, smallest first."""

    presets: tuple[Preset, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.presets)

    @property
    def first(self) -> str:
        return self.presets[0].name

    def get(self, name: str) -> Preset | None:
        """Return the preset called ``name`` (None if the chain has none)."""
        return next((p for p in self.presets if p.name == name), None)

    def rank(self, name: str) -> int:
        """Return the position of ``name`` in the chain; -1 if it is not in it."""
        return self.names.index(name) if name in self.names else -1

    def after(self, name: str) -> str | None:
        """Return the preset after ``name`` (None at the last, or for a name not in the chain)."""
        rank = self.rank(name)
        if rank < 0 or rank + 1 >= len(self.presets):
            return None
        return self.presets[rank + 1].name

    def start(self, job_preset: str, run_preset: str, recommended: str | None) -> str:
        """Return the preset an attempt runs at.

        A retried run keeps the preset its last OOM moved it to; else the larger
        of the job's own and the job's current recommendation. Names not in the
        chain (settings changed since they were written) are ignored.
        """
        if run_preset in self.names:
            return run_preset
        own = job_preset if job_preset in self.names else self.first
        if recommended in self.names and self.rank(recommended) > self.rank(own):
            return recommended
        return own


def parse_size(value: Any, field: str) -> int:
    """Return ``value`` (``'256MB'``, ``'1GiB'``, or bytes) in bytes; raise naming ``field``."""
    if isinstance(value, bool):
        raise PolicyError(field, value, _ALLOWED_SIZE)
    if isinstance(value, int):
        size = value
    else:
        match = _SIZE.match(value) if isinstance(value, str) else None
        if match is None:
            raise PolicyError(field, value, _ALLOWED_SIZE)
        size = int(float(match.group(1)) * _UNITS[match.group(2).upper()])
    if not MIN_BYTES <= size <= MAX_BYTES:
        raise PolicyError(field, value, "a size from 16MB to 1024TB")
    return size


def parse_chain(value: Any, field: str = "STRAIT.PRESETS") -> Chain:
    """Return the chain of a ``{name: size}`` mapping, checked; raise naming the bad entry."""
    allowed = "an ordered dict of preset name -> memory, smallest first, e.g. {'micro': '256MB'}"
    if not isinstance(value, Mapping) or not value:
        raise PolicyError(field, value, allowed)
    if len(value) > MAX_PRESETS:
        raise PolicyError(field, f"{len(value)} presets", f"at most {MAX_PRESETS} presets")
    presets: list[Preset] = []
    for name, size in value.items():
        if not isinstance(name, str) or not _NAME.match(name) or len(name) > NAME_MAX_LENGTH:
            raise PolicyError(
                f"{field} key",
                name,
                f"lowercase letters, digits, '-' and '_' (at most {NAME_MAX_LENGTH} characters)",
            )
        limit = parse_size(size, f"{field}.{name}")
        if presets and limit <= presets[-1].limit_bytes:
            raise PolicyError(
                f"{field}.{name}",
                size,
                f"more than the preset before it ({presets[-1].name}): the chain grows",
            )
        presets.append(Preset(name, limit))
    return Chain(tuple(presets))


def show_bytes(size: int) -> str:
    """Say a size the way presets are written (``512MB``, ``1GB``)."""
    for unit, factor in (("GB", 2**30), ("MB", 2**20)):
        if size >= factor and size % factor == 0:
            return f"{size // factor}{unit}"
    return f"{size / 2**20:.0f}MB"
