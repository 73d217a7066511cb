"""The worker's view of ``Job`` rows: loaded once per batch, refreshed after a TTL.

A run carries only its job id; executing it needs the handler (registered in code),
the HTTP target and the merged retry policy. Rows older than ``ttl`` seconds are
reloaded with the next claim, so edits in the admin reach running workers.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from django_strait.dispatch.failover import endpoints_of
from django_strait.models import Job
from django_strait.registry import find_handler, handlers
from django_strait.retry import PolicyError, RetryPolicy, resolve

logger = logging.getLogger(__name__)

#: Job.timeout_secs's default, for a job not loaded (yet).
DEFAULT_TIMEOUT_SECS = Job._meta.get_field("timeout_secs").default


@dataclass(frozen=True, slots=True)
class JobInfo:
    """What the worker needs to know about one job."""

    row: Job
    policy: RetryPolicy
    loaded_at: float
    handler: Callable[..., Any] | None = None
    #: Why a Python job has no handler here (its runs then fail as ``handler.unknown``).
    handler_error: str = ""
    #: An HTTP job's endpoints, primary first, then its fallbacks.
    endpoints: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.row.name


class Catalog:
    """Job rows by id, with their imported handlers and merged policies."""

    def __init__(self, *, ttl: float = 5.0, using: str = "default") -> None:
        self.ttl = ttl
        self.using = using
        self._jobs: dict[int, JobInfo] = {}
        self._policies: dict[tuple[int, int | None, str], RetryPolicy] = {}

    def timeout_of(self, job_id: int) -> float:
        """Return a loaded job's timeout in seconds (the default if it is not loaded)."""
        info = self._jobs.get(job_id)
        return info.row.timeout_secs if info is not None else DEFAULT_TIMEOUT_SECS

    def ensure(self, job_ids: Iterable[int]) -> None:
        """Load the jobs among ``job_ids`` that are missing or stale (DB thread only)."""
        now = time.monotonic()
        wanted = {
            jid
            for jid in job_ids
            if jid not in self._jobs or now - self._jobs[jid].loaded_at > self.ttl
        }
        if not wanted:
            return
        for row in Job.objects.using(self.using).filter(pk__in=wanted):
            self._jobs[row.pk] = self._load(row, now)
        self._policies = {k: v for k, v in self._policies.items() if k[0] not in wanted}

    def get(self, job_id: int) -> JobInfo:
        """Return a loaded job (``ensure`` must have seen its id)."""
        return self._jobs[job_id]

    def policy(
        self, info: JobInfo, max_attempts: int | None, overrides: dict | None
    ) -> RetryPolicy:
        """Return the run's policy: the job's, with the run's overrides merged in."""
        if max_attempts is None and not overrides:
            return info.policy
        key = (info.row.pk, max_attempts, json.dumps(overrides, sort_keys=True))
        policy = self._policies.get(key)
        if policy is None:
            policy = self._policies[key] = resolve(info.row, max_attempts, overrides)
        return policy

    def _load(self, row: Job, now: float) -> JobInfo:
        try:
            policy = resolve(row)
        except PolicyError as exc:
            # A row saved around validation (raw SQL, old data): run it on the
            # defaults rather than stall its runs, and say so.
            logger.error("job %s has an invalid retry policy (%s); using defaults", row.name, exc)
            policy = resolve(Job(name=row.name))
        if not row.handler:
            endpoints = endpoints_of(row.endpoint_url, row.fallback_endpoint_urls)
            return JobInfo(row, policy, now, endpoints=endpoints)
        found = find_handler(row.handler)
        if found is None:
            problem = handlers.unknown(row.handler)
            logger.error("job %s: handler %s", row.name, problem)
            return JobInfo(row, policy, now, handler_error=problem)
        return JobInfo(row, policy, now, handler=found)
