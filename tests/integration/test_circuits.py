"""Circuit breakers against a real failing HTTP server on 127.0.0.1 and the real database."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection, connections, transaction
from django.test import override_settings
from django.utils import timezone

from django_strait import signals, trigger_many
from django_strait.circuits import reset_all, reset_circuit
from django_strait.models import EndpointCircuit, Job, JobRun, RunAttempt, RunHold
from django_strait.storage import backend
from tests.conftest import Reply

pytestmark = pytest.mark.django_db(transaction=True)

COOLDOWN = 60.0
THRESHOLD = 3


@pytest.fixture(autouse=True)
def small_circuits():
    with override_settings(
        STRAIT={
            **getattr(settings, "STRAIT", {}),
            "CIRCUIT_FAILURE_THRESHOLD": THRESHOLD,
            "CIRCUIT_COOLDOWN": f"{COOLDOWN:g}s",
        }
    ):
        yield


def hook_job(server, path="/hook", **fields) -> Job:
    fields.setdefault("max_attempts", 1)
    return Job.objects.create(
        name=fields.pop("name", "hook"), endpoint_url=server.url(path), **fields
    )


def circuit(server, path="/hook") -> EndpointCircuit:
    return EndpointCircuit.objects.get(endpoint_url=server.url(path))


def cool_down(server, path="/hook") -> None:
    """Move the circuit's opening back past the cooldown (instead of sleeping)."""
    EndpointCircuit.objects.filter(endpoint_url=server.url(path)).update(
        opened_at=timezone.now() - dt.timedelta(seconds=COOLDOWN + 1)
    )


def make_due() -> None:
    JobRun.objects.filter(status="queued").update(available_at=timezone.now())


def open_circuit(burst, server) -> None:
    server.routes["/hook"] = lambda r: Reply(503, b"down")
    hook_job(server)
    trigger_many("hook", [{"i": i} for i in range(THRESHOLD)])
    burst()
    assert circuit(server).state == "open"


def test_circuit__opens_after_threshold_consecutive_503s(burst, http_server, listen):
    opened = listen(signals.circuit_opened)

    open_circuit(burst, http_server)

    row = circuit(http_server)
    assert (row.failures, row.opened_at is not None) == (THRESHOLD, True)
    assert len(http_server.requests) == THRESHOLD
    [call] = opened.calls
    assert call["sender"] is EndpointCircuit
    assert (call["endpoint_url"], call["failures"], call["previous_state"]) == (
        http_server.url("/hook"),
        THRESHOLD,
        "closed",
    )


def test_circuit__open_short_circuits_runs_without_a_request(burst, http_server):
    open_circuit(burst, http_server)
    runs = trigger_many("hook", [{"later": i} for i in range(4)])

    burst()

    assert len(http_server.requests) == THRESHOLD  # nothing new reached the server
    opened_at = circuit(http_server).opened_at
    for run in JobRun.objects.filter(pk__in=[r.pk for r in runs]):
        assert (run.status, run.attempt, run.claimed_by) == ("queued", 0, "")
        assert run.available_at == opened_at + dt.timedelta(seconds=COOLDOWN)
        assert not RunAttempt.objects.filter(run=run).exists()
        [period] = RunHold.objects.filter(run=run)
        assert (period.reason, period.after_attempt) == ("circuit.open", 0)
        assert "circuit open" in period.error


def test_circuit__hold_period_follows_the_last_real_attempt(burst, http_server):
    http_server.routes["/hook"] = lambda r: Reply(503, b"down")
    hook_job(http_server, max_attempts=5, retry_initial_delay_secs=1, retry_jitter=0)
    [run] = trigger_many("hook", [{}])
    for _ in range(THRESHOLD):
        burst()
        make_due()
    assert circuit(http_server).state == "open"

    burst()

    run.refresh_from_db()
    assert (run.status, run.attempt) == ("queued", THRESHOLD)
    outcomes = list(RunAttempt.objects.filter(run=run).values_list("number", "outcome"))
    assert outcomes[-1] == (THRESHOLD, "failed")
    [period] = RunHold.objects.filter(run=run)
    assert (period.reason, period.after_attempt) == ("circuit.open", THRESHOLD)
    assert len(http_server.requests) == THRESHOLD


def test_circuit__after_cooldown_one_probe_closes_it_on_success(burst, http_server, listen):
    open_circuit(burst, http_server)
    runs = trigger_many("hook", [{"later": i} for i in range(5)])
    http_server.routes["/hook"] = lambda r: Reply(200)
    closed = listen(signals.circuit_closed)
    cool_down(http_server)

    burst()

    assert len(http_server.requests) == THRESHOLD + 1  # exactly one probe
    row = circuit(http_server)
    assert (row.state, row.failures, row.opened_at) == ("closed", 0, None)
    assert [c["previous_state"] for c in closed.calls] == ["half_open"]
    statuses = sorted(
        JobRun.objects.filter(pk__in=[r.pk for r in runs]).values_list("status", flat=True)
    )
    assert statuses == ["completed"] + ["queued"] * 4

    make_due()
    burst()

    assert JobRun.objects.filter(pk__in=[r.pk for r in runs], status="completed").count() == 5


def test_circuit__failed_probe_reopens_it(burst, http_server, listen):
    open_circuit(burst, http_server)
    trigger_many("hook", [{"later": i} for i in range(3)])
    first_opened = circuit(http_server).opened_at
    cool_down(http_server)
    opened = listen(signals.circuit_opened)

    burst()

    assert len(http_server.requests) == THRESHOLD + 1
    row = circuit(http_server)
    assert row.state == "open" and row.opened_at > first_opened
    assert row.failures == THRESHOLD + 1 and row.probe_started_at is None
    assert [c["previous_state"] for c in opened.calls] == ["half_open"]


