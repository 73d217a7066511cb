"""What a person may do to runs in the admin: replay, cancel and discard, through transitions.

Each has its own permission (``Meta.permissions`` of ``JobRun``), checked for the
dead-letter proxy too; a run's page shows a button for each transition its status
allows, and one to replay it with an edited payload.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse

from django_strait import transitions
from django_strait.admin import actions
from django_strait.admin.aliases import alias_for_key
from django_strait.admin.forms import ReplayPayloadForm
from django_strait.models import JobRun
from django_strait.rules.states import Transition
from django_strait.services.triggering import TriggerError
from django_strait.storage import backend


@dataclass(frozen=True, slots=True)
class RunButton:
    """A transition a person may ask of one run from its page."""

    transition: Transition
    #: The ``JobRun`` permission it needs (``replay``, ``cancel`` or ``discard``).
    permission: str
    label: str
    help: str
    move: Callable[[QuerySet[JobRun], str], actions.ActionResult]


#: The buttons by the name in their URL; each shows only where its transition may start.
RUN_BUTTONS: dict[str, RunButton] = {
    "replay": RunButton(
        Transition.REPLAY, "replay", "Replay", "Queue it again with a fresh attempt budget.",
        lambda runs, by: actions.replay_runs(runs, by=by),
    ),
    "cancel": RunButton(
        Transition.CANCEL, "cancel", "Cancel", "Stop it; a running attempt finishes first.",
        lambda runs, by: actions.cancel_runs(runs),
    ),
    "discard": RunButton(
        Transition.DROP, "discard", "Discard", "Drop it; it keeps its errors and can be replayed.",
        lambda runs, by: actions.discard_runs(runs, by=by),
    ),
}  # fmt: skip


def pretty_text(value: Any) -> str:
    """Return a JSON value as indented text."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


class RunMoves:
    """The run admin's transitions: its actions, its pages' buttons and their views."""

    opts: Any
    admin_site: Any
    message_user: Callable[..., None]

    def has_replay_permission(self, request: HttpRequest) -> bool:
        """Return whether the user may replay runs (``django_strait.replay_jobrun``)."""
        return request.user.has_perm("django_strait.replay_jobrun")

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        """Return whether the user may cancel runs (``django_strait.cancel_jobrun``)."""
        return request.user.has_perm("django_strait.cancel_jobrun")

    def has_discard_permission(self, request: HttpRequest) -> bool:
        """Return whether the user may discard runs (``django_strait.discard_jobrun``)."""
        return request.user.has_perm("django_strait.discard_jobrun")

    def has_permission_to(self, request: HttpRequest, name: str) -> bool:
        """Return whether the user holds the permission called ``name`` (replay, ...)."""
        return getattr(self, f"has_{name}_permission")(request)

    @admin.action(description="Replay selected runs (fresh attempt budget)", permissions=["replay"])
    def replay_selected(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._report(request, actions.replay_runs(queryset, by=request.user.get_username()))

    @admin.action(description="Cancel selected runs", permissions=["cancel"])
    def cancel_selected(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._report(request, actions.cancel_runs(queryset))

    @admin.action(description="Discard selected runs", permissions=["discard"])
    def discard_selected(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._report(request, actions.discard_runs(queryset, by=request.user.get_username()))

    def _report(self, request: HttpRequest, result: actions.ActionResult) -> None:
        self.message_user(request, result.message(), level=result.level)

    # One run's page: buttons for the transitions its status allows.

    def get_urls(self) -> list:
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"
        wrap = self.admin_site.admin_view
        own = [
            path(
                "<path:object_id>/move/<str:name>/",
                wrap(self.transition_view),
                name=f"{prefix}_move",
            ),
            path(
                "<path:object_id>/replay-with-payload/",
                wrap(self.replay_payload_view),
                name=f"{prefix}_replay_payload",
            ),
        ]
        return own + super().get_urls()

    def _buttons(self, request: HttpRequest, object_id: str) -> list[dict[str, str]]:
        status = self._status(object_id)
        if status is None:
            return []
        prefix = f"admin:{self.opts.app_label}_{self.opts.model_name}"
        buttons = [
            {
                "label": b.label,
                "help": b.help,
                "url": reverse(f"{prefix}_move", args=[object_id, name]),
            }
            for name, b in RUN_BUTTONS.items()
            if status in b.transition.sources and self.has_permission_to(request, b.permission)
        ]
        if status in Transition.REPLAY.sources and self.has_replay_permission(request):
            url = reverse(f"{prefix}_replay_payload", args=[object_id])
            help = "Queue it again with a payload you edit first."
            buttons.append(
                {"label": "Replay with edited payload", "help": help, "url": url, "get": "1"}
            )
        return buttons

    def _status(self, object_id: str) -> str | None:
        if not str(object_id).isdigit():
            return None
        runs = JobRun.objects.using(alias_for_key(object_id))
        return runs.filter(pk=object_id).values_list("status", flat=True).first()

    def transition_view(self, request: HttpRequest, object_id: str, name: str) -> HttpResponse:
        """Replay, cancel or discard one run (POST), then show its page again."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if name not in RUN_BUTTONS:
            raise Http404(f"no transition {name!r}; allowed: {', '.join(RUN_BUTTONS)}")
        if not self.has_permission_to(request, RUN_BUTTONS[name].permission):
            raise PermissionDenied
        if self._status(object_id) is None:
            raise Http404(f"no run {object_id}")
        runs = JobRun.objects.using(alias_for_key(object_id)).filter(pk=object_id)
        result = RUN_BUTTONS[name].move(runs, request.user.get_username())
        self._report(request, result)
        # The run's own page, not the dead-letter one: after a replay it is no dead letter.
        return redirect("admin:django_strait_jobrun_change", object_id)

    def replay_payload_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Replay one run with a payload edited on a form (GET shows it, POST replays)."""
        if not self.has_replay_permission(request):
            raise PermissionDenied
        if not str(object_id).isdigit():
            raise Http404(f"no run {object_id!r}")
        run = get_object_or_404(JobRun.objects.using(alias_for_key(object_id)), pk=object_id)
        if request.method == "POST":
            form = ReplayPayloadForm(request.POST)
            if form.is_valid() and self._replay_with(request, run, form):
                return redirect("admin:django_strait_jobrun_change", run.pk)
        else:
            form = ReplayPayloadForm(initial={"payload": pretty_text(run.payload)})
        context = {
            **self.admin_site.each_context(request),
            "title": f"Replay run {run.pk} with an edited payload",
            "opts": self.opts,
            "run": run,
            "form": form,
        }
        return TemplateResponse(request, "admin/django_strait/replay_payload_form.html", context)

    def _replay_with(self, request: HttpRequest, run: JobRun, form: ReplayPayloadForm) -> bool:
        try:
            transitions.replay(
                run.pk,
                by=request.user.get_username(),
                payload=form.cleaned_data["payload"],
                storage=backend(run._state.db),
            )
        except TriggerError as exc:
            form.add_trigger_error(exc)
            return False
        except transitions.InvalidTransition as exc:
            form.add_error(None, str(exc))
            return False
        self.message_user(
            request, f"Replayed run {run.pk} with the edited payload.", messages.SUCCESS
        )
        return True
