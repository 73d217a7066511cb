"""django-strait's models (DESIGN §1)."""

from django_strait.models.attempt import AttemptOutcome, RunAttempt
from django_strait.models.job import HttpMethod, Job, OnExhaustion
from django_strait.models.run import DeadLetter, JobRun

__all__ = [
    "AttemptOutcome",
    "DeadLetter",
    "HttpMethod",
    "Job",
    "JobRun",
    "OnExhaustion",
    "RunAttempt",
]
