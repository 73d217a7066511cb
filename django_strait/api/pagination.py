"""Keyset pagination: ``?limit=`` and an opaque ``?cursor=``; no COUNT(*), fast at any depth.

A page is ``WHERE key after <last key seen> ORDER BY key LIMIT limit + 1``: the
extra row only says whether there is a next page.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import Model, QuerySet
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.utils.urls import replace_query_param

from django_strait.api.errors import InvalidField
from django_strait.api.inputs import integer
from django_strait.rules.json_text import loads
from django_strait.storage.rows import Unreadable, problem_of, read

DEFAULT_LIMIT = 50
MAX_LIMIT = 500


@dataclass(frozen=True, slots=True)
class Keyset:
    """The unique column a list is ordered by, and its direction."""

    field: str
    kind: type = int
    descending: bool = False

    def after(self, rows: QuerySet, last: Any) -> QuerySet:
        """Return the rows that come after ``last`` in this order."""
        lookup = "lt" if self.descending else "gt"
        return rows.filter(**{f"{self.field}__{lookup}": last})

    def order(self, rows: QuerySet) -> QuerySet:
        return rows.order_by(f"-{self.field}" if self.descending else self.field)


@dataclass(frozen=True, slots=True)
class Page:
    """One page of rows and the URL of the next one (None on the last page)."""

    rows: Sequence[Model]
    next_url: str | None


def paginate(
    rows: QuerySet, keyset: Keyset, request: Request, across: Sequence[str] | None = None
) -> Page:
    """Return the page of ``rows`` that the request's ``cursor`` and ``limit`` ask for.

    ``across``: the aliases to read (several databases), each the same page, merged
    by the keyset; None reads ``rows`` where they are.
    """
    limit = integer(request.query_params, "limit", default=DEFAULT_LIMIT, low=1, high=MAX_LIMIT)
    cursor = request.query_params.get("cursor")
    if cursor:
        rows = keyset.after(rows, _decode(cursor, keyset.kind))
    if across is None:
        fetched = _fetched(rows, keyset, limit)
    else:
        fetched = _merged([_fetched(rows.using(a), keyset, limit) for a in across], keyset, limit)
    if len(fetched) <= limit:
        return Page(fetched, None)
    last = getattr(fetched[limit - 1], keyset.field)
    url = replace_query_param(request.build_absolute_uri(), "cursor", _encode(last))
    return Page(fetched[:limit], url)


def _fetched(rows: QuerySet, keyset: Keyset, limit: int) -> list[Model]:
    # A row that cannot be read stands in its place (its bad fields None, its problems
    # in ``unreadable``): the page and the pages after it still answer.
    return list(read(keyset.order(rows)[: limit + 1], stand_ins=True).rows)


def _merged(pages: Sequence[list[Model]], keyset: Keyset, limit: int) -> list[Model]:
    """The first ``limit + 1`` rows of the aliases' pages, in the keyset's order.

    Each alias gave its own first ``limit + 1`` after the cursor, so the merged
    first ``limit + 1`` are the list's: the next page starts after the last shown.
    """
    rows = [row for page in pages for row in page]
    rows.sort(key=lambda row: getattr(row, keyset.field), reverse=keyset.descending)
    return rows[: limit + 1]


def _encode(value: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


def _decode(cursor: str, kind: type) -> Any:
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        value = loads(text)  # as a body is read: depth, surrogates, number range
    except ValueError:  # also binascii.Error, UnicodeDecodeError and JSONRefused
        value = None
    if not isinstance(value, kind) or isinstance(value, bool) or not _storable(value):
        raise InvalidField("cursor", "is not a cursor this API gave out; use the next link as is")
    return value


def _storable(value: Any) -> bool:
    if isinstance(value, int):
        return abs(value) <= MAX_ID
    return len(value) <= 200 and "\x00" not in value  # PostgreSQL cannot compare NUL


#: The largest id a 64-bit column holds; a larger cursor or path id matches nothing.
MAX_ID = 2**63 - 1


def page_serializer(name: str, item: type[serializers.Serializer]) -> type[serializers.Serializer]:
    """Return the schema of a page of ``item`` (``results`` and ``next``)."""
    fields = {
        "results": item(many=True),
        "next": serializers.URLField(allow_null=True, help_text="The next page; null on the last."),
    }
    return type(name, (serializers.Serializer,), fields)


def shown(serializer: type[serializers.Serializer], rows: Sequence[Any], **options: Any) -> list:
    """``rows`` as ``serializer`` shows them; a row that could not be read whole also says
    what cannot be (``"unreadable": {field: problem}``, its fields null), and a row that
    cannot be shown at all is its id and that. One bad row never fails the page.
    """
    try:
        data = list(serializer(rows, many=True, **options).data)
    except Exception:
        data = [_shown_alone(serializer, row, options) for row in rows]
    for item, row in zip(data, rows, strict=True):
        problems = getattr(row, "unreadable", None)
        if problems and "unreadable" not in item:
            item["unreadable"] = said(problems)
    return data


def _shown_alone(serializer: type[serializers.Serializer], row: Any, options: dict) -> Any:
    try:
        return serializer(row, **options).data
    except Exception as exc:
        problems = [*getattr(row, "unreadable", ()), Unreadable("", row.pk, "", problem_of(exc))]
        return {"id": row.pk, "unreadable": said(problems)}


def said(problems: Sequence[Unreadable]) -> dict[str, str]:
    """Problems as the API says them: by field ("row" when none), the table, id and what."""
    return {p.field or "row": str(p) if p.table else p.problem for p in problems}


def one(rows: QuerySet) -> Any:
    """The first of ``rows``, read or stood in for (see :func:`shown`); None if there is none."""
    found = read(rows[:1], stand_ins=True).rows
    return found[0] if found else None
