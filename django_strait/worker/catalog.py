"""The worker's view of ``Job`` rows: loaded once per batch, refreshed after a TTL.

A run carries only its job id; executing it needs the handler (registered in
code), the HTTP target and the merged retry policy. Rows older than ``ttl``
seconds are reloaded with the next claim, so edits in the admin reach running
workers.

Every row is checked as it loads, with the same rules as every write path
(``models.job.definition_problems``): a row that bypassed them (raw SQL, an
older release) is kept with its problems, and the claim gate holds its runs
(``job.invalid``) instead of letting it fail a statement for every job.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from django_strait.dispatch.failover import endpoints_of
from django_strait.models import Job
from django_strait.models.job import definition_problems
from django_strait.rules.handlers import find_handler, handlers
from django_strait.rules.retry import BUILTIN, RetryPolicy
from django_strait.storage.rows import read
from django_strait.transitions.decisions import run_policy

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
    #: What is wrong with the row, by field: its runs are held until it is fixed.
    problems: dict[str, list[str]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.row.name

    @property
    def invalid(self) -> bool:
        return bool(self.problems)

    def describe_problems(self) -> str:
        """The problems on one line, field by field."""
        return "; ".join(f"{name}: {' '.join(msgs)}" for name, msgs in self.problems.items())


class Catalog:
    """Job rows by id, with their registered handlers and merged policies."""

    def __init__(self, *, ttl: float = 5.0, using: str | None = None) -> None:
        self.ttl = ttl
        self.using = using
        self._jobs: dict[int, JobInfo] = {}
        self._policies: dict[tuple[int, int | None, str], RetryPolicy] = {}

    def timeout_of(self, job_id: int) -> float:
        """Return a loaded job's timeout in seconds (the default if it is not loaded)."""
        info = self._jobs.get(job_id)
        return (
            info.row.timeout_secs if info is not None and not info.invalid else DEFAULT_TIMEOUT_SECS
        )

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
        for jid, info in self._read(wanted, now).items():
            if info.invalid and not self._was_invalid(jid, info):
                logger.error(
                    "job %s (id %s) has an invalid definition; its runs are held until it is "
                    "fixed: %s",
                    info.name,
                    jid,
                    info.describe_problems(),
                    extra={"job": info.name},
                )
            self._jobs[jid] = info
        self._policies = {k: v for k, v in self._policies.items() if k[0] not in wanted}

    def get(self, job_id: int) -> JobInfo:
        """Return a loaded job (``ensure`` must have seen its id)."""
        return self._jobs[job_id]

    def policy(
        self, info: JobInfo, max_attempts: int | None, overrides: dict | None
    ) -> RetryPolicy:
        """Return the run's policy: the job's, with the run's overrides merged in.

        A run whose stored overrides are not a valid policy (written around
        validation) runs on its job's policy, and the worker says so.
        """
        if max_attempts is None and not overrides:
            return info.policy
        key = (info.row.pk, max_attempts, json.dumps(overrides, sort_keys=True, default=str))
        policy = self._policies.get(key)
        if policy is None:
            policy = run_policy(info.row, max_attempts, overrides, job_policy=info.policy)
            self._policies[key] = policy
        return policy

    def _was_invalid(self, job_id: int, info: JobInfo) -> bool:
        # Log a bad row when it turns bad (or first loads), not on every reload.
        before = self._jobs.get(job_id)
        return before is not None and before.problems == info.problems

    def _read(self, wanted: set[int], now: float) -> dict[int, JobInfo]:
        # One row the worker cannot read (JSON nested past Python's recursion limit, a
        # NaN) must not stop the others: it is set aside, and its runs are held.
        rows = Job.objects.using(self.using).filter(pk__in=wanted).defer(*_UNUSED)
        found = read(rows, log=False)
        infos = {row.pk: _load(row, now) for row in found.rows}
        problems: dict[int, dict[str, list[str]]] = {}
        for problem in found.unreadable:
            problems.setdefault(problem.pk, {}).setdefault(problem.field or "row", []).append(
                problem.problem
            )
        if problems:
            names = dict(
                Job.objects.using(self.using)
                .filter(pk__in=list(problems))
                .values_list("pk", "name")
            )
            for pk, found_problems in problems.items():
                row = Job(pk=pk, name=names.get(pk, f"(job id {pk})"))
                infos[pk] = JobInfo(row, BUILTIN, now, problems=found_problems)
        return infos


#: Job columns the worker never reads: a value there that cannot be read holds no run.
_UNUSED = ("description", "schedule_last_tick", "created_at", "updated_at")


def _load(row: Job, now: float) -> JobInfo:
    problems = definition_problems(row)
    if problems:
        return JobInfo(row, BUILTIN, now, problems=problems)
    policy = run_policy(row)
    if not row.handler:
        endpoints = endpoints_of(row.endpoint_url, row.fallback_endpoint_urls)
        return JobInfo(row, policy, now, endpoints=endpoints)
    found = find_handler(row.handler)
    if found is None:
        # The claim gate leaves its runs to workers that know it, and says so.
        return JobInfo(row, policy, now, handler_error=handlers.unknown(row.handler))
    return JobInfo(row, policy, now, handler=found)
