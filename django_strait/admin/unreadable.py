"""Rows the admin cannot read whole: lists show them, their pages say which field, and a
person can fix or delete them.

Every Strait model admin reads its rows through :func:`django_strait.storage.rows.read`: a
list page shows a row that cannot be read (a timestamp of 'infinity', JSON nested
5,000 deep, a NaN, text that is not a choice) as its id, linked to its page, and
what cannot be read (``{% strait_result_list %}``); its page shows the row with the
bad fields empty and says which they are. Saving the page writes the fields the form
holds, and resets a bad field it does not hold (to empty, or its default) so that
the row can be read again; deleting it deletes it.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import ValidationError
from django.db.models import NOT_PROVIDED, DateTimeField, Model, QuerySet
from django.http import HttpRequest
from django.utils import timezone

from django_strait.storage.rows import Unreadable, read


def problems_of(row: Any) -> list[Unreadable]:
    """The problems of a row the admin read (none: it was read whole)."""
    return list(getattr(row, "unreadable", ()))


def say_problems(problems: list[Unreadable]) -> str:
    """What cannot be read, for a person: one clause per field."""
    return "; ".join(f"{p.field or 'the row'} {p.problem}" for p in problems)


class ReadsRowsAside:
    """A model admin mixin: lists and pages that survive any one row."""

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        base = super().get_changelist(request, **kwargs)  # type: ignore[misc]
        if issubclass(base, SetsAside):
            return base
        if base is ChangeList:
            return SetsAside
        # Below the admin's own change list, so that what it does with the rows after
        # Django's get_results (stats, sparklines) sees them read.
        return _changelists.setdefault(base, type(base.__name__, (base, SetsAside), {}))

    def get_object(self, request: HttpRequest, object_id: str, from_field: str | None = None):
        """The row, read or stood in for: a row with fields that cannot be read opens too."""
        queryset = self.get_queryset(request)  # type: ignore[attr-defined]
        model = queryset.model
        field = model._meta.pk if from_field is None else model._meta.get_field(from_field)
        try:
            object_id = field.to_python(object_id)
        except (ValidationError, ValueError):
            return None
        rows = _own_fields_too(queryset.filter(**{field.name: object_id}))
        found = read(rows, stand_ins=True).rows
        if not found:
            return None
        row = found[0]
        problems = problems_of(row)
        if problems and request.method == "GET":
            messages.error(
                request,
                f"This row cannot be read whole: {say_problems(problems)}. It is shown with "
                "those fields empty; saving it writes the form's fields and resets the others "
                "it names (to empty, or their default), or delete it.",
            )
        return row

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        """A choice of named rows (a job's project) reads their names only: one of them that
        cannot be read whole does not close the form."""
        field = super().formfield_for_foreignkey(db_field, request, **kwargs)  # type: ignore[misc]
        related = db_field.related_model
        if field is not None and any(f.name == "name" for f in related._meta.fields):
            field.queryset = field.queryset.only("pk", "name")
        return field

    def save_model(self, request: HttpRequest, obj: Model, form: Any, change: bool) -> None:
        reset = [
            name
            for p in problems_of(obj)
            if "." not in p.field
            and p.field not in form.changed_data
            and (name := _reset(obj, p.field))
        ]
        super().save_model(request, obj, form, change)  # type: ignore[misc]
        if reset:
            messages.warning(request, f"Reset what could not be read: {', '.join(reset)}.")


def _own_fields_too(rows: QuerySet) -> QuerySet:
    """``rows`` reading every field of their own (the page shows them all), and still only
    what it reads of related rows."""
    names, deferring = rows.query.deferred_loading
    if not deferring or not names:
        return rows
    return rows.defer(None).defer(*[name for name in names if "__" in name])


def _reset(obj: Model, name: str) -> str:
    """Give ``obj``'s unreadable field ``name`` a value it can hold; return its name ("": none)."""
    field = obj._meta.get_field(name)
    if field.null:
        value = None
    elif field.default is not NOT_PROVIDED:
        value = field.get_default()
    elif isinstance(field, DateTimeField):
        value = timezone.now()
    else:
        return ""
    setattr(obj, field.attname, value)  # type: ignore[union-attr]
    return name


def unshown(path: str, model: type[Model], shown: tuple[str, ...] = ("name",)) -> list[str]:
    """What to ``defer()`` of a related row a list shows only the ``shown`` fields of.

    Less to read, and a value there that cannot be read (a job's headers nested 5,000
    deep) does not set aside every row of the list that joins it.
    """
    return [
        f"{path}__{f.name}"
        for f in model._meta.concrete_fields
        if not f.primary_key and not f.is_relation and f.name not in shown
    ]


class ReadsInlineRowsAside:
    """An inline mixin: rows that cannot be read stand in their place (their bad fields
    empty), instead of failing the page they are shown on."""

    def get_formset(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> Any:
        formset = super().get_formset(request, obj, **kwargs)  # type: ignore[misc]
        return type(formset.__name__, (SetsAsideFormSet, formset), {})


class SetsAsideFormSet:
    """A model formset over rows read by :func:`django_strait.storage.rows.read`."""

    def get_queryset(self) -> Any:
        if not hasattr(self, "_strait_rows"):
            rows = super().get_queryset()  # type: ignore[misc]
            self._strait_rows = read(rows, stand_ins=True).rows
        return self._strait_rows


class SetsAside(ChangeList):
    """A change list whose rows are read one by one when one of them cannot be read."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        self.result_list = read(self.result_list, stand_ins=True).rows


_changelists: dict[type, type] = {}
