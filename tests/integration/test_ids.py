"""Over several aliases, an id says where its row lives: each alias numbers its rows in a range.

The alias at index k of ``STRAIT["DATABASES"]`` numbers rows above k * 2**48
(``migrate --database ALIAS`` moves its sequences there, through
``storage.ids.number_ids``), so a run's id is unique across the aliases, and the
admin, the API and the django.tasks results find its alias from the id alone.
"""

from __future__ import annotations

import pytest
from django.core import checks
from django.core.management import call_command
from django.db import connections
from django.test import override_settings

from django_strait import database
from django_strait.storage import ids
from django_strait.storage.checks import check_id_ranges
from tests.conftest import TWO_ALIASES
from tests.integration.factories import make_job, make_run

pytestmark = pytest.mark.django_db(databases=["default", "jobs2"], transaction=True)

ROUTED = override_settings(
    STRAIT=TWO_ALIASES, DATABASE_ROUTERS=["django_strait.database.StraitRouter"]
)


def test_runs_on_each_alias_take_ids_of_its_range_and_the_id_names_the_alias(two_aliases):
    here = make_run(make_job(queue="default"))
    there = make_run(make_job(queue="two", using="jobs2"))
    again = make_run(there.job)

    assert 0 < here.pk < 2**48
    assert 2**48 < there.pk < again.pk < 2 * 2**48
    assert database.alias_for_id(here.pk) == "default"
    assert database.alias_for_id(there.pk) == "jobs2"
    # The run's attempts and the job too: every table of the alias.
    assert there.job.pk > 2**48
    assert there.attempts.exists() is False or min(a.pk for a in there.attempts.all()) > 2**48


def test_an_id_beyond_the_listed_aliases_names_none(two_aliases):
    assert database.alias_for_id(2 * 2**48 + 5) is None
    assert database.alias_for_id(0) is None
    assert database.alias_for_id(-3) is None
    assert database.alias_for_id("12") is None
    assert database.alias_for_id(True) is None


def test_on_one_database_every_positive_id_is_its_own():
    assert database.alias_for_id(1) == "default"
    assert database.alias_for_id(7 * 2**48) == "default"
    assert ids.number_ids("default") == []  # nothing placed: nothing moved


def test_migrate_numbers_an_alias_and_the_check_says_when_it_is_not():
    _unnumber("jobs2")  # as a database migrated before it was listed
    with ROUTED:
        found = check_id_ranges(databases=["default", "jobs2"])
        assert [m.id for m in found if m.obj is None] == ["django_strait.W004"] * len(found)
        assert any("'jobs2'" in m.msg for m in found), [m.msg for m in found]
        assert all(isinstance(m, checks.Warning) for m in found)

        call_command("migrate", database="jobs2", verbosity=0)

        assert not [m for m in check_id_ranges(databases=["jobs2"]) if "'jobs2'" in m.msg]
        assert ids.outside_range("jobs2") == []
        # Once more changes nothing (post_migrate runs on every migrate).
        before = _next_ids("jobs2")
        assert ids.number_ids("jobs2") == []
        assert _next_ids("jobs2") == before


def test_a_table_that_already_holds_rows_outside_the_range_is_left_and_said(caplog):
    # Rows made before jobs2 was placed, with ids of the first alias's range.
    make_run(make_job(queue="two", using="jobs2", id=5), id=7)
    with ROUTED:
        stuck = ids.number_ids("jobs2")
    assert "django_strait_job" in stuck
    assert "django_strait_jobrun" in stuck
    assert "holds ids outside the alias's range" in caplog.text


@pytest.mark.postgres
def test_on_postgresql_an_alias_that_runs_out_of_ids_fails_rather_than_take_anothers(
    two_aliases,
):
    if connections["jobs2"].vendor != "postgresql":
        pytest.skip("a sequence's MAXVALUE: PostgreSQL")
    job = make_job(queue="two", using="jobs2")
    with connections["jobs2"].cursor() as cursor:
        cursor.execute("SELECT pg_get_serial_sequence('django_strait_jobrun', 'id')")
        (sequence,) = cursor.fetchone()
        cursor.execute(f"SELECT last_value FROM {sequence}")
        (was,) = cursor.fetchone()
        cursor.execute(f"SELECT setval('{sequence}', {2 * 2**48 - 1})")
    try:
        with pytest.raises(Exception, match="reached maximum value"):
            make_run(job)
    finally:  # the next tests on jobs2 take ids again
        with connections["jobs2"].cursor() as cursor:
            cursor.execute(f"SELECT setval('{sequence}', {was})")


def _next_ids(using: str) -> dict[str, int]:
    with connections[using].cursor() as cursor:
        if connections[using].vendor == "postgresql":
            cursor.execute(ids._PG_SEQUENCES)
            return {table: (lo, hi) for table, _s, lo, hi in cursor.fetchall()}
        return dict(ids._sqlite_sequences(cursor))


def _unnumber(using: str) -> None:
    """Put ``using``'s sequences back where a fresh migrate leaves them (ids from 1)."""
    with connections[using].cursor() as cursor:
        if connections[using].vendor == "postgresql":
            cursor.execute(ids._PG_SEQUENCES)
            for _table, sequence, _lo, _hi in cursor.fetchall():
                cursor.execute(
                    f"ALTER SEQUENCE {sequence} MINVALUE 1 NO MAXVALUE START WITH 1 RESTART WITH 1"
                )
        else:
            cursor.execute("DELETE FROM sqlite_sequence WHERE name LIKE 'django_strait%'")
