"""Cron schedules as pure functions: checking an expression and a time zone, and the tick math.

``due_ticks``, ``latest_tick`` and ``plan_ticks`` are functions of the
expression, the time zone, the last tick acted on and ``now``; the
``Scheduler`` duty (``duties.scheduler``) applies them to jobs under the leader
lock. The user-facing rules are in docs/schedules.md.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from django.db import models

from django_strait.rules.states import RunStatus

UTC = dt.UTC

ALIASES = ("@hourly", "@daily", "@midnight", "@weekly", "@monthly", "@yearly", "@annually")
CRON_SYNTAX = (
    "5 fields 'minute hour day-of-month month day-of-week' "
    "(e.g. '*/15 * * * *', '0 9 * * 1-5', '30 2 1 * *') or one of " + ", ".join(ALIASES)
)
TIMEZONE_SYNTAX = "an IANA time zone name such as UTC, Europe/Paris or America/New_York"
#: The longest time zone name taken (``Job.timezone``'s column; IANA's longest is 32).
TIMEZONE_MAX_LENGTH = 64

#: Missed ticks counted per job and round; past this the count is a lower bound.
MAX_COUNTED_MISSES = 1000
#: The shortest grace window: a tick less than this old is on time and fires.
MIN_GRACE = 60.0
#: Run statuses that make a job busy for ``schedule_overlap="skip"``.
ACTIVE_STATUSES = (RunStatus.QUEUED, RunStatus.DEQUEUED, RunStatus.EXECUTING, RunStatus.WAITING)

_ONE_MICROSECOND = dt.timedelta(microseconds=1)


class MissedTicks(models.TextChoices):
    """What a job does with the ticks no worker was running for (docs/schedules.md)."""

    RUN_ONCE = "run_once", "Run once on recovery"
    SKIP = "skip", "Skip"


class Overlap(models.TextChoices):
    """Whether a tick fires while the job still has a run going (docs/schedules.md)."""

    ALLOW = "allow", "Allow"
    SKIP = "skip", "Skip while a run is active"


class ScheduleError(ValueError):
    """A bad ``schedule`` or ``timezone`` value; ``field`` names which."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def check_schedule(expression: str) -> str:
    """Return ``expression`` stripped, or raise ScheduleError if it is not a schedule."""
    text = expression.strip() if isinstance(expression, str) else ""
    is_alias = text.lower() in ALIASES
    if not is_alias and (len(text.split()) != 5 or not croniter.is_valid(text)):
        raise ScheduleError("schedule", f"{expression!r} is not a cron schedule; use {CRON_SYNTAX}")
    try:
        # Parses, and proves the expression names a real date ('0 0 30 2 *' never does).
        croniter(text, dt.datetime(2000, 1, 1, tzinfo=UTC)).get_next(dt.datetime)
    except ValueError as exc:  # croniter's errors are ValueErrors
        raise ScheduleError(
            "schedule", f"{expression!r} never fires ({exc}); use {CRON_SYNTAX}"
        ) from None
    return text.lower() if is_alias else text


def check_timezone(name: str) -> ZoneInfo:
    """Return the zone named ``name``, or raise ScheduleError naming the timezone field."""
    if not isinstance(name, str) or len(name) > TIMEZONE_MAX_LENGTH:
        shown = repr(name)[:TIMEZONE_MAX_LENGTH] + "..." if isinstance(name, str) else repr(name)
        raise ScheduleError(
            "timezone",
            f"{shown} is not a time zone name of at most {TIMEZONE_MAX_LENGTH} characters; "
            f"use {TIMEZONE_SYNTAX}",
        )
    try:
        return ZoneInfo(name)
    # OSError: a name the file system refuses as a path (too long, or of odd bytes).
    except (ZoneInfoNotFoundError, ValueError, TypeError, OSError):
        raise ScheduleError(
            "timezone", f"{name!r} is not a time zone; use {TIMEZONE_SYNTAX}"
        ) from None


def tick_key(tick: dt.datetime) -> str:
    """Return the idempotency key of the run for ``tick``: one run per tick per job."""
    return f"cron:{tick.astimezone(UTC).isoformat()}"


def _hours_are_wildcard(expression: str) -> bool:
    # '@hourly' is '0 * * * *'; the other aliases name a fixed hour.
    if expression.startswith("@"):
        return expression == "@hourly"
    return expression.split()[1].startswith("*")


