"""The named transitions of runs (docs/concepts.md): the one way anything changes ``JobRun.status``.

Each is a guarded change through the storage backend (``django_strait.storage``)
that refuses a run whose status its transition (``states.Transition``) does
not allow, and sends its own signals (through :mod:`.sending`, the one place
django-strait's signals are sent). What happens to a run after an attempt is
decided in :mod:`.decisions`, applied here. People's transitions (replay, cancel,
discard) are in :mod:`.people`; the worker's batched ones (claim and start,
record, put back, heartbeat) in :mod:`.worker`; the reaper's rescue in
:mod:`.reaper`; the signals of what moved workflow runs (storage sends none) in
:mod:`.workflows`. Admin actions, API views, commands, the worker and the duties
call these; nothing else writes ``status``.
"""

from django_strait.rules.states import InvalidTransition
from django_strait.transitions import external
from django_strait.transitions.people import cancel, cancel_now, discard, replay, replay_many
from django_strait.transitions.reaper import rescue_batch, rescue_stale
from django_strait.transitions.worker import claim_and_start, heartbeat, record, unclaim

__all__ = [
    "InvalidTransition",
    "cancel",
    "cancel_now",
    "claim_and_start",
    "discard",
    "external",
    "heartbeat",
    "record",
    "replay",
    "replay_many",
    "rescue_batch",
    "rescue_stale",
    "unclaim",
]
