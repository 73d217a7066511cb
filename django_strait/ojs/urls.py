"""The OJS binding's paths: ``path("", include("django_strait.ojs.urls"))`` serves ``/ojs/...``.

No trailing slashes (OJS's paths have none, and a POST must not meet APPEND_SLASH).
"""

from django.urls import path, re_path

from django_strait.ojs import flow_views, views

app_name = "ojs"

urlpatterns = [
    path("ojs/manifest", views.Manifest.as_view(), name="manifest"),
    path("ojs/v1/health", views.Health.as_view(), name="health"),
    path("ojs/v1/jobs", views.Jobs.as_view(), name="jobs"),
    path("ojs/v1/jobs/batch", views.JobsBatch.as_view(), name="jobs-batch"),
    path("ojs/v1/jobs/<str:job_id>", views.JobDetail.as_view(), name="job"),
    path("ojs/v1/jobs/<str:job_id>/activate", views.Activate.as_view(), name="job-activate"),
    path(
        "ojs/v1/jobs/<str:job_id>/progress", flow_views.JobProgress.as_view(), name="job-progress"
    ),
    path("ojs/v1/workflows", flow_views.Workflows.as_view(), name="workflows"),
    path(
        "ojs/v1/workflows/<str:workflow_id>",
        flow_views.WorkflowDetail.as_view(),
        name="workflow",
    ),
    path("ojs/v1/workers/fetch", views.Fetch.as_view(), name="fetch"),
    path("ojs/v1/workers/ack", views.Ack.as_view(), name="ack"),
    path("ojs/v1/workers/nack", views.Nack.as_view(), name="nack"),
    path("ojs/v1/workers/heartbeat", views.Heartbeat.as_view(), name="heartbeat"),
    path("ojs/v1/dead-letter", views.DeadLetters.as_view(), name="dead-letters"),
    path("ojs/v1/dead-letter/<str:job_id>", views.DeadLetterDetail.as_view(), name="dead-letter"),
    path(
        "ojs/v1/dead-letter/<str:job_id>/retry",
        views.DeadLetterRetry.as_view(),
        name="dead-letter-retry",
    ),
    path("ojs/v1/admin/dead-letter", views.AdminDeadLetters.as_view(), name="admin-dead-letters"),
    path(
        "ojs/v1/admin/dead-letter/stats",
        views.DeadLetterStats.as_view(),
        name="admin-dead-letter-stats",
    ),
    path(
        "ojs/v1/admin/dead-letter/<str:job_id>",
        views.AdminDeadLetterDetail.as_view(),
        name="admin-dead-letter",
    ),
    path(
        "ojs/v1/admin/dead-letter/<str:job_id>/retry",
        views.DeadLetterRetry.as_view(),
        name="admin-dead-letter-retry",
    ),
    path("ojs/v1/cron", views.Crons.as_view(), name="crons"),
    path("ojs/v1/cron/<str:name>", views.CronDetail.as_view(), name="cron"),
    path("ojs/v1/events", views.Events.as_view(), name="events"),
    path("ojs/v1/events/stream", flow_views.EventStream.as_view(), name="events-stream"),
    # Last: any other path under /ojs/ is a 404 in the OJS error shape, not Django's HTML page
    # (an id holding "/", a path no endpoint serves).
    re_path(r"^ojs/[\s\S]*$", views.not_found, name="not-found"),
]
