"""The OJS binding (docs/ojs.md): an Open Job Spec HTTP server over Strait's runs.

Workers in any language fetch, ack and nack runs of external-worker jobs over
HTTP (``include("django_strait.ojs.urls")``); the runs keep Strait's retries,
dead letters, reaper and admin. See docs/ojs.md.
"""
