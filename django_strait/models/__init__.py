"""django-strait's models (docs/concepts.md)."""

from django_strait.models.apikey import SCOPES, ApiKey
from django_strait.models.attempt import AttemptOutcome, RunAttempt
from django_strait.models.budget import BudgetLedger, BudgetReservation, Project
from django_strait.models.circuit import CircuitState, EndpointCircuit
from django_strait.models.health import EndpointHealth, HealthLevel, HealthSample
from django_strait.models.hold import RunHold
from django_strait.models.job import (
    Execution,
    HttpMethod,
    Job,
    MissedTicks,
    OnExhaustion,
    Overlap,
)
from django_strait.models.limits import JobRateAdmission
from django_strait.models.preset import JobPresetRecommendation
from django_strait.models.queue import QueueState
from django_strait.models.rollup import QueueSample, RunRollup
from django_strait.models.run import DeadLetter, JobRun
from django_strait.models.webhook import DeliveryStatus, WebhookDelivery
from django_strait.models.worker import WorkerProcess
from django_strait.models.workflow import (
    StepRunStatus,
    Workflow,
    WorkflowRun,
    WorkflowRunStatus,
    WorkflowStep,
    WorkflowStepRun,
)

__all__ = [
    "SCOPES",
    "ApiKey",
    "AttemptOutcome",
    "BudgetLedger",
    "BudgetReservation",
    "CircuitState",
    "DeadLetter",
    "DeliveryStatus",
    "EndpointCircuit",
    "EndpointHealth",
    "Execution",
    "HealthLevel",
    "HealthSample",
    "HttpMethod",
    "Job",
    "JobPresetRecommendation",
    "JobRateAdmission",
    "MissedTicks",
    "JobRun",
    "OnExhaustion",
    "Project",
    "QueueSample",
    "QueueState",
    "Overlap",
    "RunAttempt",
    "RunHold",
    "RunRollup",
    "StepRunStatus",
    "WebhookDelivery",
    "WorkerProcess",
    "Workflow",
    "WorkflowRun",
    "WorkflowRunStatus",
    "WorkflowStep",
    "WorkflowStepRun",
]
