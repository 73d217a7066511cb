"""Endpoint health: every endpoint's score and level, optionally of some levels only."""

from __future__ import annotations

from collections.abc import Mapping

from drf_spectacular.utils import OpenApiParameter
from rest_framework.request import Request
from rest_framework.response import Response

from django_strait.api.auth import Rule
from django_strait.api.base import StraitAPIView
from django_strait.api.errors import InvalidField
from django_strait.api.filters import PAGING, listed, refuse_unknown
from django_strait.api.pagination import Keyset, page_serializer, paginate, shown
from django_strait.api.schema import documented, errors, paging_parameters
from django_strait.api.serializers import HealthSerializer
from django_strait.models import EndpointHealth, HealthLevel

# As circuits: whoever may read the jobs may read their endpoints' health.
READ = Rule("jobs:read", "django_strait.view_endpointhealth")

FIRST_SEEN = Keyset("id")
HealthPage = page_serializer("HealthPage", HealthSerializer)
LEVEL_PARAMETER = OpenApiParameter(
    "level", str, description=f"Comma-separated levels: {', '.join(HealthLevel.values)}."
)


def levels(params: Mapping[str, str]) -> list[str] | None:
    """Return the levels ``?level=`` asks for (None: all), refusing an unknown one."""
    value = params.get("level")
    if value is None:
        return None
    wanted = listed(value, "level")
    unknown = [v for v in wanted if v not in HealthLevel.values]
    if unknown:
        raise InvalidField(
            "level", f"unknown level {unknown[0]!r}; allowed: {', '.join(HealthLevel.values)}"
        )
    return wanted


class HealthListView(StraitAPIView):
    """GET health/: every endpoint's health score, level and the rates behind them."""

    rules = {"GET": READ}

    @documented(
        operation_id="health_list",
        parameters=[LEVEL_PARAMETER, *paging_parameters()],
        responses={200: HealthPage, **errors(400)},
    )
    def get(self, request: Request) -> Response:
        refuse_unknown(request.query_params, ("level", *PAGING))
        rows = EndpointHealth.objects.all()
        wanted = levels(request.query_params)
        if wanted is not None:
            rows = rows.filter(level__in=wanted)
        page = paginate(rows, FIRST_SEEN, request)
        data = shown(HealthSerializer, page.rows)
        return Response({"results": data, "next": page.next_url})
