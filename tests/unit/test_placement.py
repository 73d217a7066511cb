"""Placement over several databases: the settings' checks, where each queue lives, the router.

The rows themselves landing on the right alias, and one worker serving both,
are tried on two PostgreSQL servers in tests/e2e/test_several_databases.py.
"""

from __future__ import annotations

import contextlib
import warnings
from decimal import Decimal

import pytest
from django.conf import settings
from django.core import checks
from django.test import override_settings
from django.utils import timezone

from django_strait import checks as strait_checks
from django_strait import database
from django_strait.conf import SettingError, strait_settings
from django_strait.database import StraitRouter
from django_strait.management.commands.run_strait_worker import served_aliases
from django_strait.models import ApiKey, BudgetLedger, BudgetReservation, Job, JobRun, Project
from django_strait.rules.resilience import budgets
from django_strait.services.breaker import CircuitBreaker
from django_strait.transitions.reservations import close_stale_reservations
from django_strait.transitions.worker import settle_elsewhere
from django_strait.worker.accounting import write_shared
from django_strait.worker.catalog import Catalog
from django_strait.worker.config import WorkerConfig
from django_strait.worker.fleet import configs_for
from tests.unit.memory import MemoryStorage, record

pytestmark = pytest.mark.usefixtures("clean_strait_env")

ROUTER = ["django_strait.database.StraitRouter"]