def test_circuit__404_does_not_count(burst, http_server):
    http_server.routes["/hook"] = lambda r: Reply(404, b"no such thing")
    hook_job(http_server)
    trigger_many("hook", [{"i": i} for i in range(THRESHOLD * 2)])

    burst()

    assert len(http_server.requests) == THRESHOLD * 2
    assert not EndpointCircuit.objects.exclude(state="closed").exists()
    assert not EndpointCircuit.objects.filter(failures__gt=0).exists()


def test_circuit__a_success_resets_the_consecutive_failures(burst, http_server):
    replies = iter([503, 503, 200])
    http_server.routes["/hook"] = lambda r: Reply(next(replies))
    hook_job(http_server)
    for i in range(3):
        trigger_many("hook", [{"i": i}])
        burst()
        if i < 2:
            assert circuit(http_server).failures == i + 1

    row = circuit(http_server)
    assert (row.state, row.failures) == ("closed", 0)


def test_circuit__healthy_endpoints_write_no_circuit_rows(burst, http_server):
    hook_job(http_server)
    trigger_many("hook", [{"i": i} for i in range(20)])

    burst()

    assert JobRun.objects.filter(status="completed").count() == 20
    assert not EndpointCircuit.objects.exists()


def test_circuit__python_jobs_are_never_gated(burst):
    EndpointCircuit.objects.create(endpoint_url="", state="open", opened_at=timezone.now())
    trigger_many("test-noop", [{"i": i} for i in range(3)])

    burst()

    assert JobRun.objects.filter(status="completed").count() == 3


def held_runs_flow_after(reset, burst, http_server) -> None:
    open_circuit(burst, http_server)
    runs = trigger_many("hook", [{"later": i} for i in range(3)])
    burst()
    assert JobRun.objects.filter(pk__in=[r.pk for r in runs], status="queued").count() == 3
    http_server.routes["/hook"] = lambda r: Reply(200)

    reset()
    make_due()
    burst()

    row = circuit(http_server)
    assert (row.state, row.failures) == ("closed", 0)
    assert JobRun.objects.filter(pk__in=[r.pk for r in runs], status="completed").count() == 3


def test_reset_circuit__from_python_lets_runs_flow(burst, http_server, listen):
    closed = listen(signals.circuit_closed)
    held_runs_flow_after(lambda: reset_circuit(http_server.url("/hook")), burst, http_server)
    assert [c["previous_state"] for c in closed.calls] == ["open"]


def test_reset_all__closes_every_circuit(burst, http_server):
    held_runs_flow_after(reset_all, burst, http_server)


def test_strait_circuits_command__reset_and_list(burst, http_server, capsys):
    url = http_server.url("/hook")
    held_runs_flow_after(
        lambda: call_command("strait_circuits", "--reset", url), burst, http_server
    )
    call_command("strait_circuits")
    out = capsys.readouterr().out
    assert f"closed\t0\t-\t{url}" in out


def test_strait_circuits_command__refuses_an_unknown_url():
    from django.core.management import CommandError

    with pytest.raises(CommandError, match="no circuit for 'http://127.0.0.1:9/x'"):
        call_command("strait_circuits", "--reset", "http://127.0.0.1:9/x")


def admin_reset(client, http_server, *, allowed: bool) -> None:
    from django.contrib.auth.models import Permission

    user = User.objects.create_user("operator", password="pw", is_staff=True)
    perms = ["view_endpointcircuit"] + (["reset_endpointcircuit"] if allowed else [])
    user.user_permissions.set(Permission.objects.filter(codename__in=perms))
    client.force_login(user)
    pk = circuit(http_server).pk
    return client.post(
        "/admin/django_strait/endpointcircuit/",
        {"action": "reset_circuits", "_selected_action": [pk]},
    )


def test_circuit_admin__reset_action_lets_runs_flow(burst, http_server, client):
    held_runs_flow_after(lambda: admin_reset(client, http_server, allowed=True), burst, http_server)


def test_circuit_admin__reset_needs_the_reset_permission(burst, http_server, client):
    open_circuit(burst, http_server)

    admin_reset(client, http_server, allowed=False)

    assert circuit(http_server).state == "open"


@pytest.mark.postgres
def test_win_probe__two_connections_racing_exactly_one_wins(http_server):
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL: two connections updating one row at once")
    url = http_server.url("/hook")
    now = timezone.now()
    row = EndpointCircuit.objects.create(endpoint_url=url, state="open", failures=5)
    cooldown = dt.timedelta(seconds=COOLDOWN)
    for _ in range(10):
        EndpointCircuit.objects.filter(pk=row.pk).update(
            state="open", opened_at=now - cooldown - dt.timedelta(seconds=1), probe_started_at=None
        )
        assert sum(race(2, lambda: backend().win_circuit_probe(
            url, now=now, cooldown=cooldown, lost_before=now - dt.timedelta(hours=1)
        ))) == 1  # fmt: skip


def race(n: int, fn) -> list:
    barrier = threading.Barrier(n)
    results: list = []
    errors: list = []

    def one() -> None:
        try:
            with transaction.atomic():
                barrier.wait(10)
                results.append(fn())
        except Exception as exc:  # reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=one) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    return results
