"""The fast door's fetch and ack on PostgreSQL (``ojs.lean``): the same transitions, fewer reads.

``work.fetch`` and ``work.ack`` read each run through the ORM with its job joined
(about a hundred columns compiled per query), twice per request. Here a run is
read once, in one statement of the columns a job body needs, and its job comes
from a per-process cache (``jobs``), dropped when a job is saved or deleted in
this process and at most ``JOB_TTL`` seconds old otherwise. The changes are the
same named transitions (``transitions.external.fetch`` and ``finish``) with the same
checks and answers: queue scope, reservation ownership (worker and attempt, on
the row as read and again in the statement that ends the attempt), the result's size.
The raw reads are PostgreSQL's (``usable``); elsewhere the fast door uses ``work``.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from django.db import connections
from django.db.models.base import ModelState
from django.db.models.signals import post_delete, post_save
from django.utils import timezone

from django_strait import transitions
from django_strait.api.auth import QueueScope
from django_strait.conf import strait_settings
from django_strait.database import placed
from django_strait.models import Execution, Job, JobRun
from django_strait.ojs import errors, inputs, work
from django_strait.ojs.ids import parse_any, uuid7
from django_strait.ojs.parents import parent_results
from django_strait.ojs.present import job_body
from django_strait.ojs.together import Together
from django_strait.rules.states import RunStatus, Transition
from django_strait.storage import Claimed, Recorded, backend
from django_strait.storage.values import Record, json_column

#: The longest a cached job row is used without reading it again (a change made by
#: another process shows within this; one made in this process at once).
JOB_TTL = 2.0

#: Most queues whose fetches are claimed together kept (``_fetcher``).
FETCHERS_KEPT = 1000

#: The run columns a job body, the ownership check and the record read.
_COLUMNS = (
    "id", "job_id", "status", "queue", "priority", "attempt", "attempts_before_replay",
    "max_attempts", "available_at", "created_at", "started_at", "finished_at",
    "claimed_by", "last_error", "error_type", "ojs_id", "workflow_step_run_id",
)  # fmt: skip
_JSON_COLUMNS = ("payload", "ojs", "retry_overrides", "result")


class _Jobs:
    """Job rows by id, read once per ``JOB_TTL``; dropped on a save or delete in this process."""

    def __init__(self) -> None:
        self._rows: dict[int, tuple[Job, float]] = {}
        self._lock = threading.Lock()

    def get(self, job_id: int) -> Job | None:
        found = self._rows.get(job_id)
        if found is not None and time.monotonic() - found[1] < JOB_TTL:
            return found[0]
        job = Job.objects.using(backend().alias).filter(pk=job_id).first()
        if job is not None:
            with self._lock:
                self._rows[job_id] = (job, time.monotonic())
        return job

    def forget(self, sender: Any = None, instance: Any = None, **kwargs: Any) -> None:
        with self._lock:
            if instance is None or instance.pk is None:
                self._rows.clear()
            else:
                self._rows.pop(instance.pk, None)


jobs = _Jobs()
post_save.connect(jobs.forget, sender=Job, dispatch_uid="strait-ojs-hot-jobs-saved")
post_delete.connect(jobs.forget, sender=Job, dispatch_uid="strait-ojs-hot-jobs-deleted")


def usable() -> bool:
    """Whether the runs' database is PostgreSQL, whose raw reads come back typed as the ORM's.

    Not on several aliases: its reads are the first alias's; ``work`` serves them all.
    Asked several times a request: kept with the settings (``strait_settings.derived``).
    """
    return strait_settings.derived(  # type: ignore[no-any-return]
        "ojs_hot_usable",
        lambda: not placed() and connections[backend().alias].vendor == "postgresql",
    )


def _select(where: str) -> str:
    table = JobRun._meta.db_table
    names = [*_COLUMNS, *(f"CAST({c} AS TEXT)" for c in _JSON_COLUMNS)]
    return f"SELECT {', '.join(names)} FROM {table} WHERE {where}"


class Run:
    """A run as the fast door reads it: the columns above and its job, and nothing else.

    Not a ``JobRun``: a model's ``__init__`` was a tenth of a fetch and ack's CPU. What
    reads it (``present.job_body``, ``work.check_held``, ``work.attempt_record``,
    ``work.ended``) reads these attributes only; any other is an ``AttributeError``,
    not a default or a query.
    """

    __slots__ = (*_COLUMNS, *_JSON_COLUMNS, "job")

    @property
    def pk(self) -> int:
        return self.id  # type: ignore[no-any-return]

    @property
    def _state(self) -> ModelState:
        """Where the run was read, as a model's ``_state.db`` says (what reads runs of any
        alias asks it): the fast door's runs are the one alias's (``usable``)."""
        state = ModelState()
        state.db, state.adding = backend().alias, False
        return state

    def twin(self) -> Run:
        """A copy an ack may change (the job shared: read only here)."""
        twin = Run.__new__(Run)
        for name in Run.__slots__:
            if hasattr(self, name):
                setattr(twin, name, getattr(self, name))
        return twin


_UUID = JobRun._meta.get_field("ojs_id")


def _run(row: Sequence[Any]) -> Run:
    """A run as read: the columns above, the JSON ones decoded as the ORM would."""
    run = Run.__new__(Run)
    for name, value in zip(_COLUMNS, row, strict=False):
        setattr(run, name, value)
    if run.ojs_id is not None:
        run.ojs_id = _UUID.to_python(run.ojs_id)
    for at, name in enumerate(_JSON_COLUMNS, start=len(_COLUMNS)):
        try:
            setattr(run, name, json_column(row[at]))
        except (ValueError, RecursionError):  # read as nothing: the body says what it can
            setattr(run, name, None)
    return run


def _read(where: str, params: Sequence[Any]) -> list[Run]:
    alias = backend().alias
    with connections[alias].cursor() as cursor:
        cursor.execute(_select(where), params)
        return [_run(row) for row in cursor.fetchall()]


# Fetch.


class _Plan:
    """The claimed runs as read inside the fetch's transaction: expiry, deadline, body."""

    def __init__(self, visibility_ms: int) -> None:
        self.visibility_ms = visibility_ms
        self.runs: dict[int, Run] = {}

    def expired(self, claimed: Sequence[Claimed], now: Any) -> set[int]:
        ids = [r.id for r in claimed]
        for run in _read("id = ANY(%s)", [ids]) if ids else []:
            self.runs[run.pk] = run
        return {i for i in ids if work._has_expired(self._envelope(i), now)}

    def deadline(self, run: Claimed, started: Any) -> Any:
        return work._deadline(self._envelope(run.id), started, started, self.visibility_ms)

    def _envelope(self, run_id: int) -> dict[str, Any]:
        run = self.runs.get(run_id)
        return run.ojs if run is not None and isinstance(run.ojs, dict) else {}


