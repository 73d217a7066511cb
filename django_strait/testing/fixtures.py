"""pytest fixtures for testing your jobs: ``pytest_plugins = ["django_strait.testing.fixtures"]``.

``strait_drain`` is :func:`django_strait.testing.drain` (call it to run what is
due); ``strait_immediate`` runs every trigger of the test at once and yields
what ran. Both need the database (pytest-django's ``db`` or ``transactional_db``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from django_strait.testing import Drained, drain, immediate


@pytest.fixture
def strait_drain(db: Any) -> Callable[..., Drained]:
    """``strait_drain(**options)``: run every due run to its end (``testing.drain``)."""
    return drain


@pytest.fixture
def strait_immediate(db: Any) -> Iterator[Drained]:
    """Run every trigger of the test before it returns; yields what ran."""
    with immediate() as ran:
        yield ran
