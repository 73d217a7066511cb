"""The benchmark's no-op handler, registered so that a job may name it."""

from django_strait import handler


@handler
def noop(payload):
    return None