def fetch(queues: Sequence[str], count: int, worker: str, visibility_ms: int) -> list[dict]:
    """Claim and start up to ``count`` due runs of ``queues``; return their job bodies.

    Queue by queue, each in one statement while its runs are plain (``fetch_at_once``);
    from the first queue whose next runs are not, the ordinary fetch (``_fetch``).
    """
    bodies: list[dict] = []
    now = timezone.now()
    for i, queue in enumerate(queues):
        left = count - len(bodies)
        if left <= 0:
            break
        rows, blocked = _fetcher(queue)((worker, left, visibility_ms))
        for row in rows:
            run = _run(row)
            job = jobs.get(run.job_id)
            if job is None:  # deleted meanwhile (cannot be while its run is active): read it
                again = JobRun.objects.select_related("job").filter(pk=run.pk)
                bodies += [work.describe(r, with_errors=False) for r in again]
            else:
                run.job = job
                fetched.add(run)
                bodies.append(job_body(run, job, now))
        if blocked:
            return bodies + _fetch(queues[i:], count - len(bodies), worker, visibility_ms)
    return bodies


def _fetch_together(queue: str, asks: Sequence[tuple[str, int, int]]) -> list[tuple[list, bool]]:
    """Several workers' fetches of ``queue`` in one statement: each ask's rows, and whether
    a run that is not plain blocked them (``transitions.external.fetch_together``)."""
    taken, blocked = transitions.external.fetch_together(queue, asks)
    return [(rows, blocked) for rows in taken]


