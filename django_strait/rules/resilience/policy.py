"""Circuit breaker decisions as pure functions of a circuit, results and ``now``.

Nothing here touches the database: :mod:`.store` reads and writes the rows,
the worker's gate and recorder ask these functions what the rows mean.
"""

from __future__ import annotations

import datetime as dt
import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"

#: How long runs wait while another run probes their endpoint.
PROBE_WAIT = dt.timedelta(seconds=1)
#: Added to the job's timeout before an unanswered probe counts as lost.
PROBE_MARGIN = dt.timedelta(seconds=30)

#: HTTP statuses that say the endpoint is unwell (with every 5xx).
_FAILING_STATUSES = frozenset({408, 425, 429})
_HTTP_STATUS = re.compile(r"http\.(\d{3})")


@dataclass(frozen=True, slots=True)
class Circuit:
    """One endpoint's circuit as the policy sees it."""

    endpoint_url: str
    state: str = CLOSED
    failures: int = 0
    opened_at: dt.datetime | None = None
    last_failure_at: dt.datetime | None = None
    probe_started_at: dt.datetime | None = None

    @property
    def quiet(self) -> bool:
        """Closed with no failure counted: nothing a success would change."""
        return self.state == CLOSED and self.failures == 0


@dataclass(frozen=True, slots=True)
class Change:
    """A circuit whose state changed, and the state it left."""

    circuit: Circuit
    previous_state: str


class Verdict(enum.Enum):
    """What the gate does with a run of an HTTP job."""

    START = "start"
    HOLD = "hold"
    #: The circuit may be probed: try to win the probe, hold if another worker did.
    PROBE = "probe"


@dataclass(frozen=True, slots=True)
class Admission:
    """The gate's verdict for one run, and until when a held run waits."""

    verdict: Verdict
    until: dt.datetime | None = None
    reason: str = ""
    #: The held run's error type: what holds it.
    error_type: str = "circuit.open"


class Result(enum.Enum):
    """What one attempt says about its endpoint's health."""

    #: The endpoint answered, and not with a sign of trouble (2xx, 404, ...).
    SUCCESS = "success"
    #: A 5xx, 408, 425, 429, a timeout or a failed connection.
    FAILURE = "failure"
    #: Says nothing about the endpoint (refused before sending, e.g. ``ssrf.blocked``).
    NEUTRAL = "neutral"


def classify(error_type: str, status_code: int | None) -> Result:
    """Return what an attempt with this error type and HTTP status says about its endpoint."""
    if error_type in ("http.timeout", "http.connect"):
        return Result.FAILURE
    match = _HTTP_STATUS.fullmatch(error_type)
    status = int(match.group(1)) if match else status_code
    if status is None:
        return Result.NEUTRAL
    if status in _FAILING_STATUSES or 500 <= status <= 599:
        return Result.FAILURE
    return Result.SUCCESS


def admit(
    circuit: Circuit | None, *, now: dt.datetime, cooldown: dt.timedelta, timeout: dt.timedelta
) -> Admission:
    """Return whether a run may be sent to ``circuit``'s endpoint now (``timeout``: the job's)."""
    if circuit is None or circuit.state == CLOSED:
        return Admission(Verdict.START)
    if circuit.state == OPEN:
        assert circuit.opened_at is not None, "an open circuit has opened_at"
        cooled_at = circuit.opened_at + cooldown
        if now < cooled_at:
            return Admission(Verdict.HOLD, cooled_at, _open_reason(circuit))
        return Admission(Verdict.PROBE)
    if probe_lost(circuit, now=now, timeout=timeout):
        return Admission(Verdict.PROBE)
    return Admission(Verdict.HOLD, now + PROBE_WAIT, _probing_reason(circuit))


def probe_lost(circuit: Circuit, *, now: dt.datetime, timeout: dt.timedelta) -> bool:
    """Return whether a half-open probe has gone unanswered too long to wait for."""
    started = circuit.probe_started_at
    return started is None or now - started > timeout + PROBE_MARGIN


def after_results(
    circuit: Circuit, results: Iterable[Result], *, now: dt.datetime, threshold: int
) -> Circuit:
    """Return the circuit after ``results`` (in the order the attempts ended)."""
    for result in results:
        circuit = _after(circuit, result, now, threshold)
    return circuit


def _after(circuit: Circuit, result: Result, now: dt.datetime, threshold: int) -> Circuit:
    if result is Result.NEUTRAL:
        return circuit
    if result is Result.SUCCESS:
        return Circuit(circuit.endpoint_url, last_failure_at=circuit.last_failure_at)
    failures = circuit.failures + 1
    opens = circuit.state == HALF_OPEN or (circuit.state == CLOSED and failures >= threshold)
    if not opens:
        return replace(circuit, failures=failures, last_failure_at=now)
    return replace(
        circuit,
        state=OPEN,
        failures=failures,
        opened_at=now,
        last_failure_at=now,
        probe_started_at=None,
    )


def probing(circuit: Circuit, now: dt.datetime) -> Circuit:
    """Return ``circuit`` with a probe started ``now``."""
    return replace(circuit, state=HALF_OPEN, probe_started_at=now)


def _open_reason(circuit: Circuit) -> str:
    return (
        f"circuit open for {circuit.endpoint_url} after {circuit.failures} consecutive "
        f"failures (since {circuit.opened_at:%Y-%m-%d %H:%M:%S}Z); no attempt spent"
    )


def _probing_reason(circuit: Circuit) -> str:
    return (
        f"circuit half-open for {circuit.endpoint_url}: another run is probing it; no attempt spent"
    )
