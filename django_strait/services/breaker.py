"""A worker's circuit breaker: circuits cached in memory, a gate at claim, an account at record.

The cache holds only circuits that are not quiet (open, half-open, or closed
with failures counted) and endpoints that are not healthy, and is reloaded at
most every ``ttl`` seconds, so a reset in the admin or a circuit opened by
another worker reaches this worker within a second or two. While every
endpoint is healthy, neither the gate nor the recorder touches the database
for circuits.

The gate also picks each run's endpoint: the first of the run's endpoints
(primary, then fallbacks, in the order the run should try them) that its
circuit and health admit. A run none of them admits is held.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from django_strait.rules.resilience import health as endpoint_health
from django_strait.rules.resilience.policy import (
    PROBE_MARGIN,
    Admission,
    Circuit,
    Result,
    Verdict,
    admit,
    classify,
    probing,
)
from django_strait.transitions import sending

if TYPE_CHECKING:
    from django_strait.storage import Storage

#: Seconds between reloads of the cached circuits.
CACHE_TTL = 1.0


@dataclass(frozen=True, slots=True)
class Candidate:
    """A claimed run of an HTTP job: what the gate needs to know about it."""

    run_id: int
    #: Where the run may go, in the order to try: the primary first unless failing over.
    endpoints: tuple[str, ...]
    timeout_secs: float


@dataclass(frozen=True, slots=True)
class Attempted:
    """An ended attempt, as the circuit sees it."""

    endpoint_url: str
    error_type: str
    status_code: int | None


@dataclass(slots=True)
class Gated:
    """The gate's decisions for one claimed batch."""

    #: Run id -> the endpoint it goes to.
    chosen: dict[int, str] = field(default_factory=dict)
    #: Run id -> why it waits, and until when.
    held: dict[int, Admission] = field(default_factory=dict)


def _held(holds: list[Admission]) -> Admission:
    """One hold for a run none of its endpoints admits: its primary's reason, the soonest time."""
    until = min((h.until for h in holds if h.until is not None), default=None)
    reason = holds[0].reason
    if len(holds) > 1:
        reason += f" (its {len(holds) - 1} fallback endpoint(s) are held too)"
    return Admission(Verdict.HOLD, until, reason, holds[0].error_type)