_fetchers: dict[str, Together[tuple[str, int, int], tuple[list, bool]]] = {}
_fetchers_lock = threading.Lock()


def _fetcher(queue: str) -> Together[tuple[str, int, int], tuple[list, bool]]:
    """The fetches of ``queue`` claimed together (``ojs.together``), one per queue."""
    found = _fetchers.get(queue)
    if found is None:
        with _fetchers_lock:
            if len(_fetchers) >= FETCHERS_KEPT:  # queue names are the clients': bounded
                _fetchers.clear()
            found = _fetchers.setdefault(queue, Together(lambda asks: _fetch_together(queue, asks)))
    return found


def _fetch(queues: Sequence[str], count: int, worker: str, visibility_ms: int) -> list[dict]:
    """The ordinary fetch (``transitions.external.fetch``), its runs read once for their bodies."""
    if count <= 0:
        return []
    plan = _Plan(visibility_ms)
    started = transitions.external.fetch(
        worker, queues=queues, limit=count, deadline=plan.deadline, expired=plan.expired
    )
    now = timezone.now()
    bodies = []
    for claimed in started:
        run = plan.runs.get(claimed.id)
        job = jobs.get(claimed.job_id) if run is not None else None
        if run is None or job is None:  # not read (cannot happen): read it the ORM's way
            again = JobRun.objects.select_related("job").filter(pk=claimed.id)
            bodies += [work.describe(r, with_errors=False) for r in again]
            continue
        run.status, run.claimed_by = RunStatus.EXECUTING, worker
        run.attempt, run.started_at = claimed.attempt, claimed.started_at
        if run.ojs_id is None:  # a run a cron schedule (or trigger()) made has no OJS id yet
            new = uuid7()
            if transitions.external.name({run.pk: new}):
                run.ojs_id = new
        run.job = job
        if run.ojs_id is not None:
            fetched.add(run)
        bodies.append(job_body(run, job, now))
        if run.workflow_step_run_id:  # a workflow's step: its parents' results (level 3)
            parents = parent_results([run]).get(run.pk)
            if parents is not None:
                bodies[-1]["parent_results"] = parents
    return bodies


# Ack.


def held(ident: Any, what: str, holder: inputs.Holder, scope: QueueScope) -> tuple[Run, Job]:
    """The active run ``ident`` and its job if ``holder`` holds its reservation (``work.check_held``)."""
    key = parse_any(ident) if isinstance(ident, str) else None
    found = _read("ojs_id = %s", [key]) if key is not None else []
    run = found[0] if found else None
    job = jobs.get(run.job_id) if run is not None else None
    if run is None or job is None or job.execution != Execution.EXTERNAL:
        raise errors.not_found("job", str(ident))
    if not scope.allows(run.queue):
        raise errors.not_found("job", str(ident))
    work.check_held(run, job, ident, what, holder)
    run.job = job
    return run, job


