"""A worker's circuit breaker: circuits cached in memory, a gate at claim, an account at record.

The cache holds only circuits that are not quiet (open, half-open, or closed
with failures counted) and is reloaded at most every ``ttl`` seconds, so a
reset in the admin or a circuit opened by another worker reaches this worker
within a second or two. While every endpoint is healthy, neither the gate nor
the recorder touches the database for circuits.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django_strait.resilience import store
from django_strait.resilience.policy import (
    PROBE_MARGIN,
    Admission,
    Circuit,
    Result,
    Verdict,
    admit,
    classify,
    probing,
)

#: Seconds between reloads of the cached circuits.
CACHE_TTL = 1.0


@dataclass(frozen=True, slots=True)
class Candidate:
    """A claimed run of an HTTP job: what the gate needs to know about it."""

    run_id: int
    endpoint_url: str
    timeout_secs: float


@dataclass(frozen=True, slots=True)
class Attempted:
    """An ended attempt, as the circuit sees it."""

    endpoint_url: str
    error_type: str
    status_code: int | None


class CircuitBreaker:
    """Circuits of every endpoint this worker calls, shared by its claim and record threads."""

    def __init__(self, *, using: str = "default", ttl: float = CACHE_TTL) -> None:
        self.using = using
        self.ttl = ttl
        self._lock = threading.Lock()
        self._circuits: dict[str, Circuit] = {}
        self._loaded_at = float("-inf")

    # -- cache -----------------------------------------------------------------------

    def refresh(self, *, force: bool = False) -> None:
        """Reload the circuits from the database if the cache is older than ``ttl``."""
        if not force and time.monotonic() - self._loaded_at < self.ttl:
            return
        circuits = store.load_active(using=self.using)
        with self._lock:
            self._circuits, self._loaded_at = circuits, time.monotonic()

    def get(self, url: str) -> Circuit | None:
        """Return the cached circuit of ``url`` (None: closed, no failures)."""
        with self._lock:
            return self._circuits.get(url)

    def _put(self, circuits: Iterable[Circuit]) -> None:
        with self._lock:
            for circuit in circuits:
                if circuit.quiet:
                    self._circuits.pop(circuit.endpoint_url, None)
                else:
                    self._circuits[circuit.endpoint_url] = circuit

    # -- gate ------------------------------------------------------------------------

    def gate(
        self,
        candidates: Sequence[Candidate],
        *,
        now: dt.datetime,
        cooldown: dt.timedelta,
    ) -> dict[int, Admission]:
        """Return the admission of each run (by id) that may not start; call inside the claim.

        Candidates come in claim order: when a circuit may be probed, the first
        of its runs is the probe and the rest wait for its result.
        """
        if not candidates:
            return {}
        self.refresh()
        held: dict[int, Admission] = {}
        decided: dict[str, Admission] = {}
        for cand in candidates:
            admission = decided.get(cand.endpoint_url)
            if admission is None:
                admission = self._first(cand, now, cooldown)
                decided[cand.endpoint_url] = self._after_first(cand, admission, now, cooldown)
            if admission.verdict is not Verdict.START:
                held[cand.run_id] = admission
        return held

    def _first(self, cand: Candidate, now: dt.datetime, cooldown: dt.timedelta) -> Admission:
        circuit = self.get(cand.endpoint_url)
        timeout = dt.timedelta(seconds=cand.timeout_secs)
        admission = admit(circuit, now=now, cooldown=cooldown, timeout=timeout)
        if admission.verdict is not Verdict.PROBE:
            return admission
        assert circuit is not None
        lost_before = now - timeout - PROBE_MARGIN
        won = store.win_probe(
            cand.endpoint_url, now=now, cooldown=cooldown, lost_before=lost_before, using=self.using
        )
        # Won or not, the circuit is half-open now (this worker's probe or another's).
        self._put([probing(circuit, now)])
        if won:
            return Admission(Verdict.START)
        return admit(probing(circuit, now), now=now, cooldown=cooldown, timeout=timeout)

    def _after_first(
        self, cand: Candidate, first: Admission, now: dt.datetime, cooldown: dt.timedelta
    ) -> Admission:
        """Return the admission of the endpoint's other runs in this batch."""
        if first.verdict is Verdict.HOLD:
            return first
        # Closed: they start too. Half-open: the first run is the probe; they wait for it.
        timeout = dt.timedelta(seconds=cand.timeout_secs)
        return admit(self.get(cand.endpoint_url), now=now, cooldown=cooldown, timeout=timeout)

    # -- account ---------------------------------------------------------------------

    def account(
        self, attempts: Iterable[Attempted], *, now: dt.datetime, threshold: int
    ) -> list[Circuit]:
        """Count ended attempts against their circuits; write only what changes something.

        A batch of successes on quiet circuits costs no statement at all.
        """
        results: dict[str, list[Result]] = {}
        for att in attempts:
            if not att.error_type and not self._circuits:
                continue  # a success while every circuit is quiet changes nothing
            result = classify(att.error_type, att.status_code)
            results.setdefault(att.endpoint_url, []).append(result)
        worth = {url: res for url, res in results.items() if self._worth_writing(url, res)}
        if not worth:
            return []
        written = store.apply_results(worth, now=now, threshold=threshold, using=self.using)
        self._put(written)
        return written

    def _worth_writing(self, url: str, results: list[Result]) -> bool:
        if Result.FAILURE in results:
            return True
        circuit = self.get(url)
        return circuit is not None and not circuit.quiet and Result.SUCCESS in results
