"""The OJS binding's paths: ``path("", include("django_strait.ojs.urls"))`` serves ``/ojs/...``.

No trailing slashes (OJS's paths have none, and a POST must not meet APPEND_SLASH).
"""

from django.urls import path, re_path

from django_strait.ojs import admin_api, flow_views, queues, views

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
    path("ojs/v1/queues", queues.Queues.as_view(), name="queues"),
    path("ojs/v1/queues/<str:name>/stats", queues.QueueStats.as_view(), name="queue-stats"),
    path("ojs/v1/queues/<str:name>/pause", queues.QueuePause.as_view(), name="queue-pause"),
    path("ojs/v1/queues/<str:name>/resume", queues.QueueResume.as_view(), name="queue-resume"),
    path("ojs/v1/admin/queues", admin_api.AdminQueues.as_view(), name="admin-queues"),
    path("ojs/v1/admin/queues/<str:name>", admin_api.AdminQueue.as_view(), name="admin-queue"),
    path(
        "ojs/v1/admin/queues/<str:name>/pause",
        admin_api.AdminQueuePause.as_view(),
        name="admin-queue-pause",
    ),
    path(
        "ojs/v1/admin/queues/<str:name>/resume",
        admin_api.AdminQueueResume.as_view(),
        name="admin-queue-resume",
    ),
    path("ojs/v1/admin/jobs", admin_api.AdminJobs.as_view(), name="admin-jobs"),
    path(
        "ojs/v1/admin/jobs/bulk/retry", admin_api.AdminBulkRetry.as_view(), name="admin-bulk-retry"
    ),
    path("ojs/v1/admin/jobs/<str:job_id>", admin_api.AdminJob.as_view(), name="admin-job"),
    path("ojs/v1/admin/workers", admin_api.AdminWorkers.as_view(), name="admin-workers"),
    path("ojs/v1/admin/stats", admin_api.AdminStats.as_view(), name="admin-stats"),
    path("ojs/v1/events/stream", flow_views.EventStream.as_view(), name="events-stream"),
    # Last: any other path under /ojs/ is a 404 in the OJS error shape, not Django's HTML page
    # (an id holding "/", a path no endpoint serves).
    re_path(r"^ojs/[\s\S]*$", views.not_found, name="not-found"),
]
