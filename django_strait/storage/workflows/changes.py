"""One move of workflow runs: where, when, and what it changed so far."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from django_strait.storage.values import Advanced, Change
from django_strait.storage.workflows.sql import Db

__all__ = ["Advanced", "Change", "Move"]


@dataclass(frozen=True, slots=True)
class Move:
    """One move of workflow runs: where, when, and what it changed so far."""

    db: Db
    now: dt.datetime
    out: Advanced = field(default_factory=Advanced)
