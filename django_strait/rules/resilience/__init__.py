"""The protection layer's rules (docs/resilience.md), as pure functions of their inputs and ``now``.

Circuit decisions (:mod:`.policy`), endpoint health (:mod:`.health`),
concurrency and rate limits (:mod:`.limits`) and budgets (:mod:`.budgets`).
The storage backends apply them to rows; the worker's claim gate
(``worker.gate``) and its circuit cache (``services.breaker``) ask them what the rows
mean. Close circuits from code with ``django_strait.circuits.reset_circuit``.
"""
