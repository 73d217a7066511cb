"""Transitions that people ask for (admin, API, commands): replay, cancel, discard.

Each is one guarded update through the storage backend's verb for it (``replay``,
``cancel``, ``drop``: a decision a person made, applied); each sends its signal.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from django.utils import timezone

from django_strait.conf import strait_settings
from django_strait.models import JobRun
from django_strait.rules.payloads import check_payload
from django_strait.storage import Storage, backend
from django_strait.transitions import sending
from django_strait.transitions.workflows import moving_steps

logger = logging.getLogger(__name__)

#: Runs moved per statement by replay_many (and read per page by bulk replays).
REPLAY_BATCH_SIZE = 500


def replay(
    run_id: int, *, by: str = "", payload: Any = ..., storage: Storage | None = None
) -> JobRun:
    """Queue a dead-lettered/failed/discarded/system-failed run again, its attempt budget reset.

    ``by`` records who replayed; ``payload`` (if given) replaces the run's payload.
    """
    storage = storage or backend()
    if payload is not ...:
        payload = check_payload(payload, limit=strait_settings.TRIGGER_MAX_PAYLOAD_BYTES)
    with moving_steps(storage) as moved:
        run = storage.replay(run_id, by=by, now=timezone.now(), payload=payload)
        moved.append(run_id)
    logger.info("run %s: replayed by %s", run_id, by or "unknown", extra={"run_id": run_id})
    return run


def replay_many(
    run_ids: Iterable[int],
    *,
    by: str = "",
    batch_size: int = REPLAY_BATCH_SIZE,
    storage: Storage | None = None,
) -> int:
    """Replay every replayable run among ``run_ids``, in batches; return how many moved."""
    storage = storage or backend()
    ids = list(run_ids)
    moved = 0
    for start in range(0, len(ids), batch_size):
        chunk = ids[start : start + batch_size]
        with moving_steps(storage) as steps:
            moved += storage.replay_many(chunk, by=by, now=timezone.now())
            steps += chunk
    logger.info("replayed %s of %s runs (by %s)", moved, len(ids), by or "unknown")
    return moved


def cancel(run_id: int, *, storage: Storage | None = None) -> JobRun:
    """Cancel a run; one that is executing is canceled when its attempt returns."""
    storage = storage or backend()
    now = timezone.now()
    if storage.request_cancel(run_id, now=now):
        logger.info("run %s: cancel requested while executing", run_id)
        return JobRun.objects.using(storage.alias).get(pk=run_id)
    with moving_steps(storage) as moved:
        run = storage.cancel(run_id, now=now)
        moved.append(run_id)
    logger.info("run %s: canceled", run_id, extra={"run_id": run_id})
    sending.send_changed([run])
    return run


def cancel_now(run_id: int, *, storage: Storage | None = None) -> JobRun:
    """Cancel a run at once, also an executing one: an external worker's (docs/ojs.md).

    The worker is not waited for; its later ack or nack finds the run canceled.
    """
    storage = storage or backend()
    with moving_steps(storage) as moved:
        run = storage.cancel(run_id, now=timezone.now())
        moved.append(run_id)
    logger.info("run %s: canceled", run_id, extra={"run_id": run_id})
    sending.send_changed([run])
    return run


def discard(
    run_id: int, *, by: str = "", reason: str = "", storage: Storage | None = None
) -> JobRun:
    """Drop a run that no worker holds (queued, dead-lettered or system-failed)."""
    storage = storage or backend()
    with moving_steps(storage) as moved:
        run = storage.drop(run_id, now=timezone.now())
        moved.append(run_id)
    note = f"discarded by {by or 'unknown'}" + (f": {reason}" if reason else "")
    logger.info("run %s: %s", run_id, note, extra={"run_id": run_id})
    sending.send_changed([run])
    return run
