"""Workflows with the ORM's SQL: each id list written out, ``IN (%s, ...)``.

The workflow moves themselves are common to every backend (``storage.workflows``);
this is how their statements' id lists are written on a database without arrays.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django_strait.storage.workflows.sql import Db, Statements


class InLists(Statements):
    """``IN (%s, %s, ...)``, one parameter per id."""

    def membership(self) -> str:
        return "{in}"

    def ids(self, values: Sequence[int]) -> tuple[list[Any], int | None]:
        return list(values), len(values)


STATEMENTS = InLists()


def db(alias: str) -> Db:
    """The workflow moves' database ``alias``, its statements written with lists."""
    return Db(alias, STATEMENTS)
