"""The benchmark's no-op handler, registered so that a job may name it."""

from django_strait import handler


@handler
def noop(payload):
    return None


@handler
def cpu(payload):
    """A fixed amount of pure-Python work (``loops``; about 5 ms, calibrated by the bench).

    A fixed amount, not a time: threads sharing the GIL must do the same work.
    """
    return work(payload.get("loops", 1000))


def work(loops: int) -> int:
    n = 0
    for _ in range(loops):
        n += sum(i * i for i in range(200))
    return n
