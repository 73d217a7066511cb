"""Completion webhooks: a run's deliveries, and redelivering one."""

from __future__ import annotations

import logging

from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.response import Response

from django_strait.api.auth import Rule
from django_strait.api.base import MAX_ID, StraitAPIView, find_run, who
from django_strait.api.pagination import shown
from django_strait.api.schema import documented, errors
from django_strait.api.serializers import DeliveryListSerializer, DeliverySerializer
from django_strait.database import alias_for_id
from django_strait.models import WebhookDelivery
from django_strait.storage import backend
from django_strait.storage.rows import read
from django_strait.webhooks.redelivery import redeliver

logger = logging.getLogger(__name__)

READ = Rule("runs:read", "django_strait.view_webhookdelivery")
REDELIVER = Rule("runs:write", "django_strait.redeliver_webhookdelivery")


class RunDeliveriesView(StraitAPIView):
    """GET runs/<id>/deliveries/: the completion webhooks a run owes or sent, oldest first."""

    rules = {"GET": READ}

    @documented(
        operation_id="runs_deliveries", responses={200: DeliveryListSerializer, **errors(404)}
    )
    def get(self, request: Request, pk: int) -> Response:
        run = find_run(pk, self.runs())
        deliveries = WebhookDelivery.objects.using(run._state.db).filter(run=run).order_by("id")
        deliveries = read(deliveries, stand_ins=True)
        return Response({"results": shown(DeliverySerializer, deliveries.rows)})


class RedeliverView(StraitAPIView):
    """POST deliveries/<id>/redeliver/: send a delivery again (same delivery id), budget reset."""

    rules = {"POST": REDELIVER}

    @documented(
        operation_id="deliveries_redeliver",
        request=None,
        responses={200: DeliverySerializer, **errors(404)},
    )
    def post(self, request: Request, pk: int) -> Response:
        # Several aliases: the delivery's id says which one it lives on.
        where = alias_for_id(pk) if pk <= MAX_ID else None
        if where is None or not self._within_scope(pk, where) or not self._redeliver(pk, where):
            raise exceptions.NotFound(f"no webhook delivery with id {pk}")
        logger.info("api: delivery %s redelivered by %s", pk, who(request))
        return Response(DeliverySerializer(WebhookDelivery.objects.using(where).get(pk=pk)).data)

    def _redeliver(self, pk: int, where: str) -> bool:
        return bool(redeliver([pk], by=who(self.request), storage=backend(where)))

    def _within_scope(self, pk: int, where: str) -> bool:
        # A workflow's delivery has no run, hence no queue: only an unlimited key sees it.
        if not self.scope.limited:
            return True
        found = WebhookDelivery.objects.using(where).filter(pk=pk)
        return self.scope.only(found, field="run__queue").exists()
