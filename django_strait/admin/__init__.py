"""django-strait in the Django admin: jobs, runs, dead letters, workers, circuits, health, budgets,
workflows and their runs, webhook deliveries, an overview.

Importing this package registers the model admins (Django's admin autodiscovery
does it for you when ``django.contrib.admin`` is installed).
"""

from django_strait.admin.apikeys import ApiKeyAdmin as ApiKeyAdmin  # registers the model admin
from django_strait.admin.budgets import ProjectAdmin as ProjectAdmin
from django_strait.admin.circuits import EndpointCircuitAdmin as EndpointCircuitAdmin
from django_strait.admin.deadletters import DeadLetterAdmin
from django_strait.admin.health import EndpointHealthAdmin as EndpointHealthAdmin
from django_strait.admin.jobs import JobAdmin
from django_strait.admin.runs import JobRunAdmin, RunAttemptInline
from django_strait.admin.webhooks import WebhookDeliveryAdmin
from django_strait.admin.workers import WorkerProcessAdmin
from django_strait.admin.workflows import WorkflowAdmin, WorkflowRunAdmin

__all__ = [
    "DeadLetterAdmin",
    "JobAdmin",
    "JobRunAdmin",
    "RunAttemptInline",
    "WebhookDeliveryAdmin",
    "WorkerProcessAdmin",
    "WorkflowAdmin",
    "WorkflowRunAdmin",
]
