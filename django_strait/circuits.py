"""Closing circuits from code: ``reset_circuit(url)`` and ``reset_all()``; ``reset_health(urls)``.

The admin's reset action, ``POST circuits/reset/`` and ``manage.py
strait_circuits --reset`` call these. Running workers notice within a second or
two (their circuit cache is reloaded at most every second). On several
databases, circuits and health live on ``STRAIT["CONTROL_DATABASE"]``.
"""

from __future__ import annotations

from django.utils import timezone

from django_strait.database import control_alias
from django_strait.storage import backend as _backend
from django_strait.transitions import sending


def backend():
    """The storage of the circuits and health: the control database's."""
    return _backend(control_alias())


def reset_circuit(url: str) -> bool:
    """Close ``url``'s circuit and forget its failures; True if it was not already so."""
    changed, changes = backend().reset_circuits(url, now=timezone.now())
    sending.announce_circuit_changes(changes)
    return changed > 0


def reset_all() -> int:
    """Close every circuit and forget every failure count; return how many changed."""
    changed, changes = backend().reset_circuits(None, now=timezone.now())
    sending.announce_circuit_changes(changes)
    return changed


def reset_health(urls: list[str]) -> int:
    """Forget the health scores of ``urls``: each starts again unscored, as a new endpoint.

    A closed circuit does not release runs that an unhealthy score holds (docs/resilience.md);
    this does. Workers reload unwell endpoints at most every second. Return how many
    scores were forgotten.
    """
    return backend().forget_health(urls)
