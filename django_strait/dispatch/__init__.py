"""Executors: turn one attempt of a run into an Outcome, persisting nothing.

``http`` calls an HTTP job's endpoint, ``python`` runs a Python handler,
``signing`` makes and checks the ``Strait-Signature`` header, and ``results``
bounds what either stores as the run's result.
"""
