"""``STRAIT["READ_DATABASE"]``: the overview, the drill-down charts and the metrics read a replica.

``reader`` (tests/settings.py) is a second connection to the test database, as a
replica would be; which connection a page's queries went over shows where it read.
A replica that does not answer (a connection to a closed port on 127.0.0.1, or a
SQLite file that cannot be opened) is not read: the page reads the primary and
says so. tests/e2e/test_read_replica_standby.py reads a real streaming standby
whose replay is paused, and shows its lag.
"""

from __future__ import annotations

import pytest
from django.contrib import admin as django_admin
from django.contrib.auth.models import User
from django.db import connections
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import include, path, reverse
from prometheus_client.parser import text_string_to_metric_families

from django_strait import database
from django_strait.models import EndpointHealth, RunRollup
from tests.integration.factories import make_job, make_run
from tests.process_helpers import free_port

urlpatterns = [
    path("admin/", django_admin.site.urls),
    path("metrics/", include("django_strait.metrics.urls")),
]

pytestmark = [
    pytest.mark.django_db(transaction=True, databases=["default", "reader"]),
    pytest.mark.urls(__name__),
]

URL = "http://127.0.0.1:9/hook"
READER = override_settings(STRAIT={"READ_DATABASE": "reader"})


@pytest.fixture
def admin() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("ops", "ops@example.invalid", "x"))
    return client


@pytest.fixture
def broken_reader():
    """The reader's connection pointed at nothing that answers, for one test."""
    conn = connections["reader"]
    before = dict(conn.settings_dict)
    conn.close()
    if conn.vendor == "postgresql":
        conn.settings_dict.update(HOST="127.0.0.1", PORT=str(free_port()))
    else:
        conn.settings_dict["NAME"] = "/nonexistent-directory/replica.sqlite3"
    try:
        yield
    finally:
        conn.close()
        conn.settings_dict.clear()
        conn.settings_dict.update(before)


def strait_tables_read(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if "django_strait_" in q["sql"]]


def busy_job():
    job = make_job("partner-webhook", endpoint_url=URL)
    make_run(job, status="queued")
    RunRollup.objects.create(minute=database_now_minute(), job=job, status="completed", count=7)
    EndpointHealth.objects.create(endpoint_url=URL, success_rate=1.0, samples=3)
    return job


def database_now_minute():
    from django.utils import timezone

    return timezone.now().replace(second=0, microsecond=0)


def read_twice(client: Client, url: str) -> tuple[str, list[str], list[str]]:
    """GET ``url``; its body and the strait queries sent to the primary and to the reader."""
    with (
        CaptureQueriesContext(connections["default"]) as primary,
        CaptureQueriesContext(connections["reader"]) as reader,
    ):
        response = client.get(url)
    assert response.status_code == 200, response.content[:500]
    return response.content.decode(), strait_tables_read(primary), strait_tables_read(reader)


def read_primary(client: Client, url: str) -> tuple[str, list[str]]:
    """GET ``url`` (the reader cannot be connected: capturing it would connect)."""
    with CaptureQueriesContext(connections["default"]) as primary:
        response = client.get(url)
    assert response.status_code == 200, response.content[:500]
    return response.content.decode(), strait_tables_read(primary)


def test_read_alias__names_the_replica_of_the_jobs_alias_and_defaults_to_it():
    assert database.read_alias() == "default"
    with READER:
        assert database.read_alias() == "reader"
        assert database.read_alias("default") == "reader"
    with override_settings(STRAIT={"READ_DATABASE": {"default": "reader"}}):
        assert database.read_alias() == "reader"
        assert database.read_alias("reader") == "reader"


def test_overview__reads_the_replica_and_says_so(admin):
    busy_job()
    with READER:
        body, primary, reader = read_twice(admin, reverse("admin:django_strait_overview"))
    assert any("django_strait_runrollup" in sql for sql in reader)
    assert not any("django_strait_runrollup" in sql for sql in primary)
    assert "Read off the replica <code>reader</code>" in body
    if connections["reader"].vendor == "postgresql":
        assert "up to date" in body  # a mirror of the primary: nothing to replay
    assert "partner-webhook" in body  # the rollup, read off the replica


def test_overview__without_a_replica_reads_the_primary_and_says_nothing(admin):
    busy_job()
    body, primary, reader = read_twice(admin, reverse("admin:django_strait_overview"))
    assert any("django_strait_runrollup" in sql for sql in primary)
    assert reader == []
    assert "replica" not in body


def test_drill_downs__read_the_replica(admin):
    job = busy_job()
    with READER:
        body, primary, reader = read_twice(
            admin, reverse("admin:django_strait_job_stats", args=[job.pk])
        )
        assert any("django_strait_runrollup" in sql for sql in reader)
        assert not any("django_strait_runrollup" in sql for sql in primary)
        assert "Read off the replica" in body
        body, primary, reader = read_twice(
            admin, reverse("admin:django_strait_endpoint_stats") + f"?url={URL}"
        )
    assert any("django_strait_healthsample" in sql for sql in reader)
    assert not any("django_strait_healthsample" in sql for sql in primary)
    assert "Read off the replica" in body


def test_overview__a_replica_that_does_not_answer_is_not_read(admin, broken_reader, caplog):
    busy_job()
    with READER:
        body, primary = read_primary(admin, reverse("admin:django_strait_overview"))
    assert any("django_strait_runrollup" in sql for sql in primary)
    assert "The replica <code>reader</code> did not answer" in body
    assert "read from the primary, <code>default</code>" in body
    assert "partner-webhook" in body  # the numbers are there, from the primary
    assert "the read replica 'reader' did not answer" in caplog.text


def metric(text: str, name: str) -> dict[tuple, float]:
    return {
        tuple(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }


def test_metrics__read_the_replica_and_report_whether_it_answered(admin):
    busy_job()
    with READER:
        body, primary, reader = read_twice(admin, "/metrics/")
    assert metric(body, "strait_queue_depth") == {(("queue", "default"),): 1.0}
    assert any("django_strait_jobrun" in sql for sql in reader)
    assert not any("django_strait_jobrun" in sql for sql in primary)
    assert metric(body, "strait_read_replica_up") == {(("replica", "reader"),): 1.0}
    if connections["reader"].vendor == "postgresql":
        assert metric(body, "strait_read_replica_lag_seconds") == {(("replica", "reader"),): 0.0}


def test_metrics__a_replica_that_does_not_answer_reads_the_primary(admin, broken_reader):
    busy_job()
    with READER:
        body, primary = read_primary(admin, "/metrics/")
    assert metric(body, "strait_queue_depth") == {(("queue", "default"),): 1.0}
    assert metric(body, "strait_read_replica_up") == {(("replica", "reader"),): 0.0}
    assert any("django_strait_jobrun" in sql for sql in primary)