class CircuitBreaker:
    """Circuits of every endpoint this worker calls, shared by its claim and record threads."""

    def __init__(self, storage: Storage, *, ttl: float = CACHE_TTL) -> None:
        self.storage = storage
        self.ttl = ttl
        self._lock = threading.Lock()
        self._circuits: dict[str, Circuit] = {}
        self._unwell: dict[str, endpoint_health.Health] = {}
        self._loaded_at = float("-inf")

    # -- cache -----------------------------------------------------------------------

    def refresh(self, *, force: bool = False) -> None:
        """Reload the circuits from the database if the cache is older than ``ttl``."""
        if not force and time.monotonic() - self._loaded_at < self.ttl:
            return
        circuits = self.storage.load_active_circuits()
        unwell = self.storage.load_unwell_endpoints()
        with self._lock:
            self._circuits, self._unwell = circuits, unwell
            self._loaded_at = time.monotonic()

    def get(self, url: str) -> Circuit | None:
        """Return the cached circuit of ``url`` (None: closed, no failures)."""
        with self._lock:
            return self._circuits.get(url)

    def health(self, url: str) -> endpoint_health.Health | None:
        """Return the cached health of ``url`` if it is not healthy (None: healthy or unknown)."""
        with self._lock:
            return self._unwell.get(url)

    def health_score(self, url: str) -> float | None:
        """Return the cached score of an endpoint that is not healthy (None: healthy or unknown)."""
        health = self.health(url)
        return health.score if health is not None else None

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
    ) -> Gated:
        """Pick each run's endpoint, or hold the run if none may be called; call inside the claim.

        Candidates come in claim order: when an endpoint may be probed, the
        first run that reaches it is the probe and the others wait for its result
        (or go to their next endpoint).
        """
        gated = Gated()
        if not candidates:
            return gated
        self.refresh()
        decided: dict[str, Admission] = {}
        for cand in candidates:
            holds: list[Admission] = []
            for url in cand.endpoints:
                admission = decided.get(url)
                if admission is None:
                    admission = self._first(url, cand, now, cooldown)
                    decided[url] = self._after_first(url, cand, admission, now, cooldown)
                if admission.verdict is Verdict.START:
                    gated.chosen[cand.run_id] = url
                    break
                holds.append(admission)
            else:
                gated.held[cand.run_id] = _held(holds)
        return gated

    def _first(
        self, url: str, cand: Candidate, now: dt.datetime, cooldown: dt.timedelta
    ) -> Admission:
        circuit = self.get(url)
        timeout = dt.timedelta(seconds=cand.timeout_secs)
        admission = admit(circuit, now=now, cooldown=cooldown, timeout=timeout)
        if admission.verdict is Verdict.START:
            return self._first_by_health(url, now, cooldown)
        if admission.verdict is not Verdict.PROBE:
            return admission
        assert circuit is not None
        lost_before = now - timeout - PROBE_MARGIN
        won = self.storage.win_circuit_probe(
            url, now=now, cooldown=cooldown, lost_before=lost_before
        )
        # Won or not, the circuit is half-open now (this worker's probe or another's).
        self._put([probing(circuit, now)])
        if won:
            return Admission(Verdict.START)
        return admit(probing(circuit, now), now=now, cooldown=cooldown, timeout=timeout)

    def _first_by_health(self, url: str, now: dt.datetime, cooldown: dt.timedelta) -> Admission:
        health = self.health(url)
        admission = endpoint_health.admit(health, now=now, cooldown=cooldown, may_probe=True)
        if admission.verdict is not Verdict.PROBE:
            return admission
        assert health is not None
        won = self.storage.win_health_probe(url, now=now, cooldown=cooldown)
        probed = replace(health, probe_started_at=now)
        with self._lock:
            self._unwell[url] = probed
        if won:
            return Admission(Verdict.START)
        return endpoint_health.admit(probed, now=now, cooldown=cooldown, may_probe=False)

    def _after_first(
        self, url: str, cand: Candidate, first: Admission, now: dt.datetime, cooldown: dt.timedelta
    ) -> Admission:
        """Return the admission of the endpoint's other runs in this batch."""
        if first.verdict is Verdict.HOLD:
            return first
        # Closed: they start too. Half-open or probed: the first run is the probe; they wait.
        timeout = dt.timedelta(seconds=cand.timeout_secs)
        admission = admit(self.get(url), now=now, cooldown=cooldown, timeout=timeout)
        if admission.verdict is not Verdict.START:
            return admission
        return endpoint_health.admit(self.health(url), now=now, cooldown=cooldown, may_probe=False)

    # -- account ---------------------------------------------------------------------

    def account(
        self, attempts: Iterable[Attempted], *, now: dt.datetime, threshold: int
    ) -> list[Circuit]:
        """Count ended attempts against their circuits in a write of their own (the
        webhook deliverer's); write only what changes something.

        The worker's record carries its attempts' counts instead (:meth:`worth`,
        :meth:`accounted`): one round trip for both.
        """
        worth = self.worth(attempts)
        if not worth:
            return []
        written, changes = self.storage.apply_circuit_results(worth, now=now, threshold=threshold)
        self.accounted(written)
        sending.announce_circuit_changes(changes)
        return written

    def worth(self, attempts: Iterable[Attempted]) -> dict[str, list[Result]]:
        """Return the results worth writing, by endpoint, in the order the attempts ended.

        A batch of successes on quiet circuits gives none: it costs no write at all.
        """
        results: dict[str, list[Result]] = {}
        for att in attempts:
            if not att.error_type and not self._circuits:
                continue  # a success while every circuit is quiet changes nothing
            result = classify(att.error_type, att.status_code)
            results.setdefault(att.endpoint_url, []).append(result)
        return {url: res for url, res in results.items() if self._worth_writing(url, res)}

    def accounted(self, written: Iterable[Circuit]) -> None:
        """Keep the circuits a write left, as it left them."""
        self._put(written)

    def _worth_writing(self, url: str, results: list[Result]) -> bool:
        if Result.FAILURE in results:
            return True
        circuit = self.get(url)
        return circuit is not None and not circuit.quiet and Result.SUCCESS in results
