"""The retry policy code, at the path the documentation gave before the layered layout.

The code lives in ``rules/retry/`` (pure rules: docs/architecture.md, "Layers").
This module re-exports its public names so that ``from django_strait.retry import
resolve`` in users' tools and tests keeps working; tests/unit/test_public_paths.py
checks it. Nothing in the package imports it.
"""

from __future__ import annotations

from django_strait.rules.retry import *  # noqa: F403
from django_strait.rules.retry import __all__  # noqa: F401
