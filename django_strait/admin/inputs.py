"""What the admin takes from a request, within bounds: JSON typed into forms, and query strings.

Every model admin of django-strait has :class:`GuardedInput` first among its
bases. It gives each ``JSONField`` of a model the :class:`BoundedJSONField`,
which reads the text as every surface reads outside JSON
(:func:`django_strait.rules.json_text.loads`: at most 64 levels deep, no lone
surrogate, no NUL, numbers in a float's range) and shows a refusal on the field;
an empty box is the model field's default (``[]``, ``{}``), or ``None`` where
the column allows it. Every page of the admin (its lists, forms and own views)
answers 400, naming the parameter, to the NUL character in the query string
(PostgreSQL compares no text with it) and to a time no column holds in a date
filter, and 404 to NUL in the path; a selection of rows for an action must be
ids of the model.
"""

from __future__ import annotations

import copy
import datetime as dt
import functools
import json
from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.options import TO_FIELD_VAR
from django.core.exceptions import FieldDoesNotExist, ValidationError
from django.db import models
from django.forms.fields import InvalidJSONInput, JSONString
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest
from django.urls import URLPattern
from django.utils.dateparse import parse_datetime

from django_strait.rules.json_text import JSONRefused, loads

NUL = "\x00"


def read_json(text: str) -> Any:
    """Return the JSON ``text`` holds, or raise a ValidationError saying what is refused."""
    try:
        return loads(text)
    except JSONRefused as exc:
        raise forms.ValidationError(f"This JSON {exc.message}.", code="refused") from None
    except json.JSONDecodeError as exc:
        raise forms.ValidationError(
            f"Not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}.", code="invalid"
        ) from None


class BoundedJSONField(forms.JSONField):
    """A JSON document typed into the admin, read within the bounds of every surface.

    ``empty``: what an empty box means (the model field's default, or None).
    """

    def __init__(self, *, empty: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.empty = empty

    def to_python(self, value: Any) -> Any:
        if self.disabled:
            return value
        if value in self.empty_values:
            return copy.deepcopy(self.empty)
        if isinstance(value, list | dict | int | float | JSONString):
            return value
        parsed = read_json(value)
        return JSONString(parsed) if isinstance(parsed, str) else parsed

    def bound_data(self, data: Any, initial: Any) -> Any:
        # What a refused form shows again: the text as typed, never a value read past the bounds.
        if self.disabled:
            return initial
        if data is None:
            return None
        try:
            return loads(data)
        except ValueError:
            return InvalidJSONInput(data)


#: The widest UTC offset PostgreSQL takes in a timestamp (Python's reaches 23:59).
WIDEST_OFFSET = dt.timedelta(hours=15, minutes=59)


def query_problem(request: HttpRequest, model: type[models.Model]) -> str | None:
    """Say what the query string holds that no page takes, or None.

    NUL anywhere; an empty ``_to_field``; a time for a date field of ``model``
    that no database column holds (an offset past 15:59, a moment past year 9999 in UTC).
    """
    for name, values in request.GET.lists():
        if NUL in name or any(NUL in v for v in values):
            shown = name.replace(NUL, "\\u0000")
            return f"The query parameter {shown!r} must not contain the NUL character (\\u0000)."
        for value in values:
            if _is_date_field(model, name) and not _storable_time(value):
                return (
                    f"The query parameter {name!r} is {value[:60]!r}: a time no database holds; "
                    "allowed: a time from year 1 to 9999 in UTC, its offset at most ±15:59."
                )
    if request.GET.get(TO_FIELD_VAR, None) == "":
        return f"The query parameter {TO_FIELD_VAR!r} must name a field; it is empty."
    return None


def _is_date_field(model: type[models.Model], name: str) -> bool:
    try:
        field = model._meta.get_field(name.split("__")[0])
    except FieldDoesNotExist:
        return False
    return isinstance(field, models.DateField)  # DateTimeField is one too


def _storable_time(value: str) -> bool:
    try:
        moment = parse_datetime(value)
    except ValueError:
        return True  # not a time at all: the list says so itself (?e=1)
    if moment is None or moment.tzinfo is None:
        return True
    offset = moment.utcoffset() or dt.timedelta()
    try:
        moment.astimezone(dt.UTC)
    except OverflowError:
        return False
    return abs(offset) <= WIDEST_OFFSET


def guarded(
    view: Callable[..., HttpResponse], model: type[models.Model]
) -> Callable[..., HttpResponse]:
    """Wrap an admin view: refuse NUL in its path (404) and a bad query string (400) first."""

    @functools.wraps(view)
    def guard(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        for name, value in kwargs.items():
            if isinstance(value, str) and NUL in value:
                raise Http404(f"no {name} holds the NUL character (\\u0000)")
        problem = query_problem(request, model)
        if problem is not None:
            return HttpResponseBadRequest(problem, content_type="text/plain; charset=utf-8")
        return view(request, *args, **kwargs)

    return guard


def row_id(model: type[models.Model], value: str) -> Any | None:
    """Return ``value`` as an id of ``model`` (its primary key's type and range), or None."""
    try:
        return model._meta.pk.clean(value, None)  # type: ignore[union-attr]
    except ValidationError:
        return None


class GuardedInput:
    """A model admin mixin (first among the bases): its forms and pages take input within bounds."""

    @property
    def urls(self) -> list[Any]:
        """Every page of this model admin, also its own views, behind :func:`guarded`."""
        patterns = self.get_urls()  # type: ignore[attr-defined]
        for pattern in patterns:
            if isinstance(pattern, URLPattern):
                pattern.callback = guarded(pattern.callback, self.model)  # type: ignore[attr-defined]
        return patterns

    def formfield_for_dbfield(
        self, db_field: models.Field, request: HttpRequest, **kwargs: Any
    ) -> forms.Field | None:
        """A model's JSON field is a :class:`BoundedJSONField`; empty is its default."""
        if isinstance(db_field, models.JSONField):
            kwargs.setdefault("form_class", BoundedJSONField)
            if not db_field.null and db_field.has_default():
                kwargs.setdefault("empty", db_field.get_default())
        return super().formfield_for_dbfield(db_field, request, **kwargs)  # type: ignore[misc]

    def response_action(
        self, request: HttpRequest, queryset: Any, *args: Any, **kwargs: Any
    ) -> HttpResponse | None:
        """Run the chosen action, if every selected row is named by an id of this model."""
        for value in request.POST.getlist(ACTION_CHECKBOX_NAME):
            if row_id(self.model, value) is None:  # type: ignore[attr-defined]
                return HttpResponseBadRequest(
                    f"{ACTION_CHECKBOX_NAME}: {value[:100]!r} is not the id of a "
                    f"{self.model._meta.verbose_name}; allowed: ids of the rows listed.",  # type: ignore[attr-defined]
                    content_type="text/plain; charset=utf-8",
                )
        # Django 6.1 passes action_location; 5.2 does not.
        return super().response_action(request, queryset, *args, **kwargs)  # type: ignore[misc]
