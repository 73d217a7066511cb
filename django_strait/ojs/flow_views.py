"""The OJS views of level 3 and the extensions: workflows, progress, the events stream.

Each one is an ``OjsView``: the same keys, scopes, queue limits, body checks and
error envelope as the binding's other endpoints (docs/ojs.md).
"""

from __future__ import annotations

from django.core.handlers.asgi import ASGIRequest
from django.http import HttpResponse, StreamingHttpResponse
from rest_framework.request import Request

from django_strait.ojs import errors, flows, progress, stream
from django_strait.ojs.views import _CANCEL, _ENQUEUE, _WORK, OjsView, _read, answer


class Workflows(OjsView):
    """``POST /ojs/v1/workflows``: create and start a chain, group or batch."""

    rules = {"POST": _ENQUEUE}

    def post(self, request: Request) -> HttpResponse:
        wanted = flows.plan(self.body())
        for queue, field in wanted.queues():
            self.within_scope(queue, field)
        wr = flows.create(wanted)
        body = flows.describe(wr)
        return answer(
            request, {"workflow": body}, 201, {"Location": f"/ojs/v1/workflows/{body['id']}"}
        )


class WorkflowDetail(OjsView):
    """``GET /ojs/v1/workflows/{id}`` and ``DELETE`` (cancel)."""

    rules = {"GET": _read("runs:read"), "DELETE": _CANCEL}

    def get(self, request: Request, workflow_id: str) -> HttpResponse:
        return answer(request, {"workflow": flows.describe(flows.find(workflow_id, self.scope))})

    def delete(self, request: Request, workflow_id: str) -> HttpResponse:
        wr = flows.find(workflow_id, self.scope)
        if wr.status in ("completed", "canceled"):
            state = flows.describe(wr)["state"]
            raise errors.conflict(
                f"workflow {workflow_id} is {state}: its jobs have all ended or it was "
                "cancelled, so there is nothing to cancel",
                state=state,
            )
        return answer(request, {"workflow": flows.describe(flows.cancel(wr))})


class JobProgress(OjsView):
    """``PUT /ojs/v1/jobs/{id}/progress`` (the worker holding the job) and ``GET``."""

    rules = {"GET": _read("runs:read"), "PUT": _WORK, "POST": _WORK}

    def get(self, request: Request, job_id: str) -> HttpResponse:
        return answer(request, progress.read(job_id, self.scope))

    def put(self, request: Request, job_id: str) -> HttpResponse:
        return answer(request, progress.report(job_id, self.body(), self.scope))

    post = put


class EventStream(OjsView):
    """``GET /ojs/v1/events/stream``: the events as Server-Sent Events, for a bounded time."""

    rules = {"GET": _read("runs:read")}

    def get(self, request: Request) -> HttpResponse:
        wanted = stream.Wanted.of(request.query_params)
        under_asgi = isinstance(request._request, ASGIRequest)
        frames = (stream.async_frames if under_asgi else stream.frames)(wanted, self.scope)
        response = StreamingHttpResponse(frames, content_type="text/event-stream")
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"
        return response