@contextlib.contextmanager
def databases(strait, *names, **more):
    """Extra DATABASES aliases (never connected to) and ``STRAIT`` as given."""
    extra = {n: {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"} for n in names}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Overriding setting DATABASES")
        with override_settings(DATABASES={**settings.DATABASES, **extra}, STRAIT=strait, **more):
            yield


def test_one_alias__places_everything_there_and_asks_nothing():
    with databases({}):
        assert database.aliases() == ("default",)
        assert database.alias() == "default"
        assert database.alias_for_queue("reports") == "default"
        assert database.control_alias() == "default"
        assert database.placed() is False


def test_strait_database_alone__is_the_one_alias():
    with databases({"DATABASE": "jobs"}, "jobs"):
        assert database.aliases() == ("jobs",)
        assert database.alias_for_queue("anything") == "jobs"
        assert database.control_alias() == "jobs"


def test_several__queues_are_placed_and_the_rest_live_on_the_first():
    strait = {
        "DATABASES": ["jobs1", "jobs2"],
        "QUEUE_DATABASES": {"reports": "jobs2"},
        "CONTROL_DATABASE": "jobs2",
    }
    with databases(strait, "jobs1", "jobs2"):
        assert database.aliases() == ("jobs1", "jobs2")
        assert database.alias() == "jobs1"
        assert database.alias_for_queue("reports") == "jobs2"
        assert database.alias_for_queue("default") == "jobs1"
        assert database.control_alias() == "jobs2"
        assert database.placed() is True
        assert strait_settings.errors() == []


@pytest.mark.parametrize(
    ("strait", "field", "says"),
    [
        ({"DATABASES": "jobs1"}, "STRAIT.DATABASES", "a non-empty list of aliases"),
        ({"DATABASES": []}, "STRAIT.DATABASES", "a non-empty list of aliases"),
        ({"DATABASES": ["jobs1", "nowhere"]}, "STRAIT.DATABASES[1]", "an entry in DATABASES"),
        ({"DATABASES": ["jobs1", "jobs1"]}, "STRAIT.DATABASES[1]", "listed twice"),
        (
            {"DATABASE": "jobs2", "DATABASES": ["jobs1", "jobs2"]},
            "STRAIT.DATABASES",
            "first alias is STRAIT['DATABASE']",
        ),
        ({"QUEUE_DATABASES": ["jobs1"]}, "STRAIT.QUEUE_DATABASES", "a dict of queue name"),
        (
            {"DATABASES": ["jobs1"], "QUEUE_DATABASES": {"reports": "nowhere"}},
            "STRAIT.QUEUE_DATABASES['reports']",
            "an entry in DATABASES",
        ),
        (
            {"DATABASES": ["jobs1"], "QUEUE_DATABASES": {"reports": "jobs2"}},
            "STRAIT.QUEUE_DATABASES['reports']",
            "holds no django-strait tables",
        ),
        ({"QUEUE_DATABASES": {"": "jobs1"}}, "STRAIT.QUEUE_DATABASES", "queue names of 1 to 100"),
        (
            {"DATABASES": ["jobs1"], "CONTROL_DATABASE": "jobs2"},
            "STRAIT.CONTROL_DATABASE",
            "holds no django-strait tables",
        ),
        ({"CONTROL_DATABASE": "nowhere"}, "STRAIT.CONTROL_DATABASE", "an entry in DATABASES"),
    ],
)
def test_bad_placement__is_refused_naming_the_setting_and_what_is_allowed(strait, field, says):
    with databases(strait, "jobs1", "jobs2"):
        errors = strait_settings.errors()
        assert errors, "the value was accepted"
        assert any(e.field == field and says in str(e) for e in errors), [str(e) for e in errors]


def test_bad_placement__is_a_system_check_error():
    strait = {"DATABASES": ["jobs1"], "QUEUE_DATABASES": {"reports": "jobs2"}}
    with databases(strait, "jobs1", "jobs2", DATABASE_ROUTERS=ROUTER):
        # Only the app's checks: Django 6's model checks ask SQLite's features (a query).
        found = checks.run_checks(tags=[strait_checks.TAG])
    ours = [m for m in found if m.id and m.id.startswith("django_strait.")]
    assert [m.id for m in ours] == ["django_strait.E003"]
    assert "STRAIT.QUEUE_DATABASES['reports']" in ours[0].msg


def test_queue_databases__from_the_environment(monkeypatch):
    monkeypatch.setenv("STRAIT_DATABASES", "jobs1,jobs2")
    monkeypatch.setenv("STRAIT_QUEUE_DATABASES", "reports=jobs2, mail=jobs1")
    with databases({}, "jobs1", "jobs2"):
        assert database.aliases() == ("jobs1", "jobs2")
        assert strait_settings.QUEUE_DATABASES == {"reports": "jobs2", "mail": "jobs1"}
    monkeypatch.setenv("STRAIT_QUEUE_DATABASES", "reports")
    with databases({}, "jobs1", "jobs2"), pytest.raises(SettingError, match="queue=alias"):
        strait_settings.QUEUE_DATABASES  # noqa: B018


def test_several_without_the_router__is_e005():
    with databases({"DATABASES": ["default", "jobs2"]}, "jobs2"):
        found = checks.run_checks(tags=[strait_checks.TAG])
        found = [m for m in found if m.id == "django_strait.E005"]
    assert len(found) == 1 and "DATABASES" in found[0].msg


def test_router__migrates_the_tables_on_every_alias_and_api_keys_with_the_users():
    router = StraitRouter()
    with databases({"DATABASES": ["jobs1", "jobs2"]}, "jobs1", "jobs2"):
        for where in ("jobs1", "jobs2"):
            assert router.allow_migrate(where, "django_strait", model_name="jobrun") is True
            assert router.allow_migrate(where, "django_strait") is True  # the NOTIFY SQL
            assert router.allow_migrate(where, "django_strait", model_name="apikey") is False
        assert router.allow_migrate("default", "django_strait", model_name="jobrun") is False
        assert router.allow_migrate("default", "django_strait", model_name="apikey") is True
        assert router.db_for_read(ApiKey) is None


def test_router__a_row_goes_back_to_its_own_alias_and_others_to_the_first():
    router = StraitRouter()
    with databases({"DATABASES": ["jobs1", "jobs2"]}, "jobs1", "jobs2"):
        job = Job(name="j")
        job._state.db = "jobs2"
        assert router.db_for_write(Job, instance=job) == "jobs2"
        assert router.db_for_read(JobRun) == "jobs1"
        assert router.db_for_write(JobRun) == "jobs1"


def test_worker__serves_every_alias_unless_narrowed():
    with databases({"DATABASES": ["jobs1", "jobs2"]}, "jobs1", "jobs2"):
        assert served_aliases([]) == ["jobs1", "jobs2"]
        assert served_aliases(["jobs2", "jobs2"]) == ["jobs2"]
        with pytest.raises(Exception, match="--database 'nowhere'.*allowed: jobs1, jobs2"):
            served_aliases(["nowhere"])


def test_worker__each_engine_listens_on_its_alias_and_only_the_first_serves_metrics():
    base = WorkerConfig(worker_id="w", listen_alias="jobs1", metrics_port=9100)
    one, two = configs_for(base, ["jobs1", "jobs2"], first="jobs1", listen_database="direct")
    assert (one.using, one.listen_alias, one.metrics_port) == ("jobs1", "direct", 9100)
    assert (two.using, two.listen_alias, two.metrics_port) == ("jobs2", "jobs2", None)
    polling = WorkerConfig(worker_id="w", listen_alias=None)
    assert [c.listen_alias for c in configs_for(polling, ["a", "b"], first="a",
                                                listen_database=None)] == [None, None]  # fmt: skip


def test_shared_protection__a_control_database_away_costs_the_samples_not_the_record(caplog):
    # The in-memory storage keeps no endpoint health: its fold_health raises, as a
    # control database that does not answer does.
    control = MemoryStorage(alias="control")
    chunk = [record(1, endpoint="https://api.example/x", status_code=200), record(2)]
    with caplog.at_level("WARNING", logger="django_strait.worker.accounting"):
        assert write_shared(control, CircuitBreaker(control), chunk, Catalog()) is False
    assert "health and circuit results of 1 attempts not written" in caplog.text
    assert "'control'" in caplog.text
    # A batch that called no endpoint asks the control database nothing.
    assert write_shared(control, CircuitBreaker(control), [record(3)], Catalog()) is True


def test_router__budgets_live_on_the_control_database_with_several():
    router = StraitRouter()
    job = Job(name="j")
    job._state.db = "jobs2"
    project = Project(name="p")
    project._state.db = "jobs1"
    with databases({"DATABASES": ["jobs1", "jobs2"], "CONTROL_DATABASE": "jobs2"}, "jobs1",
                   "jobs2"):  # fmt: skip
        for model in (Project, BudgetLedger, BudgetReservation):
            assert router.db_for_read(model) == "jobs2"
            assert router.db_for_write(model, instance=project) == "jobs2"
        # A job on any alias names its project on the control database.
        assert router.allow_relation(job, project) is True
        assert router.allow_relation(project, job) is True
        assert router.allow_relation(job, JobRun()) is None
        assert database.control_elsewhere("jobs1") and not database.control_elsewhere("jobs2")
    with databases({"DATABASE": "jobs1"}, "jobs1"):
        assert router.db_for_read(Project) == "jobs1"
        assert router.allow_relation(job, project) is None  # one database: Django's own rule
        assert not database.control_elsewhere("jobs1")


def test_shared_budgets__a_control_database_away_costs_time_not_the_record(caplog):
    # The in-memory storage keeps no budgets: its settle_budgets_for raises, as a control
    # database that does not answer does. The reaper closes those reservations later.
    control = MemoryStorage(alias="control")
    spend = budgets.Spend(1, 7, timezone.now(), Decimal(2), Decimal(1), 1)
    with caplog.at_level("WARNING", logger="django_strait.transitions.worker"):
        assert settle_elsewhere(control, "jobs2", [spend]) == []
    assert "budgets of 1 recorded attempts not settled" in caplog.text
    assert "'control'" in caplog.text and "the reaper closes" in caplog.text


def test_stale_reservations__a_control_database_away_is_left_for_the_next_round(caplog):
    class Away(MemoryStorage):
        def stale_reservations(self, source, *, before, limit):
            raise ConnectionError("control database away")

    runs, control = MemoryStorage(alias="jobs2"), Away(alias="control")
    with caplog.at_level("WARNING", logger="django_strait.transitions.reservations"):
        assert close_stale_reservations(runs, control, now=timezone.now()) == 0
    assert "reservations of database 'jobs2' not closed" in caplog.text
    # Nothing stale: nothing asked of the runs' database.
    assert close_stale_reservations(runs, MemoryStorage(alias="c"), now=timezone.now()) == 0


def test_control_reads__pages_read_the_fleet_s_protection_state_on_the_control_database():
    with databases({"DATABASES": ["jobs1", "jobs2"], "CONTROL_DATABASE": "jobs2"}, "jobs1",
                   "jobs2"):  # fmt: skip
        assert database.control_reads("jobs1") == "jobs2"
    strait = {"DATABASES": ["jobs1", "jobs2"], "CONTROL_DATABASE": "jobs2",
              "READ_DATABASE": {"jobs2": "replica2"}}  # fmt: skip
    with databases(strait, "jobs1", "jobs2", "replica2"):
        assert database.control_reads("jobs1") == "replica2"
    with databases({"DATABASE": "jobs1"}, "jobs1", "replica"):
        assert database.control_reads("replica") == "replica"  # one database: as asked
