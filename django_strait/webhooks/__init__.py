"""Completion webhooks (docs/webhooks.md): events, their wire format and their retry policy.

The outbox rows are written by the transitions that end runs
(``storage.webhooks``); workers deliver them (``worker.webhooks``).
"""
