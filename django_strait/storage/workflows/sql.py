"""The workflow statements' SQL: tables named once, id lists as each backend writes them.

The hot statements of a wide DAG are written once, as templates (tables as
``{steprun}``, ``{jobrun}``, ``{job}``, ``{step}``, ``{workflow}``,
``{workflowrun}``; each ``{in}`` filled by the next :class:`Ids` of the
parameters): the ORM would build each anew per record batch, which costs more
than the statement. How an id list is written is the backend's own
(:class:`Statements`: ``storage.orm.workflows`` and ``storage.postgres.workflows``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connections
from django.utils import dateparse, timezone

from django_strait.models import Job, JobRun, Workflow, WorkflowRun, WorkflowStep, WorkflowStepRun


@dataclass(frozen=True, slots=True)
class Ids:
    """Ids for one ``{in}`` of a statement."""

    values: Sequence[int]


class Statements:
    """How one backend writes a template's ``{in}`` and its :class:`Ids` (see the subclasses)."""

    def __init__(self) -> None:
        #: (the connection's quoting, template) -> its text with the tables named (and the
        #: lists, where they are one parameter).
        self._rendered: dict[tuple[type, str], str] = {}

    def membership(self) -> str:
        """What ``{in}`` becomes when a list is one parameter; "{in}" when it is not."""
        raise NotImplementedError

    def ids(self, values: Sequence[int]) -> tuple[list[Any], int | None]:
        """The parameters of one id list, and how many placeholders it needs (None: one, already written)."""
        raise NotImplementedError

    def statement(self, connection: Any, template: str, params: Sequence) -> tuple[str, list]:
        """``template`` as SQL for ``connection``, with its parameters flattened."""
        key = (type(connection.ops), template)
        text = self._rendered.get(key)
        if text is None:
            text = _tables(connection, template, self.membership())
            self._rendered[key] = text
        flat: list = []
        lists: list[int] = []
        for param in params:
            if not isinstance(param, Ids):
                flat.append(param)
                continue
            values, placeholders = self.ids(param.values)
            flat += values
            if placeholders is not None:
                lists.append(placeholders)
        if lists:
            text = text.replace("{in}", "{}").format(
                *(f"IN ({', '.join(['%s'] * n)})" for n in lists)
            )
        return text, flat


def _tables(connection: Any, template: str, membership: str) -> str:
    quote = connection.ops.quote_name
    return template.format(
        steprun=quote(WorkflowStepRun._meta.db_table),
        jobrun=quote(JobRun._meta.db_table),
        job=quote(Job._meta.db_table),
        step=quote(WorkflowStep._meta.db_table),
        workflow=quote(Workflow._meta.db_table),
        workflowrun=quote(WorkflowRun._meta.db_table),
        **{"in": membership},
    )


@dataclass(frozen=True, slots=True)
class Db:
    """The database a workflow move runs on, and how its backend writes statements."""

    alias: str
    statements: Statements

    def rows(self, template: str, params: Sequence) -> list[tuple]:
        """Run ``template``; return its rows."""
        connection = connections[self.alias]
        with connection.cursor() as cursor:
            cursor.execute(*self.statements.statement(connection, template, params))
            return cursor.fetchall() if cursor.description else []

    def update(self, template: str, params: Sequence) -> int:
        """Run the UPDATE ``template``; return how many rows it changed."""
        connection = connections[self.alias]
        with connection.cursor() as cursor:
            cursor.execute(*self.statements.statement(connection, template, params))
            return cursor.rowcount


def as_datetime(value: dt.datetime | str) -> dt.datetime:
    """A timestamp read by raw SQL as text, as the ORM gives it: aware in UTC with
    ``USE_TZ`` (SQLite's text is naive UTC), naive in the connection's zone without."""
    if isinstance(value, str):
        value = dateparse.parse_datetime(value)
        if not settings.USE_TZ:
            return value.replace(tzinfo=None)  # PostgreSQL wrote it in the connection's zone
        if timezone.is_naive(value):
            value = timezone.make_aware(value, dt.UTC)
    return value
