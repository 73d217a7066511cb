"""Workflows on PostgreSQL: each id list one array parameter, ``= ANY(%s::bigint[])``.

One parameter keeps a batch's statement the same text whatever its size, so
psycopg converts it once (its cache skips statements of over 50 parameters,
and a 100-id batch spent more time being split than being run).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django_strait.storage.workflows.sql import Db, Statements


class Arrays(Statements):
    """``= ANY(%s::bigint[])``, the ids as one array literal."""

    def membership(self) -> str:
        return "= ANY(%s::bigint[])"

    def ids(self, values: Sequence[int]) -> tuple[list[Any], int | None]:
        return ["{" + ",".join(map(str, map(int, values))) + "}"], None


STATEMENTS = Arrays()


def db(alias: str) -> Db:
    """The workflow moves' database ``alias``, its statements written with arrays."""
    return Db(alias, STATEMENTS)
