"""``manage.py strait_partition``: what it refuses and says (the move itself:
tests/e2e/test_partition_move.py)."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from django_strait.storage.postgres.layout import is_partitioned

pytestmark = pytest.mark.django_db


def partition(*args: str) -> str:
    out = StringIO()
    call_command("strait_partition", *args, stdout=out)
    return out.getvalue()


def partitioned() -> bool:
    with connection.cursor() as cursor:
        return is_partitioned(cursor)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--lock-timeout", "5ms"], "--lock-timeout: '5ms' is out of range; allowed: a "
                                    "duration from 10ms to 60s"),
        (["--lock-timeout", "soon"], "--lock-timeout"),
        (["--batch-size", "0"], "--batch-size: 0 is out of range: use 1 to 1000000"),
        (["--in-one-go-below", "-1"], "--in-one-go-below: -1 is out of range"),
    ],
)  # fmt: skip
def test_strait_partition__bad_options_name_the_option_and_what_is_allowed(args, said):
    with pytest.raises(CommandError, match=said.replace("(", r"\(")):
        partition(*args)


def test_strait_partition__on_sqlite_says_it_is_for_postgresql():
    if connection.vendor == "postgresql":
        pytest.skip("the SQLite pass's test")
    with pytest.raises(CommandError, match="partitioned on PostgreSQL only"):
        partition()


def test_strait_partition__a_partitioned_table_is_left_as_it_is():
    if connection.vendor != "postgresql" or not partitioned():
        pytest.skip("the partitioned PostgreSQL pass's test")

    assert partition() == "The runs table is partitioned already.\n"
    assert partition("--abandon") == "Nothing was left to drop.\n"


def test_strait_partition__refuses_where_partition_runs_is_off(settings):
    if connection.vendor != "postgresql" or partitioned():
        pytest.skip("the plain PostgreSQL pass's test")
    settings.STRAIT = {**getattr(settings, "STRAIT", {}), "PARTITION_RUNS": False}

    with pytest.raises(CommandError, match=r"STRAIT\['PARTITION_RUNS'\] is False"):
        partition()
    assert not partitioned()
