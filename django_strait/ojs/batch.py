"""``POST /ojs/v1/jobs/batch`` through ``trigger_many``: one INSERT per group of alike jobs.

The jobs of a batch that share type, queue, priority and retry policy are one
``trigger_many`` call (one INSERT, each run's OJS id its idempotency key), and
one UPDATE then gives each run its OJS id, envelope and due time. Each job is
checked on its own before (``inputs.job_request``, naming ``jobs[i]``); the batch
is all or none: a reused id, in the batch or in the database, refuses the whole
batch (409) and nothing is queued.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from django.db import IntegrityError, transaction

from django_strait import transitions
from django_strait.database import placed
from django_strait.models import JobRun
from django_strait.ojs import errors, inputs
from django_strait.ojs import placed as placed_ojs
from django_strait.ojs.work import external_job
from django_strait.services.triggering import TriggerError, trigger_many
from django_strait.storage import backend
from django_strait.storage import queues as queue_states
from django_strait.storage.values import Envelope


def enqueue_batch(requests: Sequence[inputs.Enqueue]) -> list[JobRun]:
    """Queue every job of a batch, or none of them; return the runs in the batch's order."""
    _refuse_repeats(requests)
    using = placed_ojs.batch_alias(requests)
    for one in requests:
        if one.rate_limit is not None:
            queue_states.set_rate_limit(using, one.queue, *one.rate_limit)
    try:
        with placed_ojs.ids_held(placed_ojs.chosen(requests)):
            if placed():
                _refuse_held_elsewhere(requests, using)
            with transaction.atomic(using=using):
                runs: list[JobRun | None] = [None] * len(requests)
                for members in _groups(requests).values():
                    made = _enqueue_group(requests, members, using)
                    for i, run in zip(members, made, strict=True):
                        runs[i] = run
    except IntegrityError:  # an id held by a run of another type
        raise errors.duplicate(_taken(requests, using)) from None
    return [run for run in runs if run is not None]


def _refuse_repeats(requests: Sequence[inputs.Enqueue]) -> None:
    seen: set[Any] = set()
    for one in requests:
        if one.id in seen:
            raise errors.duplicate(str(one.id))
        seen.add(one.id)


def _groups(requests: Sequence[inputs.Enqueue]) -> dict[tuple, list[int]]:
    """The batch's positions by what ``trigger_many`` takes once per call."""
    groups: dict[tuple, list[int]] = {}
    for i, one in enumerate(requests):
        policy = json.dumps(one.retry, sort_keys=True, default=str)
        groups.setdefault((one.type, one.queue, one.priority, policy), []).append(i)
    return groups


def _refuse_held_elsewhere(requests: Sequence[inputs.Enqueue], using: str) -> None:
    for one in requests:
        if one.chosen_id and placed_ojs.held_elsewhere(one.id, using):
            raise errors.duplicate(str(one.id))


def _enqueue_group(
    requests: Sequence[inputs.Enqueue], members: list[int], using: str
) -> list[JobRun]:
    first = requests[members[0]]
    job = external_job(first.type, using)
    try:
        runs = trigger_many(
            job.name,
            [{"args": requests[i].args, "meta": requests[i].meta} for i in members],
            using=using,
            idempotency_keys=[str(requests[i].id) for i in members],
            priority=first.priority,
            queue=first.queue,
            retry=first.retry,
        )
    except TriggerError as exc:
        raise _named(exc, members) from None
    for i, run in zip(members, runs, strict=True):
        if run.idempotency_hit:
            raise errors.duplicate(str(requests[i].id))
    _give_ids(runs, [requests[i] for i in members], using)
    for run in runs:
        run.job = job
    return runs


def _named(exc: TriggerError, members: list[int]) -> errors.OjsError:
    """The trigger's refusal, naming the batch's field (``payloads[k]`` is ``jobs[i].args``)."""
    if exc.field.startswith("retry"):
        return errors.validation_error(f"jobs[{members[0]}].options.{exc.field}", exc.message)
    if exc.field.startswith("payloads["):
        k = int(exc.field[len("payloads[") : exc.field.index("]")])
        return errors.invalid_request(f"jobs[{members[k]}].args", exc.message)
    return errors.invalid_request(f"jobs[{members[0]}].{exc.field}", exc.message)


def _give_ids(runs: list[JobRun], requests: list[inputs.Enqueue], using: str) -> None:
    """Each run's OJS id, envelope and (if the job names one) due time, through storage
    (one UPDATE on PostgreSQL, one per run elsewhere)."""
    transitions.external.give_envelopes(
        [
            Envelope(run.pk, one.id, dict(one.envelope), one.run_at)
            for run, one in zip(runs, requests, strict=True)
        ],
        storage=backend(using),
    )
    for run, one in zip(runs, requests, strict=True):
        run.ojs_id, run.ojs = one.id, dict(one.envelope)
        if one.run_at is not None:
            run.available_at = one.run_at


def _taken(requests: Sequence[inputs.Enqueue], using: str) -> str:
    """The first id of the batch a run already holds (for the 409's message)."""
    held = set(
        JobRun.objects.using(using)
        .filter(ojs_id__in=[one.id for one in requests])
        .values_list("ojs_id", flat=True)
    )
    return next((str(one.id) for one in requests if one.id in held), str(requests[0].id))
