"""The one module that changes ``JobRun.status`` (DESIGN §2).

Every change is a named :class:`~django_strait.states.Transition` applied as a
guarded update (``WHERE status IN (allowed)``). People's actions (replay, cancel,
drop) live in :mod:`.single`; the worker's batched claim/start/record in
:mod:`.batch`. Admin actions, API views and commands call these; nothing else
writes ``status``.
"""

from django_strait.transitions.errors import InvalidTransition
from django_strait.transitions.single import cancel, discard, replay, replay_many

__all__ = ["InvalidTransition", "cancel", "discard", "replay", "replay_many"]
