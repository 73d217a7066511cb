"""Which endpoint an HTTP run calls, and when a failed call moves on at once (docs/http-jobs.md).

A job's endpoints are its ``endpoint_url`` then its ``fallback_endpoint_urls``.
A run's first attempt of a cycle (after it was queued or replayed) starts at
the primary. After a failed attempt the next one goes to the endpoint after
the one that failed, wrapping round to the primary after the last fallback:
an endpoint that has just failed on this run is the last one tried again.

A failed call moves on *at once* (the run is due again immediately, no
backoff) when the endpoint answered a non-retryable error or a 503, and it was
not the last endpoint of the list; at the last one the retry policy decides
as usual. The claim gate skips endpoints whose circuit is open or which are
unhealthy (``services.breaker``). Every call spends one of the run's attempts.
"""

from __future__ import annotations

from collections.abc import Sequence

from django_strait.rules.outcome import Kind, Outcome

#: The status that says "no capacity here": it fails over at once.
CAPACITY_STATUS = 503


def endpoints_of(primary: str, fallbacks: object) -> tuple[str, ...]:
    """Return a job's endpoints, primary first, without repeats (none without a primary).

    ``fallbacks`` is the job's JSON column: entries that are not strings (a row
    saved around validation) are left out.
    """
    if not primary:
        return ()
    extra = [u for u in fallbacks if isinstance(u, str)] if isinstance(fallbacks, list) else []
    return tuple(dict.fromkeys([primary, *extra]))


def order(endpoints: Sequence[str], *, last_used: str, attempts_spent: int) -> tuple[str, ...]:
    """Return ``endpoints`` in the order this attempt should try them."""
    if attempts_spent <= 0 or last_used not in endpoints:
        return tuple(endpoints)
    start = (endpoints.index(last_used) + 1) % len(endpoints)
    return (*endpoints[start:], *endpoints[:start])


def fails_over_at_once(outcome: Outcome, endpoints: Sequence[str], *, non_retryable: bool) -> bool:
    """Return whether this failed call should move on to the next endpoint without waiting.

    ``non_retryable``: the retry policy would not retry this error (its kind or
    the job's ``non_retryable_errors``). An explicit ``Strait-Action`` from the
    endpoint is obeyed, never failed over.
    """
    if outcome.kind is Kind.SUCCEEDED or outcome.kind is Kind.ACTION:
        return False
    if outcome.endpoint not in endpoints or outcome.endpoint == endpoints[-1]:
        return False
    return non_retryable or outcome.status_code == CAPACITY_STATUS
