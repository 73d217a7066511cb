"""Poison rows: healthy work beside one bad row of every table the worker, the duties and
the surfaces read, with each kind of bad value PostgreSQL takes.

:func:`build` makes the world: healthy jobs whose work the tests watch (runs due,
a schedule, old runs to prune, a stale run to rescue, a webhook owed), and one
*victim* row of every table, as the product writes them. :data:`POISONS` names a
column of a victim row and a bad value for each kind its type takes; :func:`poison`
writes it with raw SQL, as a hand-written UPDATE or a restored backup would, around
every model, validator and serializer.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.db import connection
from django.db.models import Model
from django.utils import timezone

from django_strait import models as m
from django_strait import transitions, trigger, trigger_many
from django_strait.api.auth import QueueScope
from django_strait.ojs import schedules
from django_strait.workflows import define_workflow, trigger_workflow
from tests.conftest import unreadable_json
from tests.integration.factories import DIAMOND, make_job, make_run

#: The kinds of bad value, and what each is.
KINDS = {
    "infinity": "'infinity' in a timestamp or a date",
    "-infinity": "'-infinity' in a timestamp or a date",
    "nan": "NaN in a float or a numeric",
    "extreme": "a number at its column's limit",
    "deep": "JSON nested 5,000 deep",
    "enum": "text that is none of the column's choices",
    "empty": "an empty string where NOT NULL lets one in",
}
#: Kinds SQLite cannot hold as PostgreSQL does (its dates are text, its NaN is NULL).
POSTGRES_ONLY = {"infinity", "-infinity", "nan"}
INT_MAX = 2**31 - 1


def deep_json(depth: int = 5000) -> str:
    """JSON text nested past Python's recursion limit.

    SQLite holds at most 1,000 levels, which Python 3.12+ reads: there, JSON that no
    Python reads either (``tests.conftest.unreadable_json``).
    """
    if connection.vendor == "sqlite":
        return unreadable_json("sqlite")[0]
    return '{"a": ' * depth + "1" + "}" * depth


def _literal(kind: str) -> Any:
    return {
        "infinity": "infinity",
        "-infinity": "-infinity",
        "nan": "NaN",
        "enum": "sideways",
        "empty": "",
    }[kind]


@dataclass(frozen=True)
class Poison:
    """One bad value in one column of the victim row of ``model`` (or the one named ``row``)."""

    model: type[Model]
    column: str
    kind: str
    #: The value written (None: the kind's own: 'infinity', NaN, deep JSON, ...).
    value: Any = None
    #: Which victim of ``model``: "" the model's own, else one of World.rows' names.
    row: str = ""

    @property
    def table(self) -> str:
        return self.model._meta.db_table

    @property
    def id(self) -> str:
        return f"{self.row or self.model.__name__}.{self.column}={self.kind}"

    def written(self) -> Any:
        if self.value is not None:
            return self.value
        return deep_json() if self.kind == "deep" else _literal(self.kind)


def _p(model: type[Model], *columns: tuple[str, str] | tuple[str, str, Any]) -> list[Poison]:
    return [Poison(model, *column) for column in columns]


#: One victim row per table; for each kind of bad value its columns take, one column.
POISONS: list[Poison] = [
    *_p(
        m.Job,
        ("schedule_last_tick", "-infinity"),
        ("created_at", "infinity"),
        ("retention_days", "extreme", INT_MAX),
        ("timeout_secs", "nan"),
        ("estimated_cost", "nan"),
        ("headers", "deep"),
        ("http_method", "enum"),
        ("queue", "empty"),
    ),  # fmt: skip
    *_p(
        m.JobRun,
        ("available_at", "-infinity"),
        ("started_at", "infinity"),
        ("payload", "deep"),
        ("reserved_cost", "nan"),
        ("priority", "extreme", 32767),
        ("status", "enum"),
        ("queue", "empty"),
    ),  # fmt: skip
    *_p(
        m.RunAttempt,
        ("started_at", "infinity"),
        ("finished_at", "-infinity"),
        ("duration_ms", "extreme", INT_MAX),
        ("outcome", "enum"),
        ("worker", "empty"),
    ),  # fmt: skip
    *_p(
        m.RunHold,
        ("until", "infinity"),
        ("started_at", "-infinity"),
        ("times", "extreme", INT_MAX),
        ("reason", "empty"),
    ),  # fmt: skip
    *_p(
        m.Workflow,
        ("updated_at", "infinity"),
        ("webhook_events", "deep"),
        ("name", "empty"),
    ),  # fmt: skip
    *_p(
        m.WorkflowStep,
        ("depends_on", "deep"),
        ("retry_initial_delay_secs", "nan"),
        ("max_attempts", "extreme", INT_MAX),
        ("retry_backoff", "enum"),
    ),  # fmt: skip
    *_p(
        m.WorkflowRun,
        ("payload", "deep"),
        ("progressed_at", "-infinity"),
        ("created_at", "infinity"),
        ("status", "enum"),
    ),  # fmt: skip
    *_p(
        m.WorkflowStepRun,
        ("status", "enum"),
        ("parents_left", "extreme", INT_MAX),
    ),  # fmt: skip
    *_p(
        m.WebhookDelivery,
        ("next_attempt_at", "-infinity"),
        ("created_at", "infinity"),
        ("attempt", "extreme", INT_MAX),
        ("status", "enum"),
        ("url", "empty"),
    ),  # fmt: skip
    *_p(
        m.EndpointCircuit,
        ("opened_at", "infinity"),
        ("last_failure_at", "-infinity"),
        ("failures", "extreme", INT_MAX),
        ("state", "enum"),
        ("endpoint_url", "empty"),
    ),  # fmt: skip
    *_p(
        m.EndpointHealth,
        ("probe_started_at", "infinity"),
        ("success_rate", "nan"),
        ("latency_p95_ms", "extreme", 1e308),
        ("endpoint_url", "empty"),
    ),  # fmt: skip
    *_p(
        m.HealthSample,
        ("at", "infinity"),
        ("score", "nan"),
    ),  # fmt: skip
    *_p(
        m.Project,
        ("daily_budget", "nan"),
        ("soft_limit_ratio", "nan"),
        ("updated_at", "-infinity"),
        ("name", "empty"),
    ),  # fmt: skip
    *_p(
        m.BudgetLedger,
        ("day", "infinity"),
        ("spent", "nan"),
        ("reserved", "extreme", "999999999999.999999"),
        ("soft_warning_sent_at", "infinity"),
    ),  # fmt: skip
    *_p(
        m.JobRateAdmission,
        ("admitted_at", "infinity"),
        ("count", "extreme", INT_MAX),
    ),  # fmt: skip
    *_p(
        m.JobPresetRecommendation,
        ("expires_at", "infinity"),
        ("preset", "empty"),
    ),  # fmt: skip
    *_p(
        m.WorkerProcess,
        ("last_seen_at", "-infinity"),
        ("started_at", "infinity"),
        ("queues", "deep"),
        ("pid", "extreme", INT_MAX),
        ("host", "empty"),
    ),  # fmt: skip
    *_p(
        m.RunRollup,
        ("minute", "infinity"),
        ("count", "extreme", INT_MAX),
        ("status", "empty"),
    ),  # fmt: skip
    # An OJS worker's job (a cron registration) and a dead letter of it: the OJS reads.
    Poison(m.Job, "created_at", "infinity", row="ojs_job"),
    Poison(m.Job, "ojs", "deep", row="ojs_job"),
    Poison(m.JobRun, "finished_at", "-infinity", row="ojs_dead_letter"),
    Poison(m.JobRun, "payload", "deep", row="ojs_dead_letter"),
    Poison(m.RunAttempt, "started_at", "infinity", row="ojs_attempt"),
    *_p(
        m.QueueSample,
        ("at", "-infinity"),
        ("lag_seconds", "nan"),
        ("depth", "extreme", INT_MAX),
        ("queue", "empty"),
    ),  # fmt: skip
]


@dataclass
class World:
    """Healthy work the tests watch, and the victim row of every table."""

    http_url: str
    #: The victim of each model, and the others by name (``Poison.row``).
    rows: dict[type[Model] | str, Model] = field(default_factory=dict)
    #: Healthy runs due now: Python and HTTP jobs that are not the victim's.
    due: list[m.JobRun] = field(default_factory=list)
    #: A healthy scheduled job (every minute), an old run to prune, a stale run to rescue.
    cron: m.Job | None = None
    old: m.JobRun | None = None
    stale: m.JobRun | None = None
    #: A healthy completion webhook owed.
    hook: m.WebhookDelivery | None = None


def write(target: Model, column: str, value: Any) -> None:
    """UPDATE one column of ``target``'s row with raw SQL: no model, validator or serializer."""
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {quote(target._meta.db_table)} SET {quote(column)} = %s WHERE id = %s",
            [value, target.pk],
        )


