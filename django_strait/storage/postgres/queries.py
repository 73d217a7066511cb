"""The PostgreSQL statements of ``queries.sql``, loaded once, by name.

procrastinate's habit: SQL lives in one file a reviewer reads whole, each
statement under ``-- name: <name>``. The record is composed here from its core
and its parts (``record.<part>``), and the claim comes in three variants of its
queue filter; both are done once, at load, so every statement's text is constant
(which lets the worker prepare its statements once per connection: see ``sql.keep_plans``).
Start, hold and record come in two texts, for a plain runs table and for one
partitioned by status class (``layout``), which they name the live leaf of.
"""

from __future__ import annotations

import functools
import re
from importlib import resources

from django_strait.storage.postgres.layout import LEAVES
from django_strait.storage.sql import listed

_NAME = re.compile(r"^-- name: (?P<name>[\w.]+)\s*$", re.MULTILINE)

#: The claim's queue filter for no queue given (any), one queue, several.
QUEUE_FILTERS = {
    "any": "",
    "one": "AND queue = %(queue)s",
    "many": "AND queue = ANY(%(queues)s)",
    # Any queue but the paused ones (storage.queues): only while a queue is paused.
    "except": "AND queue <> ALL(%(paused)s)",
}


@functools.cache
def statements() -> dict[str, str]:
    """Return every statement in queries.sql by name, without comments or the final ';'."""
    text = resources.files(__package__).joinpath("queries.sql").read_text()
    found: dict[str, str] = {}
    marks = list(_NAME.finditer(text))
    for mark, following in zip(marks, [*marks[1:], None], strict=True):
        body = text[mark.end() : following.start() if following else len(text)]
        found[mark["name"]] = _clean(body)
    return found


def _clean(body: str) -> str:
    lines = [line for line in body.splitlines() if not line.lstrip().startswith("--")]
    return "\n".join(lines).strip().rstrip(";").strip()


def get(name: str) -> str:
    """Return the statement called ``name``."""
    return statements()[name]


@functools.cache
def by_id(name: str, partitioned: bool) -> str:
    """Return ``name`` (start, hold, budget.reserve) for a runs table ``partitioned`` by status class or not."""
    return _live(get(name), partitioned)


def _live(sql: str, partitioned: bool) -> str:
    """Fill the ``/*live*/`` mark: on a partitioned table, the live leaf's statuses named."""
    if not partitioned:
        return sql
    return sql.replace("/*live*/", f"AND r.status IN ({listed(LEAVES['live'])})")


#: How the claim's UPDATE finds the runs it chose, on a plain runs table or a partitioned
#: one (queries.sql, "claim").
CLAIMED_BY_ID = {
    False: "FROM due WHERE r.id = due.id",
    True: "WHERE r.id = ANY(ARRAY(SELECT id FROM due)) /*live*/",
}


@functools.cache
def claim(variant: str, partitioned: bool = False) -> str:
    """Return the claim with the queue filter of ``variant`` (any, one, many, except), for a
    runs table ``partitioned`` by status class or not."""
    sql = get("claim").replace("/*queue_filter*/", QUEUE_FILTERS[variant])
    return _live(sql.replace("/*claimed_by_id*/", CLAIMED_BY_ID[partitioned]), partitioned)


@functools.cache
def record(parts: tuple[str, ...], partitioned: bool = False) -> str:
    """Return the record statement with the CTEs of ``parts`` (record.<part>) joined in,
    for a runs table ``partitioned`` by status class or not."""
    ctes = "".join(f",\n{get(f'record.{part}')}" for part in parts)
    returned = "".join(
        f"\n{statements()[f'record.{part}.returned']}"
        for part in parts
        if f"record.{part}.returned" in statements()
    )
    sql = _live(get("record"), partitioned).replace("/*parts*/", ctes)
    return sql.replace("/*returned*/", returned)


@functools.cache
def claim_external(partitioned: bool = False) -> str:
    """Return the OJS fetch's claim, for a runs table ``partitioned`` by status class or not."""
    sql = get("claim_external")
    return _live(sql.replace("/*claimed_by_id*/", CLAIMED_BY_ID[partitioned]), partitioned)


@functools.cache
def fetch_external(partitioned: bool = False) -> str:
    """Return the OJS fetch of plain runs, for a runs table ``partitioned`` or not."""
    by_id = "AND r.id = ANY(ARRAY(SELECT id FROM due)) /*live*/" if partitioned else ""
    return _live(get("fetch_external").replace("/*by_id*/", by_id), partitioned)
