"""The protection layer (DESIGN §5): circuit breakers per endpoint URL.

``reset_circuit(url)`` and ``reset_all()`` close circuits from code; the admin
action and ``manage.py strait_circuits --reset`` call the same functions.
"""

from django_strait.resilience.store import reset_all, reset_circuit

__all__ = ["reset_all", "reset_circuit"]
