"""List filters that stay cheap on a table of millions of runs.

Django's ``AllValuesFieldListFilter`` runs ``SELECT DISTINCT`` over the whole
table on every page view. These filters offer the values seen among the most
recent runs instead, and still accept any value in the query string
(``?error_type=http.503``, ``?error_type=http.*``).
"""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.db.models import QuerySet

from django_strait.models import Job
from django_strait.services.replaying import SelectionError, error_type_condition

#: How many of the newest runs the offered choices are read from.
SAMPLE_SIZE = 2000


class RecentValuesFilter(admin.SimpleListFilter):
    """Offer the distinct values of ``field`` among the newest runs of the list."""

    field = ""

    def lookups(self, request, model_admin) -> list[tuple[str, str]]:
        sample = model_admin.get_queryset(request).order_by("-pk")[:SAMPLE_SIZE]
        seen = {v for v in sample.values_list(self.field, flat=True) if v}
        return [(v, v) for v in sorted(seen | set(self.extra_values(seen, sample.db)))]

    def has_output(self) -> bool:
        # Django drops a filter with no choices, and its value with it: keep a value
        # given in the URL even when the newest runs do not offer it.
        return self.value() is not None or super().has_output()

    def extra_values(self, seen: set[str], using: str) -> Iterable[str]:
        """Return more choices to offer besides the values seen (on alias ``using``)."""
        return ()

    def queryset(self, request, queryset: QuerySet) -> QuerySet:
        if self.value() is None:
            return queryset
        return queryset.filter(**{self.field: self.value()})


class QueueFilter(RecentValuesFilter):
    title = "queue"
    parameter_name = "queue"
    field = "queue"

    def extra_values(self, seen: set[str], using: str) -> Iterable[str]:
        # Jobs are few; their queues are worth offering even before any run used them.
        return Job.objects.using(using).values_list("queue", flat=True).distinct()


class ErrorTypeFilter(RecentValuesFilter):
    """Error type, exact (``http.503``) or by prefix (``http.*``)."""

    title = "error type"
    parameter_name = "error_type"
    field = "error_type"

    def extra_values(self, seen: set[str], using: str) -> Iterable[str]:
        # Every dotted prefix: auth.token.expired offers auth.* and auth.token.*.
        for value in seen:
            parts = value.split(".")
            for end in range(1, len(parts)):
                yield ".".join(parts[:end]) + ".*"

    def queryset(self, request, queryset: QuerySet) -> QuerySet:
        if self.value() is None:
            return queryset
        try:
            return queryset.filter(error_type_condition([self.value()]))
        except SelectionError as exc:
            raise IncorrectLookupParameters(exc.message) from exc


class ByNameFilter(admin.RelatedFieldListFilter):
    """A related row's filter (a run's job, a workflow run's workflow) that reads only names.

    Django's reads each related row whole to show it: one that cannot be read
    (JSON nested 5,000 deep in a job's headers) would fail every page of the list.
    """

    def field_choices(self, field, request, model_admin) -> list[tuple[object, str]]:
        related = field.related_model._default_manager.using(model_admin.get_queryset(request).db)
        return list(related.order_by("name").values_list("pk", "name"))


class ByNameOfListedFilter(ByNameFilter):
    """``ByNameFilter`` offering only the related rows the list's own rows name.

    The dead-letter list's job filter: the jobs that have dead letters, not every job.
    """

    def field_choices(self, field, request, model_admin) -> list[tuple[object, str]]:
        rows = model_admin.get_queryset(request)
        named = rows.order_by().values_list(f"{self.field_path}__pk", flat=True).distinct()
        related = field.related_model._default_manager.using(rows.db)
        return list(related.filter(pk__in=named).order_by("name").values_list("pk", "name"))
