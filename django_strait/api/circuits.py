"""Circuits: list them with the health of their endpoints, and reset (close) one."""

from __future__ import annotations

import logging

from django.db.models import QuerySet
from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.response import Response

from django_strait.api.auth import Rule
from django_strait.api.base import StraitAPIView, who
from django_strait.api.filters import PAGING, refuse_unknown
from django_strait.api.pagination import Keyset, page_serializer, paginate, shown
from django_strait.api.schema import documented, errors, paging_parameters
from django_strait.api.serializers import CircuitResetSerializer, CircuitSerializer
from django_strait.circuits import reset_circuit
from django_strait.models import EndpointCircuit
from django_strait.models.health import health_subqueries

logger = logging.getLogger(__name__)

# Reading circuits, health and budgets needs no scope of its own: whoever may read the
# jobs may read what holds their runs back.
READ = Rule("jobs:read", "django_strait.view_endpointcircuit")
RESET = Rule("circuits:reset", "django_strait.reset_endpointcircuit")

#: In the order the endpoints were first seen; the id is the keyset.
FIRST_SEEN = Keyset("id")
CircuitPage = page_serializer("CircuitPage", CircuitSerializer)


def with_health(circuits: QuerySet[EndpointCircuit]) -> QuerySet[EndpointCircuit]:
    """Return ``circuits`` with the score and level of the same URL's health row."""
    score, level = health_subqueries()
    return circuits.annotate(health_score=score, health_level=level)


class CircuitListView(StraitAPIView):
    """GET circuits/: every endpoint's circuit, with its health score and level."""

    rules = {"GET": READ}

    @documented(
        operation_id="circuits_list",
        parameters=paging_parameters(),
        responses={200: CircuitPage, **errors(400)},
    )
    def get(self, request: Request) -> Response:
        refuse_unknown(request.query_params, PAGING)
        page = paginate(with_health(EndpointCircuit.objects.all()), FIRST_SEEN, request)
        data = shown(CircuitSerializer, page.rows)
        return Response({"results": data, "next": page.next_url})


class CircuitResetView(StraitAPIView):
    """POST circuits/reset/: close an endpoint's circuit and forget its failures."""

    rules = {"POST": RESET}

    @documented(
        operation_id="circuits_reset",
        request=CircuitResetSerializer,
        responses={200: CircuitSerializer, **errors(400, 404, 413, 415)},
    )
    def post(self, request: Request) -> Response:
        body = CircuitResetSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        url = body.validated_data["endpoint_url"]
        if not EndpointCircuit.objects.filter(endpoint_url=url).exists():
            raise exceptions.NotFound(
                f"no circuit for {url!r}; allowed: an endpoint URL that circuits/ lists"
            )
        changed = reset_circuit(url)
        logger.info("api: circuit of %s reset by %s (changed: %s)", url, who(request), changed)
        circuit = with_health(EndpointCircuit.objects.filter(endpoint_url=url)).get()
        return Response(CircuitSerializer(circuit).data)
