"""``storage.sql.text_array``: a list as one PostgreSQL array literal reads back as the list."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pytest
from django.db import connection

from django_strait.storage.sql import server_bound_cursor, text_array

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

AWKWARD = [
    'a "quoted" word', "back\\slash", "\\\"", "", "NULL", "null", "{braces}", "a,b", " padded ",
    "ünïcödé ✓", "new\nline\ttab", json.dumps({"k": ['x"y', "\\"]}),
]  # fmt: skip


@pytest.fixture
def pg():
    if connection.vendor != "postgresql":
        pytest.skip("array literals are PostgreSQL's")
    return connection


def test_text_array__reads_back_as_given_with_nulls_as_null(pg):
    values = [*AWKWARD, None]
    with server_bound_cursor(pg) as cursor:
        cursor.execute("SELECT %s::text[]", [text_array(values)])
        assert cursor.fetchone()[0] == values
        cursor.execute("SELECT %s::text[]", [text_array([])])
        assert cursor.fetchone()[0] == []


def test_text_array__json_texts_cast_to_jsonb_keep_their_values(pg):
    objects = [{"args": [1, 'x"y'], "meta": {"k": "\\n"}}, [], "text", None]
    with server_bound_cursor(pg) as cursor:
        cursor.execute(
            "SELECT x::text FROM unnest(%s::jsonb[]) AS x",
            [text_array(None if o is None else json.dumps(o) for o in objects)],
        )
        got = [row[0] for row in cursor.fetchall()]
    assert [None if g is None else json.loads(g) for g in got] == objects


def test_text_array__numbers_times_and_decimals_read_back_as_their_types(pg):
    moment = dt.datetime(2026, 11, 29, 5, 52, 1, 123456, tzinfo=dt.UTC)
    plus_two = moment.astimezone(dt.timezone(dt.timedelta(hours=2)))
    with server_bound_cursor(pg) as cursor:
        cursor.execute(
            "SELECT %s::bigint[], %s::timestamptz[], %s::numeric[], %s::integer[]",
            [
                text_array([2**62, -1, None]),
                text_array([moment, plus_two, None]),
                text_array([Decimal("0.000001"), Decimal("12.5"), None]),
                text_array([None, 0]),
            ],
        )
        ids, moments, costs, codes = cursor.fetchone()
    assert ids == [2**62, -1, None]
    assert moments == [moment, moment, None]
    assert costs == [Decimal("0.000001"), Decimal("12.5"), None] and codes == [None, 0]
