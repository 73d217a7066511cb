"""The dead-letter queue: list, replay one, replay many by filter, discard."""

from __future__ import annotations

import logging
from typing import Any

from rest_framework.request import Request
from rest_framework.response import Response

from django_strait import transitions
from django_strait.api.auth import Rule
from django_strait.api.base import StraitAPIView, find_run, who
from django_strait.api.errors import Conflict
from django_strait.api.filters import run_condition
from django_strait.api.pagination import paginate, shown
from django_strait.api.placement import listed_aliases, storage_of
from django_strait.api.runs import NEWEST_FIRST, RunPage, filter_parameters, replay, with_attempts
from django_strait.api.schema import documented, errors
from django_strait.api.serializers import (
    BulkReplaySerializer,
    DiscardSerializer,
    ReplayedSerializer,
    ReplaySerializer,
    RunSerializer,
    RunSummarySerializer,
)
from django_strait.database import alias
from django_strait.models import DeadLetter
from django_strait.storage import Storage, backend
from django_strait.transitions.people import REPLAY_BATCH_SIZE

logger = logging.getLogger(__name__)

READ = Rule("dlq:read", "django_strait.view_deadletter")
REPLAY = Rule("dlq:replay", "django_strait.replay_jobrun")
DISCARD = Rule("dlq:replay", "django_strait.discard_jobrun")

#: Runs read per page and replayed per statement by a bulk replay.
REPLAY_BATCH = REPLAY_BATCH_SIZE

DLQ_FILTERS = ("job", "queue", "error_type", "created_after", "created_before")


class DeadLetterListView(StraitAPIView):
    """GET dead-letters/: dead-lettered runs, newest first, filtered."""

    rules = {"GET": READ}

    @documented(
        operation_id="dead_letters_list",
        parameters=filter_parameters(DLQ_FILTERS),
        responses={200: RunPage, **errors(400)},
    )
    def get(self, request: Request) -> Response:
        params = request.query_params
        condition = run_condition(params, allowed=DLQ_FILTERS)
        runs = self.runs(DeadLetter.objects.filter(condition)).select_related("job")
        page = paginate(runs, NEWEST_FIRST, request, across=listed_aliases(params))
        data = shown(RunSummarySerializer, page.rows)
        return Response({"results": data, "next": page.next_url})


class DeadLetterReplayView(StraitAPIView):
    """POST dead-letters/<id>/replay/: queue one dead letter again, optionally with a new payload."""

    rules = {"POST": REPLAY}

    @documented(
        operation_id="dead_letters_replay",
        request=ReplaySerializer,
        responses={200: RunSerializer, **errors(400, 404, 409, 413, 415)},
    )
    def post(self, request: Request, pk: int) -> Response:
        return replay(request, pk, self.runs(DeadLetter.objects.all()))


class DeadLetterDiscardView(StraitAPIView):
    """POST dead-letters/<id>/discard/: drop a dead letter for good (it stays, as discarded)."""

    rules = {"POST": DISCARD}

    @documented(
        operation_id="dead_letters_discard",
        request=DiscardSerializer,
        responses={200: RunSerializer, **errors(400, 404, 409, 413, 415)},
    )
    def post(self, request: Request, pk: int) -> Response:
        find_run(pk, self.runs(DeadLetter.objects.all()))
        body = DiscardSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            transitions.discard(
                pk, by=who(request), reason=body.validated_data.get("reason", ""),
                storage=storage_of(pk),
            )  # fmt: skip
        except transitions.InvalidTransition as exc:
            raise Conflict.of(exc) from None
        return Response(RunSerializer(find_run(pk, with_attempts())).data)


class DeadLetterBulkReplayView(StraitAPIView):
    """POST dead-letters/replay/: replay every dead letter matching a filter, in batches."""

    rules = {"POST": REPLAY}

    @documented(
        operation_id="dead_letters_bulk_replay",
        request=BulkReplaySerializer,
        responses={200: ReplayedSerializer, **errors(400, 413, 415)},
    )
    def post(self, request: Request) -> Response:
        body = BulkReplaySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        runs = self.runs(DeadLetter.objects.filter(run_condition(_as_params(body.validated_data))))
        # Several aliases: every alias's (or ``?database=``'s), each by its own storage.
        replayed = sum(
            replay_in_batches(runs.using(where), by=who(request), storage=backend(where))
            for where in listed_aliases(request.query_params) or (alias(),)
        )
        logger.info("api: %s dead letters replayed by %s", replayed, who(request))
        return Response({"replayed": replayed})


def _as_params(filters: dict[str, Any]) -> dict[str, str]:
    """Return a bulk replay's filters in the query-string form ``run_condition`` reads."""
    params = {}
    for name in DLQ_FILTERS:
        value = filters.get(name)
        if isinstance(value, list):
            params[name] = ",".join(value)
        elif value is not None:
            params[name] = value.isoformat()
    return params


def replay_in_batches(runs: Any, *, by: str, storage: Storage | None = None) -> int:
    """Replay ``runs`` by keyset batches of ids, so a million never sit in memory at once."""
    replayed, last = 0, 0
    while True:
        ids = list(
            runs.filter(pk__gt=last).order_by("pk").values_list("pk", flat=True)[:REPLAY_BATCH]
        )
        if not ids:
            return replayed
        replayed += transitions.replay_many(ids, by=by, batch_size=REPLAY_BATCH, storage=storage)
        last = ids[-1]