def poison(world: World, bad: Poison) -> Model:
    """Write ``bad`` into its model's victim row of ``world``; return that row (as it was)."""
    target = world.rows[bad.row or bad.model]
    write(target, bad.column, bad.written())
    return target


def build(http_url: str, *, due: int = 6) -> World:
    """Make the healthy work and the victims (see the module's docstring)."""
    world = World(http_url)
    _healthy(world, due)
    _victims(world)
    # Due a minute ago: a claim inside a test's transaction sees the transaction's clock.
    now = timezone.now()
    due_now = m.JobRun.objects.filter(status="queued", available_at__lte=now)
    due_now.update(available_at=now - dt.timedelta(minutes=1))
    return world


def _healthy(world: World, due: int) -> None:
    now = timezone.now()
    url = world.http_url
    make_job("healthy-http", endpoint_url=url + "/ok", webhook_url=url + "/hook")
    world.due = trigger_many("test-noop", [{"i": i} for i in range(due)])
    world.due += [trigger("healthy-http", {"i": i}) for i in range(due // 2)]
    world.cron = make_job("healthy-cron", schedule="* * * * *")
    m.Job.objects.filter(pk=world.cron.pk).update(created_at=now - dt.timedelta(minutes=5))
    noop = m.Job.objects.get(name="test-noop")
    world.old = make_run(noop, status="completed")
    m.JobRun.objects.filter(pk=world.old.pk).update(finished_at=now - dt.timedelta(days=40))
    world.stale = make_run(noop, status="executing")
    silent = now - dt.timedelta(hours=1)
    m.JobRun.objects.filter(pk=world.stale.pk).update(heartbeat_at=silent, dequeued_at=silent)
    ended = transitions.cancel(trigger("healthy-http", {"hook": 1}, delay=3600).pk)
    world.hook = m.WebhookDelivery.objects.get(run=ended)
    m.EndpointCircuit.objects.create(endpoint_url=url + "/closed-ok", failures=1, updated_at=now)


def _victims(world: World) -> None:
    now = timezone.now()
    minute = now.replace(second=0, microsecond=0)
    url = world.http_url
    rows = world.rows
    project = m.Project.objects.create(name="victims", daily_budget=Decimal(1000))
    victim = make_job(
        "victim", endpoint_url=url + "/victim", schedule="* * * * *", retention_days=7,
        project=project, estimated_cost=Decimal("0.5"), rate_limit_max=100,
        rate_limit_window_secs=60, max_concurrency=10, webhook_url=url + "/victim-hook",
    )  # fmt: skip
    rows[m.Job] = victim
    rows[m.Project] = project
    rows[m.BudgetLedger] = m.BudgetLedger.objects.create(
        project=project, day=now.date(), reserved=Decimal(1), spent=Decimal(2)
    )
    rows[m.JobRun] = make_run(victim, status="queued", available_at=now + dt.timedelta(hours=1))
    trigger("victim", {"due": True})  # through the claim's gate: limits, circuits, budgets
    done = make_run(victim, status="completed")
    rows[m.RunAttempt] = done.attempts.get()
    rows[m.RunHold] = m.RunHold.objects.create(
        run=done, reason="circuit.open", error="held", started_at=now, last_held_at=now,
        until=now, times=2, worker="w",
    )  # fmt: skip
    ended = transitions.cancel(trigger("victim", {"x": 1}, delay=3600).pk)
    rows[m.WebhookDelivery] = m.WebhookDelivery.objects.get(run=ended)
    elsewhere = url + "/elsewhere"
    rows[m.EndpointCircuit] = m.EndpointCircuit.objects.create(
        endpoint_url=elsewhere, state="open", failures=5, opened_at=now, last_failure_at=now
    )
    rows[m.EndpointHealth] = m.EndpointHealth.objects.create(
        endpoint_url=elsewhere, success_rate=0.2, failure_rate=0.8, samples=10
    )
    rows[m.HealthSample] = m.HealthSample.objects.create(endpoint_url=elsewhere, at=minute, score=9)
    rows[m.JobRateAdmission] = m.JobRateAdmission.objects.create(
        job=victim, admitted_at=now, count=1
    )
    rows[m.JobPresetRecommendation] = m.JobPresetRecommendation.objects.create(
        job=victim, preset="micro", expires_at=now + dt.timedelta(hours=1), updated_at=now
    )
    rows[m.WorkerProcess] = m.WorkerProcess.objects.create(
        worker_id="victim-worker", host="h", pid=1, concurrency=1, started_at=now,
        last_seen_at=now,
    )  # fmt: skip
    rows[m.RunRollup] = m.RunRollup.objects.create(
        minute=minute, job=victim, status="completed", count=3, total_duration_ms=30
    )
    rows[m.QueueSample] = m.QueueSample.objects.create(
        queue="victims", at=minute, depth=1, due=1, lag_seconds=1
    )
    workflow = define_workflow("victim-flow", DIAMOND, webhook_url=url + "/flow-hook")
    rows[m.Workflow] = workflow
    rows[m.WorkflowStep] = workflow.steps.get(name="b")
    wr = trigger_workflow("victim-flow", {"order": 1})
    rows[m.WorkflowRun] = wr
    rows[m.WorkflowStepRun] = wr.step_runs.get(step__name="a")
    ojs = schedules.register(
        {"name": "ojs-victim", "cron": "0 3 * * *", "type": "ojs.victim"}, QueueScope()
    )
    rows["ojs_job"] = ojs
    rows["ojs_dead_letter"] = dead = make_run(ojs, status="dead_letter", attempts=1)
    rows["ojs_attempt"] = dead.attempts.get()
