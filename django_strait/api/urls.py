"""Mount with ``path("api/strait/", include("django_strait.api.urls"))``."""

from __future__ import annotations

from django.urls import path, re_path

from django_strait.api import (
    budgets,
    circuits,
    deadletters,
    errors,
    health,
    jobs,
    runs,
    schema,
    webhooks,
    workflows,
)

app_name = "django_strait_api"

urlpatterns = [
    path("jobs/", jobs.JobListView.as_view(), name="jobs"),
    # Any string, not a slug: a name that cannot exist still gets a JSON 404 naming it.
    path("jobs/<str:name>/", jobs.JobView.as_view(), name="job"),
    path("jobs/<str:name>/pause/", jobs.PauseView.as_view(), name="job-pause"),
    path("jobs/<str:name>/resume/", jobs.ResumeView.as_view(), name="job-resume"),
    path("jobs/<str:name>/trigger/", jobs.TriggerView.as_view(), name="trigger"),
    path("jobs/<str:name>/bulk-trigger/", jobs.BulkTriggerView.as_view(), name="bulk-trigger"),
    path("runs/", runs.RunListView.as_view(), name="runs"),
    path("runs/<int:pk>/", runs.RunView.as_view(), name="run"),
    path("runs/<int:pk>/cancel/", runs.CancelView.as_view(), name="run-cancel"),
    path("runs/<int:pk>/replay/", runs.ReplayView.as_view(), name="run-replay"),
    path("runs/<int:pk>/deliveries/", webhooks.RunDeliveriesView.as_view(), name="run-deliveries"),
    path(
        "deliveries/<int:pk>/redeliver/",
        webhooks.RedeliverView.as_view(),
        name="delivery-redeliver",
    ),
    path("dead-letters/", deadletters.DeadLetterListView.as_view(), name="dead-letters"),
    path(
        "dead-letters/replay/",
        deadletters.DeadLetterBulkReplayView.as_view(),
        name="dead-letters-replay",
    ),
    path(
        "dead-letters/<int:pk>/replay/",
        deadletters.DeadLetterReplayView.as_view(),
        name="dead-letter-replay",
    ),
    path(
        "dead-letters/<int:pk>/discard/",
        deadletters.DeadLetterDiscardView.as_view(),
        name="dead-letter-discard",
    ),
    path("circuits/", circuits.CircuitListView.as_view(), name="circuits"),
    path("circuits/reset/", circuits.CircuitResetView.as_view(), name="circuits-reset"),
    path("health/", health.HealthListView.as_view(), name="health"),
    path("budgets/", budgets.BudgetListView.as_view(), name="budgets"),
    path("budgets/<str:project>/", budgets.BudgetView.as_view(), name="budget"),
    path(
        "workflows/<str:name>/trigger/",
        workflows.WorkflowTriggerView.as_view(),
        name="workflow-trigger",
    ),
    path("workflow-runs/", workflows.WorkflowRunListView.as_view(), name="workflow-runs"),
    path("workflow-runs/<int:pk>/", workflows.WorkflowRunView.as_view(), name="workflow-run"),
    path(
        "workflow-runs/<int:pk>/cancel/",
        workflows.WorkflowRunCancelView.as_view(),
        name="workflow-run-cancel",
    ),
    path("schema/", schema.SchemaView.as_view(), name="schema"),
]

# Last: any other path under the mount answers 404 in the error shape, not Django's HTML page
# (e.g. runs/-1/, which the <int:pk> patterns do not match). Any path: "." stops at a
# newline, which a job name may hold encoded ((?s) would do, but reverse() refuses flags).
urlpatterns.append(re_path(r"^[\s\S]*$", errors.not_found, name="not-found"))
