"""A run's columns as the ORM would write them: for INSERTs that make many runs in one statement.

Every column a run is born with comes from a template run prepared by its
fields (``pre_save``, ``get_db_prep_save``), so no model default is ever copied
into SQL by hand, and a column added to ``JobRun`` is written without edits here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connections

from django_strait.models import JobRun


def prepared(template: JobRun, alias: str, leave_out: Sequence[str]) -> dict[str, Any]:
    """Each column of ``template`` but its primary key and ``leave_out`` (field names), prepared."""
    connection = connections[alias]
    return {
        f.column: f.get_db_prep_save(f.pre_save(template, add=True), connection)
        for f in JobRun._meta.concrete_fields
        if not f.primary_key and f.name not in leave_out
    }
