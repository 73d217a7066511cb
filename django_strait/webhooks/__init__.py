"""Completion webhooks (docs/webhooks.md): sending a delivery again (:mod:`.redelivery`).

The events, their wire format and their retry policy are wire values, in
``dispatch.events`` (models name them, so they sit below models). The outbox
rows are written by the transitions that end runs (``storage.webhooks``);
workers deliver them (``worker.webhooks``).
"""