def ack(ident: Any, result: Any, holder: inputs.Holder, scope: QueueScope) -> dict[str, Any]:
    """Complete an active run ``holder`` holds with the worker's result; answer as ``work.ended``.

    A run this process fetched is not read again (``fetched``): the record's own guard
    (executing, under that worker, at that attempt) refuses it if its reservation
    changed meanwhile, and then the run is read and checked as ``work.ack`` does, for
    the same answer (409 naming its state, or the attempt that holds it now).
    """
    cached = fetched.get(ident)
    as_fetched = cached is not None and _held_as_fetched(cached, holder, scope)
    run = cached if as_fetched and cached is not None else held(ident, "ack", holder, scope)[0]
    _check_result(result)
    recorded, now = _complete(run, result)
    if run.pk not in recorded.moved and as_fetched:  # changed since this process fetched it
        fetched.forget(ident)
        run = held(ident, "ack", holder, scope)[0]
        recorded, now = _complete(run, result)
    fetched.forget(ident)
    if run.pk not in recorded.moved:
        raise errors.conflict(f"job {run.ojs_id} is no longer active (canceled or requeued)")
    # The run as the record left it (completed, or canceled if that was asked meanwhile).
    run.status, run.finished_at, run.claimed_by = recorded.moved[run.pk], now, ""
    run.result, run.last_error, run.error_type = result, "", ""
    return work.ended(run)


def _held_as_fetched(run: Run, holder: inputs.Holder, scope: QueueScope) -> bool:
    """Whether the run as this process fetched it is within scope and ``holder``'s."""
    attempt = run.attempt - run.attempts_before_replay
    return (
        scope.allows(run.queue)
        and (holder.worker is None or holder.worker == run.claimed_by)
        and (holder.attempt is None or holder.attempt == attempt)
    )


def _check_result(result: Any) -> None:
    size = len(json.dumps(result, allow_nan=False))
    if size > strait_settings.RESULT_MAX_BYTES:
        raise errors.invalid_request(
            "result",
            f"is {size} bytes as JSON; at most {strait_settings.RESULT_MAX_BYTES} are allowed "
            "(STRAIT['RESULT_MAX_BYTES'])",
        )


def _complete(run: Run, result: Any) -> tuple[Recorded, Any]:
    """Record the attempt ``run`` holds as succeeded (``work.attempt_record``), with the
    acks of other workers that came meanwhile (``ojs.together``)."""
    now = timezone.now()
    done = work.attempt_record(
        run, Transition.COMPLETE, "succeeded", now, result=result, error="", worker=run.claimed_by
    )
    return _acks(done), now


def _record_together(done: Sequence[Record]) -> list[Recorded | BaseException]:
    """One record statement for the acks of a batch (``transitions.external.finish_together``).

    A run named twice (two acks of one job at once) is recorded alone after the
    others, as is every ack of a batch whose statement failed: one bad ack, or a
    failure meanwhile, is then its own request's answer, not the batch's.
    """
    first: list[Record] = []
    seen: set[int] = set()
    for rec in done:
        if rec.run_id not in seen:
            seen.add(rec.run_id)
            first.append(rec)
    answers: dict[int, Recorded | BaseException] = {}
    try:
        together = transitions.external.finish_together(first)
    except Exception:
        alone = list(done)
    else:
        answers = {id(rec): together for rec in first}
        alone = [rec for rec in done if id(rec) not in answers]
    for rec in alone:
        try:
            answers[id(rec)] = transitions.external.finish(rec.worker, rec)
        except Exception as exc:
            answers[id(rec)] = exc
    return [answers[id(rec)] for rec in done]


_acks: Together[Record, Recorded] = Together(_record_together)


class _Fetched:
    """The runs this process fetched and no ack has ended yet, by OJS id (at most ``KEPT``)."""

    KEPT = 100_000

    def __init__(self) -> None:
        self._runs: OrderedDict[str, Run] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, run: Run) -> None:
        with self._lock:
            self._runs[str(run.ojs_id)] = run
            while len(self._runs) > self.KEPT:
                self._runs.popitem(last=False)

    def get(self, ident: Any) -> Run | None:
        run = self._runs.get(ident) if isinstance(ident, str) else None
        return run.twin() if run is not None else None

    def forget(self, ident: Any) -> None:
        if isinstance(ident, str):
            with self._lock:
                self._runs.pop(ident, None)


fetched = _Fetched()
