"""The run and dead-letter lists never count a million rows: estimates past a bound, deep pages by id."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_strait.admin.runs import EstimatedCountPaginator
from django_strait.models import DeadLetter, JobRun
from tests.integration.factories import make_job, make_run

pytestmark = pytest.mark.django_db

RUNS = "/admin/django_strait/jobrun/"
DEAD_LETTERS = "/admin/django_strait/deadletter/"
on_postgresql = pytest.mark.skipif(
    connection.vendor != "postgresql",
    reason="pg_class.reltuples and the planner's row estimates are PostgreSQL's",
)


class SmallBound(EstimatedCountPaginator):
    """The paginator with bounds a test can cross with a handful of runs."""

    exact_up_to = 3
    deep_page_from = 2


def analyze() -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {JobRun._meta.db_table}")


def whole_table_counts(queries) -> list[str]:
    return [
        q["sql"]
        for q in queries.captured_queries
        if "COUNT(" in q["sql"].upper() and "WHERE" not in q["sql"].upper()
    ]


@pytest.fixture
def runs() -> list[JobRun]:
    job = make_job("mail")
    made = [make_run(job, status="completed") for _ in range(6)]
    made.append(make_run(job, status="failed"))
    return made


@on_postgresql
def test_unfiltered__takes_the_table_estimate_not_a_count(runs):
    analyze()
    paginator = SmallBound(JobRun.objects.order_by("-pk"), 2)
    with CaptureQueriesContext(connection) as queries:
        assert paginator.count == 7  # ANALYZE read every row of so small a table
    assert paginator.estimated
    assert whole_table_counts(queries) == []
    assert "reltuples" in queries.captured_queries[0]["sql"]


@on_postgresql
def test_filtered__counts_exactly_up_to_the_bound(runs):
    paginator = SmallBound(JobRun.objects.filter(status="failed"), 2)
    assert (paginator.count, paginator.estimated) == (1, False)


@on_postgresql
def test_filtered__past_the_bound_takes_the_planner_estimate(runs):
    analyze()
    paginator = SmallBound(JobRun.objects.filter(status="completed"), 2)
    with CaptureQueriesContext(connection) as queries:
        count = paginator.count
    assert paginator.estimated
    assert count >= 4  # never below what was counted before stopping at the bound
    assert any(q["sql"].startswith("EXPLAIN") for q in queries.captured_queries)


@on_postgresql
def test_never_analyzed_small_table__is_counted_exactly(runs):
    paginator = EstimatedCountPaginator(JobRun.objects.order_by("-pk"), 2)
    assert (paginator.count, paginator.estimated) == (7, False)


def test_small_filtered_list__is_counted_exactly_on_every_database(runs):
    paginator = EstimatedCountPaginator(JobRun.objects.filter(status="completed"), 2)
    assert paginator.count == 6
    assert not paginator.estimated


@pytest.mark.parametrize("number", [1, 2, 3, 4])
def test_deep_pages__hold_the_rows_an_offset_would(runs, number):
    rows = JobRun.objects.order_by("-pk")
    page = SmallBound(rows, 2).page(number)
    expected = [r.pk for r in rows][(number - 1) * 2 : number * 2]
    assert [r.pk for r in page.object_list] == expected


@on_postgresql
def test_run_list__past_the_bound_says_about_and_never_counts_the_table(
    admin_client, runs, monkeypatch
):
    analyze()
    monkeypatch.setattr(EstimatedCountPaginator, "exact_up_to", 3)
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(RUNS)
    assert "about 7 job runs" in response.content.decode()
    assert whole_table_counts(queries) == []
    filtered = admin_client.get(RUNS, {"status__exact": "failed"})
    assert "1 job run" in filtered.content.decode()
    assert "about" not in filtered.content.decode().split('class="paginator"')[1]


def test_run_list__under_the_bound_counts_exactly(admin_client, runs):
    assert "7 job runs" in admin_client.get(RUNS).content.decode()


def test_dead_letter_list__counts_only_dead_letters(admin_client, runs):
    make_run(runs[0].job, status="dead_letter")
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(DEAD_LETTERS)
    assert "1 dead letter" in response.content.decode()
    assert whole_table_counts(queries) == []
    assert DeadLetter.objects.count() == 1
