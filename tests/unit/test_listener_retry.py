"""The listener's tries to LISTEN again: soon after a connection that held, backing off after."""

from __future__ import annotations

from django_strait.storage.wakeup import Listener


class Stop:
    """A stand-in for the listener's stop event that notes each wait and stops after ``waits``."""

    def __init__(self, waits: int) -> None:
        self.left = waits
        self.waited: list[float] = []

    def is_set(self) -> bool:
        return self.left <= 0

    def wait(self, seconds: float) -> None:
        self.waited.append(seconds)
        self.left -= 1

    def set(self) -> None:
        self.left = 0


def listener_losing(held: list[bool]) -> tuple[Listener, Stop]:
    """A listener whose connection is lost at each try; ``held``: whether its LISTEN held first."""
    listener = Listener("default", [], lambda: None, retry_after=5.0, first_retry=0.5)
    tries = iter(held)

    def lost() -> None:
        listener.listening = next(tries)
        raise ConnectionError("server closed the connection unexpectedly")

    listener._listen = lost
    stop = listener._stop = Stop(len(held))
    return listener, stop


def test_listener__backs_off_while_the_database_is_away():
    listener, stop = listener_losing([False] * 6)

    listener._run()

    assert stop.waited == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]


def test_listener__tries_again_soon_after_a_connection_that_held():
    # A failover: the LISTEN held on the old primary; the new one may answer within a
    # second, so the next try is not a backoff grown over an earlier outage.
    listener, stop = listener_losing([False, False, False, False, True, False])

    listener._run()

    assert stop.waited == [0.5, 1.0, 2.0, 4.0, 0.5, 1.0]
