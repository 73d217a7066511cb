"""The admin over several databases: one list per alias, each row opened and moved on its own.

With ``STRAIT["DATABASES"]`` naming several aliases, the lists of the rows that
live with their jobs (jobs, runs, dead letters, webhook deliveries, workers)
read one alias at a time, chosen by a "database" filter (``?database=jobs2``;
the first alias when none is chosen) and say it in a "database" column. A row's
own page, its inlines, its buttons and the actions on it find its alias from its
id (:func:`django_strait.database.alias_for_id`), so a link from any list opens
it. With one alias nothing here takes part: no filter, no column, the same queries.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponseRedirect

from django_strait import database

#: The list's query parameter that names the alias it reads.
DATABASE_PARAMETER = "database"


def alias_for_key(key: object) -> str:
    """The alias of the row whose id is ``key`` (as a URL gives it); the first alias else.

    Not an id (text, a number beyond the aliases): the first alias, where the
    lookup then finds no row and the page says so, as with one database.
    """
    text = str(key)
    pk = int(text) if text.isascii() and text.isdigit() and len(text) < 20 else None
    return database.alias_for_id(pk) or database.alias()


def chosen_alias(request: HttpRequest) -> str:
    """The alias a list reads: its ``?database=`` when it is one of the aliases, else the first.

    A value that is no alias is refused by :class:`DatabaseFilter` (the list then
    says its filters are not valid); here it reads the first, so nothing fails.
    """
    names = database.aliases()
    chosen = request.GET.get(DATABASE_PARAMETER)
    return chosen if chosen in names else names[0]


def request_alias(request: HttpRequest) -> str:
    """The alias a request of a model admin reads.

    A row's own pages (``<id>/change/``, ``<id>/history/``, the run's buttons)
    carry its id in the URL: its alias. A list: the one its filter chose.
    """
    match = getattr(request, "resolver_match", None)
    key = match.kwargs.get("object_id") if match is not None else None
    return alias_for_key(key) if key is not None else chosen_alias(request)


class DatabaseFilter(admin.SimpleListFilter):
    """Which alias the list reads: one at a time, the first by default (no "All")."""

    title = "database"
    parameter_name = DATABASE_PARAMETER

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(name, name) for name in database.aliases()]

    def choices(self, changelist: Any) -> Any:
        current = self.value() or database.alias()
        for lookup, title in self.lookup_choices:
            yield {
                "selected": current == lookup,
                "query_string": changelist.get_query_string({self.parameter_name: lookup}),
                "display": title,
            }

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        value = self.value()
        if value is not None and value not in database.aliases():
            allowed = ", ".join(database.aliases())
            raise IncorrectLookupParameters(f"database: {value!r} is not one; allowed: {allowed}")
        return queryset  # the model admin's get_queryset reads the chosen alias already


class AcrossAliases:
    """A model admin mixin: with several aliases, a database filter and column, and each
    row read (and moved) on its own alias. Put it before ``admin.ModelAdmin``."""

    def get_list_filter(self, request: HttpRequest) -> Any:
        filters = super().get_list_filter(request)  # type: ignore[misc]
        return (DatabaseFilter, *filters) if database.placed() else filters

    def get_list_display(self, request: HttpRequest) -> Any:
        shown = super().get_list_display(request)  # type: ignore[misc]
        return (*shown, "database_name") if database.placed() else shown

    @admin.display(description="database")
    def database_name(self, row: Any) -> str:
        return row._state.db or "-"

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        rows = super().get_queryset(request)  # type: ignore[misc]
        return rows.using(request_alias(request)) if database.placed() else rows

    #: Whether the list's search takes a row id (then an id of another alias opens that alias's list).
    searches_ids = False

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        moved = self._alias_of_searched_id(request)
        if moved is not None:
            query = request.GET.copy()
            query[DATABASE_PARAMETER] = moved
            return HttpResponseRedirect(f"{request.path}?{query.urlencode()}")
        return super().changelist_view(request, extra_context)  # type: ignore[misc]

    def _alias_of_searched_id(self, request: HttpRequest) -> str | None:
        """The alias of the id searched for, when it is not the list's (None: stay)."""
        if not (self.searches_ids and database.placed()) or request.method != "GET":
            return None
        term = request.GET.get("q", "").strip()
        if not (term.isascii() and term.isdigit()) or len(term) >= 20:
            return None
        where = database.alias_for_id(int(term))
        return where if where is not None and where != chosen_alias(request) else None

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        """A form's choices of related rows are those of the row's alias, unless the
        router keeps the related model elsewhere (a job's project: the control database)."""
        if database.placed() and not database.on_control(db_field.related_model):
            kwargs.setdefault("using", request_alias(request))
        return super().formfield_for_foreignkey(db_field, request, **kwargs)  # type: ignore[misc]


class InlineOnRowsAlias:
    """An inline mixin: the rows shown on a row's page are read on that row's alias."""

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        rows = super().get_queryset(request)  # type: ignore[misc]
        return rows.using(request_alias(request)) if database.placed() else rows
