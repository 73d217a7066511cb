"""``ojs.together.Together``: calls from many threads answered in batches, each caller its own answer."""

from __future__ import annotations

import threading
import time

import pytest

from django_strait.ojs.together import Together


class Slow:
    """A batch runner whose first batch waits until ``release`` is set."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.release = threading.Event()
        self.first_started = threading.Event()

    def __call__(self, items):
        self.batches.append(list(items))
        if len(self.batches) == 1:
            self.first_started.set()
            assert self.release.wait(10)
        return [ValueError(f"bad {i}") if i < 0 else i * 10 for i in items]


def call_all(together: Together, items: list[int], answers: dict, failures: dict) -> list:
    def one(i: int) -> None:
        try:
            answers[i] = together(i)
        except Exception as exc:
            failures[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in items]
    for t in threads:
        t.start()
    return threads


def test_together__callers_that_come_meanwhile_share_the_next_batch():
    slow = Slow()
    together = Together(slow)
    answers: dict = {}
    failures: dict = {}
    first = call_all(together, [1], answers, failures)
    assert slow.first_started.wait(10)
    rest = call_all(together, [2, 3, 4, -5], answers, failures)
    deadline = time.monotonic() + 10
    while len(together._queue) < 4:  # all four wait behind the first batch
        assert time.monotonic() < deadline
        time.sleep(0.005)
    slow.release.set()
    for t in first + rest:
        t.join(10)

    assert slow.batches[0] == [1]
    assert sorted(slow.batches[1]) == [-5, 2, 3, 4] and len(slow.batches) == 2
    assert answers == {1: 10, 2: 20, 3: 30, 4: 40}
    assert list(failures) == [-5] and str(failures[-5]) == "bad -5"


def test_together__a_lone_call_is_run_at_once_in_its_own_thread():
    seen: list[str] = []
    together = Together(lambda items: seen.append(threading.current_thread().name) or list(items))

    assert together(7) == 7 and together(8) == 8
    assert seen == [threading.current_thread().name] * 2


def test_together__a_batch_that_raises_fails_each_of_its_callers_and_the_next_runs():
    calls: list[list[int]] = []

    def run(items):
        calls.append(list(items))
        if len(calls) == 1:
            raise RuntimeError("the database went away")
        return list(items)

    together = Together(run)
    with pytest.raises(RuntimeError, match="went away"):
        together(1)

    assert together(2) == 2


def test_together__many_threads_each_get_their_own_answer():
    together = Together(lambda items: [i * 2 for i in items], most=3)
    answers: dict = {}
    failures: dict = {}
    threads = call_all(together, list(range(200)), answers, failures)
    for t in threads:
        t.join(10)

    assert not failures and answers == {i: i * 2 for i in range(200)}
    assert not together._busy and not together._queue
