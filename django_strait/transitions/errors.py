from __future__ import annotations

from django_strait.states import Transition


class InvalidTransition(Exception):
    """A transition was asked of a run whose status does not allow it."""

    def __init__(self, run_id: int, status: str, transition: Transition) -> None:
        allowed = ", ".join(sorted(transition.sources))
        super().__init__(
            f"run {run_id} is {status}: cannot {transition.label} it (allowed from: {allowed})"
        )
        self.run_id = run_id
        self.status = status
        self.transition = transition
