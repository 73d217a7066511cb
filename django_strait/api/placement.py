"""Several aliases in the REST API: which aliases a list reads, where a row by id lives.

With one alias nothing here changes an answer: no ``database`` parameter, no
``"database"`` key. With several (``STRAIT["DATABASES"]``):

- an action or a read by id goes to the alias the id names
  (:func:`django_strait.database.alias_for_id`); an id of no alias is a 404;
- a list reads every alias and merges the pages by the list's own order (its
  keyset: ids are unique across the aliases, so one cursor pages them all);
  ``?database=ALIAS`` reads that alias only;
- each run (and job) says where it lives: ``"database": ALIAS``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drf_spectacular.utils import OpenApiParameter
from rest_framework import exceptions

from django_strait.api.errors import InvalidField
from django_strait.database import alias_for_id, alias_for_queue, aliases, placed
from django_strait.models import Job
from django_strait.storage import Storage, backend

#: The query parameter that narrows a list to one alias (several aliases only).
DATABASE = "database"
DATABASE_PARAMETER = OpenApiParameter(
    DATABASE, str, description="Several databases only: the alias to list (default: every alias)."
)


def placement_params() -> tuple[str, ...]:
    """The query parameters a list takes besides its filters and paging: ``database``
    with several aliases, none with one (where it stays an unknown parameter)."""
    return (DATABASE,) if placed() else ()


def listed_aliases(params: Mapping[str, str]) -> tuple[str, ...] | None:
    """The aliases a list reads: the one ``?database=`` names, else every alias.

    None with one alias: the list reads it as it always did.
    """
    if not placed():
        return None
    names = aliases()
    value = params.get(DATABASE)
    if value is None:
        return names
    if value not in names:
        allowed = ", ".join(names)
        raise InvalidField(DATABASE, f"unknown database {value!r}; allowed: {allowed}")
    return (value,)


def alias_of(pk: int, noun: str = "run") -> str:
    """The alias row ``pk`` lives on, or a 404 naming it (an id of no alias)."""
    where = alias_for_id(pk)
    if where is None:
        raise exceptions.NotFound(f"no {noun} with id {pk}")
    return where


def storage_of(pk: int, noun: str = "run") -> Storage:
    """The storage backend of the alias row ``pk`` lives on (a 404 for an id of none)."""
    return backend(alias_of(pk, noun))


def placed_job(serializer: Any) -> Job:
    """Save the new job a ``JobSerializer`` checked: on its queue's alias with several
    (its runs live there), refusing a name another alias's job already has."""
    if not placed():
        return serializer.save()
    data = dict(serializer.validated_data)
    name = data["name"]
    for where in aliases():
        if Job.objects.using(where).filter(name=name).exists():
            raise InvalidField("name", f"a job named {name!r} exists (on database {where!r})")
    where = alias_for_queue(data.get("queue", Job._meta.get_field("queue").default))
    # Its project, if any, is the fleet's: read on the control database (the router).
    serializer.instance = Job.objects.db_manager(where).create(**data)
    return serializer.instance


def stays_on_its_alias(job: Job, queue: str) -> None:
    """Refuse (400) moving a job to a queue of another alias: its rows would not follow."""
    if placed() and alias_for_queue(queue) != job._state.db:
        raise InvalidField(
            "queue",
            f"{queue!r} lives on database {alias_for_queue(queue)!r} (STRAIT['QUEUE_DATABASES']) "
            f"and the job on {job._state.db!r}; allowed: a queue of {job._state.db!r} "
            "(a job's rows do not move between databases)",
        )


class LocatedMixin:
    """A serializer whose rows say their alias (``"database"``) when there are several."""

    def to_representation(self, instance: Any) -> Any:
        data = super().to_representation(instance)  # type: ignore[misc]
        if placed():
            where = alias_for_id(getattr(instance, "pk", None)) or instance._state.db
            if where:
                data[DATABASE] = where
        return data
