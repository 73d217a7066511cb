"""Endpoints the demo's HTTP jobs call: one flaky, one gone.

Plain Django views, so ``runserver`` serves them as well as the demo's own
little server. They are ``csrf_exempt`` because the caller is a machine
(Strait's worker), not a browser form.
"""

from __future__ import annotations

import json
import random

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

DEFAULT_FAIL_RATE = 0.3
#: Share of the 503 answers that also say ``Retry-After: 1``.
RETRY_AFTER_SHARE = 0.3


@csrf_exempt
@require_POST
def flaky(request: HttpRequest) -> JsonResponse:
    """Answer 503 a ``fail_rate`` fraction of the time (query string), else 200 JSON.

    With ``seed=S`` in the query string the coin depends only on S, the run id and
    the attempt (Strait's headers), so a demo run can be repeated exactly.
    """
    try:
        fail_rate = _fail_rate(request.GET.get("fail_rate"))
    except ValueError as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    coin = _coin(request)
    attempt = request.headers.get("Strait-Attempt", "")
    if coin.random() < fail_rate:
        response = JsonResponse(
            {"error": "temporarily unavailable", "attempt": attempt}, status=503
        )
        if coin.random() < RETRY_AFTER_SHARE:
            response["Retry-After"] = "1"
        return response
    return JsonResponse({"ok": True, "attempt": attempt, "received": _payload(request)})


@csrf_exempt
@require_POST
def gone(request: HttpRequest) -> JsonResponse:
    """Always answer 404: a non-retryable error, dead-lettered on the first attempt."""
    return JsonResponse({"error": "this endpoint was removed in v2"}, status=404)


def _fail_rate(raw: str | None) -> float:
    if raw is None:
        return DEFAULT_FAIL_RATE
    try:
        rate = float(raw)
    except ValueError:
        rate = -1.0
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"fail_rate: must be a number from 0 to 1, got {raw!r}")
    return rate


def _coin(request: HttpRequest) -> random.Random:
    seed = request.GET.get("seed")
    if seed is None:
        return random.Random()
    run_id = request.headers.get("Strait-Run-Id", "")
    attempt = request.headers.get("Strait-Attempt", "")
    return random.Random(f"{seed}:{run_id}:{attempt}")


def _payload(request: HttpRequest) -> object:
    try:
        return json.loads(request.body or b"null")
    except ValueError:
        # Not JSON (someone trying the endpoint with curl): echo nothing rather than fail.
        return None