def _counts(tick: dt.datetime, wildcard_hours: bool) -> bool:
    """Whether a local tick fires: a wall time repeated by a fall-back fires once.

    croniter yields both occurrences of a repeated wall time. For schedules with
    fixed hours ('30 2 * * *') the second one would run a daily job twice;
    schedules over every hour ('*/10 * * * *') follow real time and keep it.
    croniter's ``fold`` flag is not reliable (get_prev sets it on plain times), so
    the second occurrence is told by its instant.
    """
    repeat = tick.astimezone(UTC) != tick.replace(fold=0).astimezone(UTC)
    return wildcard_hours or not repeat


def due_ticks(
    expression: str,
    timezone: str,
    after: dt.datetime,
    now: dt.datetime,
    *,
    limit: int | None = None,
) -> list[dt.datetime]:
    """Return the ticks in ``(after, now]``, computed in ``timezone``, as UTC datetimes."""
    expression = check_schedule(expression)
    zone = check_timezone(timezone)
    wildcard = _hours_are_wildcard(expression)
    ticks: list[dt.datetime] = []
    found = croniter(expression, after.astimezone(zone))
    while limit is None or len(ticks) < limit:
        local = found.get_next(dt.datetime)
        tick = local.astimezone(UTC)
        if tick > now:
            break
        # Two wall times in a spring-forward gap both land on the transition instant.
        if (not ticks or tick > ticks[-1]) and tick > after and _counts(local, wildcard):
            ticks.append(tick)
    return ticks


def latest_tick(expression: str, timezone: str, at: dt.datetime) -> dt.datetime | None:
    """Return the most recent tick at or before ``at``, in UTC (None if there is none)."""
    expression = check_schedule(expression)
    zone = check_timezone(timezone)
    wildcard = _hours_are_wildcard(expression)
    # croniter's get_prev is strictly before its start: start just after ``at``.
    found = croniter(expression, (at + _ONE_MICROSECOND).astimezone(zone))
    for _ in range(3):  # at most one repeated wall time is passed over
        local = found.get_prev(dt.datetime)
        if _counts(local, wildcard):
            return local.astimezone(UTC)
    return None


@dataclass(frozen=True, slots=True)
class TickPlan:
    """What one round does for one job: ticks to fire, misses skipped, where to advance to."""

    #: Ticks to fire, oldest first, in UTC.
    fire: tuple[dt.datetime, ...] = ()
    #: Missed ticks not fired (counted up to MAX_COUNTED_MISSES).
    skipped_missed: int = 0
    #: The newest tick acted on (fired or skipped): the job's next ``schedule_last_tick``.
    last: dt.datetime | None = None


def plan_ticks(
    expression: str,
    timezone: str,
    *,
    last_tick: dt.datetime | None,
    now: dt.datetime,
    grace: float,
    missed: str = "run_once",
    created_at: dt.datetime | None = None,
) -> TickPlan:
    """Decide which ticks fire at ``now`` after ``last_tick`` (None: never seen before).

    A tick less than ``grace`` seconds old is on time and fires. Older ticks were
    missed (no worker ran the scheduler then): ``missed="run_once"`` fires one
    run for the latest of them, ``"skip"`` fires none.
    """
    if last_tick is None:
        return _first_sight(expression, timezone, now, grace, created_at)
    edge = now - dt.timedelta(seconds=grace)
    on_time = due_ticks(expression, timezone, max(last_tick, edge), now)
    misses = (
        due_ticks(expression, timezone, last_tick, edge, limit=MAX_COUNTED_MISSES)
        if last_tick < edge
        else []
    )
    latest_miss = latest_tick(expression, timezone, edge) if misses else None
    caught_up = (latest_miss,) if latest_miss is not None and missed == "run_once" else ()
    return TickPlan(
        fire=(*caught_up, *on_time),
        skipped_missed=len(misses) - len(caught_up),
        last=on_time[-1] if on_time else latest_miss,
    )


def _first_sight(
    expression: str,
    timezone: str,
    now: dt.datetime,
    grace: float,
    created_at: dt.datetime | None,
) -> TickPlan:
    """Start a new schedule at the latest tick, firing it only if it is on time.

    Firing an on-time tick means a job saved just before 09:00 runs at 09:00 even
    if the first scheduler round that sees it comes a moment after. A tick from
    before the job existed never fires.
    """
    latest = latest_tick(expression, timezone, now)
    if latest is None:
        return TickPlan()
    on_time = (now - latest).total_seconds() < grace
    existed = created_at is None or latest >= created_at
    return TickPlan(fire=(latest,) if on_time and existed else (), last=latest)
