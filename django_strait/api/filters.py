"""Query-string filters for lists of runs and dead letters, refusing what they cannot use."""

from __future__ import annotations

from collections.abc import Mapping

from django.db.models import Q

from django_strait.api.errors import InvalidField
from django_strait.api.inputs import instant
from django_strait.api.placement import placement_params
from django_strait.database import aliases, placed
from django_strait.models import Job
from django_strait.rules.states import RunStatus
from django_strait.services.replaying import SelectionError, error_type_condition

#: Query parameters a run list understands (besides ``cursor`` and ``limit``).
RUN_FILTERS = ("status", "job", "queue", "error_type", "created_after", "created_before")
PAGING = ("cursor", "limit")


def run_condition(params: Mapping[str, str], *, allowed: tuple[str, ...] = RUN_FILTERS) -> Q:
    """Return the filter that ``params`` ask for; every given filter must hold (an AND)."""
    known = allowed + PAGING + placement_params()
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise InvalidField(unknown[0], f"unknown filter; allowed: {', '.join(known)}")
    condition = Q()
    for name in allowed:
        value = params.get(name)
        if value is not None:
            condition &= _FILTERS[name](value)
    return condition


def refuse_unknown(params: Mapping[str, str], allowed: tuple[str, ...]) -> None:
    """Refuse a query parameter that is not in ``allowed``, naming it."""
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise InvalidField(unknown[0], f"unknown parameter; allowed: {', '.join(allowed)}")


def listed(value: str, field: str) -> list[str]:
    """Return the comma-separated values of ``field``; refuse an empty list."""
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise InvalidField(field, "must name at least one value (several: comma-separated)")
    return items


def _status(value: str) -> Q:
    statuses = listed(value, "status")
    unknown = [s for s in statuses if s not in RunStatus.values]
    if unknown:
        raise InvalidField(
            "status", f"unknown status {unknown[0]!r}; allowed: {', '.join(RunStatus.values)}"
        )
    return Q(status__in=statuses)


def _job(value: str) -> Q:
    names = listed(value, "job")
    if placed():
        return _job_anywhere(names)
    found = dict(Job.objects.filter(name__in=names).values_list("name", "pk"))
    missing = [n for n in names if n not in found]
    if missing:
        raise InvalidField("job", f"no job named {', '.join(map(repr, missing))}")
    return Q(job__in=found.values())


def _job_anywhere(names: list[str]) -> Q:
    """Several aliases: a job's id is its alias's, so the filter names the jobs; a name
    no alias has is refused."""
    found: set[str] = set()
    for where in aliases():
        found.update(Job.objects.using(where).filter(name__in=names).values_list("name", flat=True))
    missing = [n for n in names if n not in found]
    if missing:
        raise InvalidField("job", f"no job named {', '.join(map(repr, missing))}")
    return Q(job__name__in=names)


def _queue(value: str) -> Q:
    return Q(queue__in=listed(value, "queue"))


def _error_type(value: str) -> Q:
    try:
        return error_type_condition(listed(value, "error_type"))
    except SelectionError as exc:
        raise InvalidField("error_type", exc.message) from None


_FILTERS = {
    "status": _status,
    "job": _job,
    "queue": _queue,
    "error_type": _error_type,
    "created_after": lambda v: Q(created_at__gte=instant(v, "created_after")),
    "created_before": lambda v: Q(created_at__lt=instant(v, "created_before")),
}
