"""``django_strait.storage.rows.read``: each row read, or set aside with an error naming its table,
id and field; the others go on."""

from __future__ import annotations

import logging

import pytest
from django.db import DataError, connection, transaction
from django.test.utils import CaptureQueriesContext

from django_strait.models import EndpointCircuit, Job, JobRun, Project
from django_strait.storage import rows
from tests.conftest import unreadable_json
from tests.integration.factories import make_job, make_run
from tests.security.poison import deep_json, write

pytestmark = pytest.mark.django_db


def circuits(n: int) -> list[EndpointCircuit]:
    return [EndpointCircuit.objects.create(endpoint_url=f"http://127.0.0.1/{i}") for i in range(n)]


def postgres_only() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("'infinity' and NaN are PostgreSQL values")


def test_read__one_query_when_every_row_reads():
    circuits(5)

    with CaptureQueriesContext(connection) as queries:
        found = rows.read(EndpointCircuit.objects.all())

    assert (len(found.rows), found.unreadable, len(queries)) == (5, [], 1)


def test_read__sets_aside_the_row_that_cannot_be_read_naming_table_id_and_field(caplog):
    postgres_only()
    made = circuits(40)
    write(made[17], "opened_at", "infinity")

    with caplog.at_level(logging.ERROR, logger="django_strait.storage.rows"):
        found = rows.read(EndpointCircuit.objects.order_by("pk"))

    assert [c.pk for c in found.rows] == [c.pk for c in made if c is not made[17]]
    [problem] = found.unreadable
    assert (problem.table, problem.pk, problem.field) == (
        "django_strait_endpointcircuit", made[17].pk, "opened_at",
    )  # fmt: skip
    assert "cannot be read (DataError: timestamp too large" in problem.problem
    assert str(problem) in caplog.text


def test_read__deep_json_is_set_aside_on_every_database():
    job = make_job("deep")
    make_job("fine")
    write(job, "headers", deep_json())

    found = rows.read(Job.objects.order_by("name"))

    assert [j.name for j in found.rows] == ["fine"]
    assert [(p.pk, p.field) for p in found.unreadable] == [(job.pk, "headers")]
    assert unreadable_json(connection.vendor)[1] in found.unreadable[0].problem


def test_read__stand_ins_keep_their_place_with_the_bad_fields_empty():
    job = make_job("deep")
    runs = [make_run(job) for _ in range(3)]
    write(runs[1], "payload", deep_json())

    found = rows.read(JobRun.objects.order_by("pk"), stand_ins=True)

    assert [r.pk for r in found.rows] == [r.pk for r in runs]
    stand_in = found.rows[1]
    assert stand_in.payload is None and stand_in.status == "queued"
    assert [p.field for p in stand_in.unreadable] == ["payload"]
    assert not hasattr(found.rows[0], "unreadable")


def test_read__a_related_row_that_cannot_be_read_is_named_and_stood_in_for():
    job = make_job("deep")
    run = make_run(job)
    write(job, "headers", deep_json())

    found = rows.read(JobRun.objects.select_related("job"), stand_ins=True)

    assert [(p.pk, p.field) for p in found.unreadable] == [(run.pk, "job.headers")]
    assert found.rows[0].job.name == "deep" and found.rows[0].job.headers is None


def test_read__values_that_load_but_cannot_be_used_and_bounds():
    postgres_only()
    project = Project.objects.create(name="p", daily_budget=10)
    job = make_job("kept", retention_days=7)
    write(project, "daily_budget", "NaN")
    write(job, "retention_days", 2**31 - 1)

    budgets = rows.read(Project.objects.all())
    kept = rows.read(Job.objects.only("retention_days"), bounded=("retention_days",))

    assert (budgets.rows, budgets.unreadable[0].problem) == ([], "is NaN, not a finite number")
    assert kept.rows == []
    assert kept.unreadable[0].problem == "must be a number from 1 to 3,650; got 2147483647"


def test_read__text_that_is_not_a_choice_is_set_aside():
    circuit = circuits(1)[0]
    write(circuit, "state", "sideways")

    found = rows.read(EndpointCircuit.objects.all())

    assert found.rows == []
    assert found.unreadable[0].problem.startswith("is 'sideways', not one of 'closed'")


def test_read__a_statement_the_server_refused_in_a_transaction_is_raised():
    postgres_only()
    circuits(2)
    refused = EndpointCircuit.objects.extra(select={"boom": "1 / (id - id)"})  # division by zero

    with pytest.raises(DataError), transaction.atomic():
        rows.read(refused)


def test_read__a_row_found_bad_before_is_named_again_without_reading_each_field():
    postgres_only()
    made = circuits(3)
    write(made[1], "opened_at", "infinity")
    rows.read(EndpointCircuit.objects.all())

    with CaptureQueriesContext(connection) as queries:
        found = rows.read(EndpointCircuit.objects.all())

    assert len(found.rows) == 2 and [p.field for p in found.unreadable] == ["opened_at"]
    assert len(queries) == 4  # the read, its ids, the bad row alone, the rest


def test_read__a_row_fixed_since_is_read_again():
    postgres_only()
    made = circuits(2)
    write(made[1], "opened_at", "infinity")
    rows.read(EndpointCircuit.objects.all())
    write(made[1], "opened_at", None)

    assert (
        len(rows.read(EndpointCircuit.objects.all()).rows),
        len(rows.read(EndpointCircuit.objects.all()).unreadable),
    ) == (2, 0)


def test_read__reading_some_fields_names_only_those_that_fail():
    job = make_job("deep", schedule="* * * * *")
    write(job, "headers", deep_json())

    partial = rows.read(Job.objects.only("pk", "name", "headers"))
    unread = rows.read(Job.objects.only("pk", "name"))

    assert [(p.pk, p.field) for p in partial.unreadable] == [(job.pk, "headers")]
    assert (len(unread.rows), unread.unreadable) == (1, [])
