"""Services: what the public API and the surfaces call to get something done.

Declaring jobs (``decorators``, ``registry``) and writing their rows
(``syncing``), triggering runs (``triggering``), choosing runs to replay
(``replaying``), the circuit breaker (``breaker``) and Django signal receivers
(``receivers``). They sit above storage and the transitions, below the worker
and the surfaces (docs/architecture.md, "Layers").
"""
