"""The benchmark's no-op handler (a plain function referenced by dotted path)."""


def noop(payload):
    return None
