"""HttpDispatcher against real aiohttp servers on 127.0.0.1 (no database)."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest
from aiohttp import web
from multidict import CIMultiDict

from django_strait.dispatch.http import HttpDispatcher, HttpRequest, parse_retry_after
from django_strait.dispatch.results import TRUNCATION_MARKER
from django_strait.dispatch.signing import verify
from django_strait.rules.outcome import Action, Kind, Outcome

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: The servers here listen on loopback, which the dispatcher refuses unless allowed.
LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"),)

#: Set when the test's server shuts down, so that slow handlers stop waiting.
STOP = web.AppKey("stop", asyncio.Event)


@dataclass
class Received:
    """One request as the server saw it."""

    method: str
    path: str
    headers: CIMultiDict[str]
    body: bytes
    peer_port: int


@dataclass
class Server:
    """A real HTTP server on 127.0.0.1 that records what it receives."""

    url: str = ""
    received: list[Received] = field(default_factory=list)
    #: Set when the test ends, so that slow handlers stop waiting.
    stop: asyncio.Event = field(default_factory=asyncio.Event)


@contextlib.asynccontextmanager
async def serve(handler: Handler) -> AsyncIterator[Server]:
    server = Server()

    async def recording(request: web.Request) -> web.StreamResponse:
        server.received.append(
            Received(
                method=request.method,
                path=request.path,
                headers=CIMultiDict(request.headers),
                body=await request.read(),
                peer_port=request.transport.get_extra_info("peername")[1],
            )
        )
        return await handler(request)

    app = web.Application()
    app[STOP] = server.stop
    app.router.add_route("*", "/{tail:.*}", recording)
    runner = web.AppRunner(app, shutdown_timeout=1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield server
    finally:
        server.stop.set()
        await runner.cleanup()


def request_to(url: str, **fields: Any) -> HttpRequest:
    values: dict[str, Any] = {"run_id": 42, "job": "send-mail", "attempt": 1, "payload": {"a": 1}}
    values.update(fields)
    return HttpRequest(url=url, **values)


def exchange(
    handler: Handler, *, max_result_bytes: int = 65536, **fields: Any
) -> tuple[Outcome, Server]:
    """Dispatch one request to a fresh server running ``handler``."""

    async def scenario() -> tuple[Outcome, Server]:
        async with serve(handler) as server:
            async with HttpDispatcher(
                max_result_bytes=max_result_bytes, allowed_networks=LOOPBACK
            ) as dispatcher:
                outcome = await dispatcher.dispatch(request_to(server.url + "/hook", **fields))
            return outcome, server

    return asyncio.run(scenario())


def answer(status: int = 200, body: str | bytes = "", **headers: str) -> Handler:
    """Return a handler that answers with a fixed status, body and headers."""

    async def handler(request: web.Request) -> web.Response:
        raw = body.encode() if isinstance(body, str) else body
        return web.Response(status=status, body=raw, headers=_header_names(headers))

    return handler


def _header_names(headers: dict[str, str]) -> dict[str, str]:
    # Keyword arguments cannot hold dashes: strait_action -> Strait-Action.
    return {name.replace("_", "-").title(): value for name, value in headers.items()}


# Request format


def test_dispatch__sends_compact_json_body():
    outcome, server = exchange(answer(200), payload={"to": "a@example.com", "n": [1, 2]})

    [got] = server.received
    assert outcome.kind is Kind.SUCCEEDED
    assert got.method == "POST"
    assert got.path == "/hook"
    assert got.body == (
        b'{"run_id":42,"job":"send-mail","attempt":1,"payload":{"to":"a@example.com","n":[1,2]}}'
    )


def test_dispatch__sends_strait_headers():
    _, server = exchange(answer(200), run_id=314, attempt=3)

    headers = server.received[0].headers
    assert headers.getall("Content-Type") == ["application/json"]
    assert headers["User-Agent"] == "django-strait"
    assert headers["Strait-Run-Id"] == "314"
    assert headers["Strait-Attempt"] == "3"
    assert headers["Idempotency-Key"] == "314"
    assert headers["Accept-Encoding"] == "identity"
    assert "Strait-Signature" not in headers
    assert "Cookie" not in headers


def test_dispatch__signature_verifies_with_the_secret():
    _, server = exchange(answer(200), signing_secret="s3cret")

    got = server.received[0]
    assert verify("s3cret", got.body, got.headers["Strait-Signature"])
    assert not verify("other", got.body, got.headers["Strait-Signature"])


def test_dispatch__job_headers_are_sent_but_cannot_override_strait_headers():
    job_headers = {
        "X-Tenant": "acme",
        "Authorization": "Bearer abc",
        "strait-run-id": "999",
        "Strait-Attempt": "999",
        "STRAIT-SIGNATURE": "t=1,v1=forged",
        "Strait-Custom": "reserved prefix",
        "idempotency-key": "mine",
        "content-type": "text/plain",
        "Content-Length": "3",
        "Accept-Encoding": "gzip",
    }
    _, server = exchange(answer(200), headers=job_headers, run_id=7, attempt=2)

    headers = server.received[0].headers
    assert headers["X-Tenant"] == "acme"
    assert headers["Authorization"] == "Bearer abc"
    assert headers.getall("Strait-Run-Id") == ["7"]
    assert headers.getall("Strait-Attempt") == ["2"]
    assert headers.getall("Idempotency-Key") == ["7"]
    assert headers.getall("Content-Type") == ["application/json"]
    assert headers.getall("Accept-Encoding") == ["identity"]
    assert "Strait-Signature" not in headers
    assert "Strait-Custom" not in headers
    assert json.loads(server.received[0].body)["run_id"] == 7


def test_dispatch__job_headers_override_user_agent():
    _, server = exchange(answer(200), headers={"user-agent": "acme-bot/1.0"})

    assert server.received[0].headers.getall("User-Agent") == ["acme-bot/1.0"]


def test_dispatch__uses_the_jobs_method():
    _, server = exchange(answer(200), method="PUT")

    assert server.received[0].method == "PUT"


def test_dispatch__reuses_the_connection_and_keeps_no_cookies():
    async def handler(request: web.Request) -> web.Response:
        response = web.Response(text="ok")
        response.set_cookie("session", "leak")
        return response

    async def scenario() -> list[Received]:
        async with (
            serve(handler) as server,
            HttpDispatcher(allowed_networks=LOOPBACK) as dispatcher,
        ):
            for run_id in (1, 2):
                await dispatcher.dispatch(request_to(server.url + "/hook", run_id=run_id))
            return server.received

    first, second = asyncio.run(scenario())
    assert first.peer_port == second.peer_port
    assert "Cookie" not in second.headers


def test_dispatch__one_dispatcher_sends_each_attempt_its_own_headers():
    """Headers built once per job must not carry one run's or one job's values into the next."""
    job_headers = {"X-Tenant": "acme"}

    async def scenario() -> list[Received]:
        async with (
            serve(answer(200)) as server,
            HttpDispatcher(allowed_networks=LOOPBACK) as dispatcher,
        ):
            url = server.url + "/hook"
            await dispatcher.dispatch(request_to(url, run_id=1, headers=job_headers))
            await dispatcher.dispatch(request_to(url, run_id=2, attempt=3, signing_secret="s"))
            job_headers["X-Tenant"] = "globex"  # the job was edited between two runs
            await dispatcher.dispatch(request_to(url, run_id=3, headers=job_headers))
            return server.received

    first, second, third = asyncio.run(scenario())
    assert first.headers.getall("X-Tenant") == ["acme"]
    assert "Strait-Signature" not in first.headers
    assert "X-Tenant" not in second.headers
    assert second.headers.getall("Strait-Run-Id") == ["2"]
    assert second.headers.getall("Strait-Attempt") == ["3"]
    assert verify("s", second.body, second.headers["Strait-Signature"])
    assert third.headers.getall("X-Tenant") == ["globex"]
    assert third.headers.getall("Idempotency-Key") == ["3"]
    assert "Strait-Signature" not in third.headers


def test_dispatch__unsendable_headers_are_refused_on_every_attempt():
    async def scenario() -> tuple[list[Outcome], Server]:
        async with (
            serve(answer(200)) as server,
            HttpDispatcher(allowed_networks=LOOPBACK) as dispatcher,
        ):
            url = server.url + "/hook"
            outcomes = [
                await dispatcher.dispatch(request_to(url, headers={"X-Count": 1})),
                await dispatcher.dispatch(request_to(url, headers={"X-Count": "1"})),
                await dispatcher.dispatch(request_to(url, headers={"X-Count": True})),
                await dispatcher.dispatch(request_to(url, headers={"X-List": ["a"]})),
            ]
            return outcomes, server

    (as_number, as_text, as_bool, as_list), server = asyncio.run(scenario())
    assert as_text.kind is Kind.SUCCEEDED
    assert [o.error_type for o in (as_number, as_bool, as_list)] == ["http.invalid_header"] * 3
    assert "the value is a number" in as_number.error
    assert "the value is true or false" in as_bool.error
    assert "the value is a list" in as_list.error
    assert [got.headers["X-Count"] for got in server.received] == ["1"]


def test_dispatch__starts_the_session_when_not_started():
    async def scenario() -> Outcome:
        async with serve(answer(200, '{"ok": true}')) as server:
            dispatcher = HttpDispatcher(allowed_networks=LOOPBACK)
            try:
                return await dispatcher.dispatch(request_to(server.url))
            finally:
                await dispatcher.close()

    outcome = asyncio.run(scenario())
    assert outcome.result == {"ok": True}


# Results


def test_dispatch__200_json_is_the_parsed_result():
    outcome, server = exchange(
        answer(200, '{"sent": 3, "ids": ["a", "b"]}', content_type="application/json")
    )

    assert outcome.kind is Kind.SUCCEEDED
    assert outcome.attempt_outcome == "succeeded"
    assert outcome.result == {"sent": 3, "ids": ["a", "b"]}
    assert outcome.status_code == 200
    assert outcome.endpoint == server.url + "/hook"
    assert outcome.error == ""


def test_dispatch__json_body_without_json_content_type_is_parsed():
    outcome, _ = exchange(answer(201, "[1, 2]", content_type="text/plain"))

    assert outcome.result == [1, 2]
    assert outcome.status_code == 201


def test_dispatch__200_text_is_the_text_result():
    outcome, _ = exchange(answer(200, "queued, thanks", content_type="text/plain"))

    assert outcome.kind is Kind.SUCCEEDED
    assert outcome.result == "queued, thanks"


def test_dispatch__text_is_decoded_with_the_declared_charset():
    body = "café".encode("latin-1")
    outcome, _ = exchange(answer(200, body, content_type="text/plain; charset=iso-8859-1"))

    assert outcome.result == "café"


def test_dispatch__nan_is_not_json_so_stays_text():
    outcome, _ = exchange(answer(200, '{"x": NaN}', content_type="application/json"))

    assert outcome.result == '{"x": NaN}'


def test_dispatch__204_has_no_result():
    outcome, _ = exchange(answer(204))

    assert outcome.kind is Kind.SUCCEEDED
    assert outcome.result is None
    assert outcome.status_code == 204


def test_dispatch__oversized_result_is_trimmed_on_a_character_boundary():
    body = "é" * 500  # 1000 bytes; 101 bytes end inside the 51st character
    outcome, _ = exchange(answer(200, body), max_result_bytes=101)

    assert outcome.kind is Kind.SUCCEEDED
    assert outcome.result == "é" * 50 + TRUNCATION_MARKER.format(limit=101)


def test_dispatch__oversized_json_is_trimmed_text_not_parsed():
    body = json.dumps({"rows": list(range(100))})
    outcome, _ = exchange(answer(200, body, content_type="application/json"), max_result_bytes=20)

    assert outcome.result == body[:20] + "\n[truncated by django-strait: more than 20 bytes]"


def test_dispatch__result_of_exactly_the_limit_is_kept_whole():
    outcome, _ = exchange(answer(200, "x" * 64), max_result_bytes=64)

    assert outcome.result == "x" * 64


def test_dispatch__endless_body_is_not_buffered():
    written = 0

    async def scenario() -> tuple[Outcome, int]:
        finished = asyncio.Event()

        async def endless(request: web.Request) -> web.StreamResponse:
            nonlocal written
            response = web.StreamResponse()
            await response.prepare(request)
            chunk = b"y" * 65536
            try:
                while written < 512 * 1024 * 1024:  # a bound so the test ends whatever happens
                    await response.write(chunk)
                    written += len(chunk)
            except (ConnectionError, RuntimeError):
                pass  # the client hung up: what this test wants
            finally:
                finished.set()
            return response

        async with serve(endless) as server:
            async with HttpDispatcher(
                max_result_bytes=1000, allowed_networks=LOOPBACK
            ) as dispatcher:
                outcome = await dispatcher.dispatch(request_to(server.url, timeout=30))
            await asyncio.wait_for(finished.wait(), 30)
        return outcome, written

    outcome, total = asyncio.run(scenario())
    assert outcome.result == "y" * 1000 + TRUNCATION_MARKER.format(limit=1000)
    # Socket buffers hold a few MiB at most; the endless body was not read to its bound.
    assert total < 64 * 1024 * 1024


# Failures by status


@pytest.mark.parametrize("status", [408, 425, 429, 500, 502, 503, 504, 599])
def test_dispatch__retryable_status__is_retryable_failure(status):
    outcome, server = exchange(answer(status, "try later"))

    assert outcome.kind is Kind.RETRYABLE
    assert outcome.error_type == f"http.{status}"
    assert outcome.attempt_outcome == "failed"
    assert outcome.status_code == status
    assert outcome.error == f"HTTP {status} from {server.url}/hook: try later"


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 410, 422])
def test_dispatch__other_4xx__is_non_retryable(status):
    outcome, _ = exchange(answer(status))

    assert outcome.kind is Kind.NON_RETRYABLE
    assert outcome.error_type == f"http.{status}"


def test_dispatch__404_keeps_an_excerpt_of_the_body():
    body = "no such hook\n" + "z" * 2000
    outcome, server = exchange(answer(404, body))

    assert outcome.kind is Kind.NON_RETRYABLE
    assert outcome.error_type == "http.404"
    assert outcome.response_excerpt == body[:500]
    assert outcome.error.startswith(f"HTTP 404 from {server.url}/hook: no such hook z")
    assert outcome.result is None


def test_dispatch__302_is_not_followed():
    outcome, server = exchange(answer(302, Location="/elsewhere"))

    assert outcome.kind is Kind.NON_RETRYABLE
    assert outcome.error_type == "http.302"
    assert "redirects are not followed; Location: /elsewhere" in outcome.error
    assert [got.path for got in server.received] == ["/hook"]


def test_dispatch__503_retry_after_seconds():
    outcome, _ = exchange(answer(503, "busy", Retry_After="7"))

    assert outcome.kind is Kind.RETRYABLE
    assert outcome.error_type == "http.503"
    assert outcome.retry_after == 7.0


def test_dispatch__429_retry_after_http_date():
    when = datetime.now(UTC) + timedelta(seconds=120)
    outcome, _ = exchange(answer(429, Retry_After=format_datetime(when, usegmt=True)))

    assert outcome.kind is Kind.RETRYABLE
    assert outcome.error_type == "http.429"
    assert outcome.retry_after is not None
    assert 60 < outcome.retry_after <= 121


def test_dispatch__retry_after_is_ignored_on_other_statuses():
    outcome, _ = exchange(answer(500, Retry_After="7"))

    assert outcome.retry_after is None


def test_dispatch__unreadable_retry_after_is_ignored():
    outcome, _ = exchange(answer(503, Retry_After="soon"))

    assert outcome.kind is Kind.RETRYABLE
    assert outcome.retry_after is None


# Strait-Action


@pytest.mark.parametrize(
    ("status", "value", "expected"),
    [
        (200, "discard", Action.DISCARD),
        (500, "dead_letter", Action.DEAD_LETTER),
        (404, "retry", Action.RETRY),
        (503, "fail", Action.FAIL),
        (202, " Fail ", Action.FAIL),
    ],
)
def test_dispatch__strait_action_overrides_status(status, value, expected):
    outcome, server = exchange(answer(status, "because", Strait_Action=value))

    assert outcome.kind is Kind.ACTION
    assert outcome.action is expected
    assert outcome.error_type == f"http.{status}"
    assert outcome.status_code == status
    assert outcome.response_excerpt == "because"
    assert outcome.error == (
        f"HTTP {status} from {server.url}/hook asked to {expected.value}: because"
    )


def test_dispatch__strait_action_retry_carries_retry_after():
    outcome, _ = exchange(answer(200, Strait_Action="retry", Retry_After="3"))

    assert outcome.action is Action.RETRY
    assert outcome.retry_after == 3.0


def test_dispatch__unknown_strait_action_is_ignored_and_noted():
    outcome, _ = exchange(answer(500, "oops", Strait_Action="explode"))

    assert outcome.kind is Kind.RETRYABLE
    assert outcome.error_type == "http.500"
    assert "ignored Strait-Action: 'explode'" in outcome.error


def test_dispatch__unknown_strait_action_on_2xx_is_still_success():
    outcome, _ = exchange(answer(200, '"done"', Strait_Action="maybe"))

    assert outcome.kind is Kind.SUCCEEDED
    assert outcome.result == "done"
    assert "ignored Strait-Action: 'maybe'" in outcome.error


# Timeouts and transport errors


def test_dispatch__slow_endpoint__times_out():
    async def slow(request: web.Request) -> web.Response:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(request.app[STOP].wait(), 10)
        return web.Response(text="too late")

    outcome, server = exchange(slow, timeout=0.2)

    assert outcome.kind is Kind.RETRYABLE
    assert outcome.error_type == "http.timeout"
    assert outcome.attempt_outcome == "timed_out"
    assert outcome.status_code is None
    assert outcome.error == f"No complete response from {server.url}/hook within 0.2 s"


def test_dispatch__trickling_body_past_the_deadline__times_out():
    async def trickle(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=200)
        await response.prepare(request)
        stop = request.app[STOP]
        with contextlib.suppress(ConnectionError, RuntimeError):
            for _ in range(200):  # 10 s at most
                if stop.is_set():
                    break
                await response.write(b"x")
                await asyncio.sleep(0.05)
        return response

    outcome, _ = exchange(trickle, timeout=0.3)

    assert outcome.error_type == "http.timeout"
    assert outcome.attempt_outcome == "timed_out"
    assert outcome.status_code == 200


def test_dispatch__connection_refused__is_retryable_connect_error():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/hook"

    async def scenario() -> Outcome:
        async with HttpDispatcher(allowed_networks=LOOPBACK) as dispatcher:
            return await dispatcher.dispatch(request_to(url, timeout=5))

    outcome = asyncio.run(scenario())
    assert outcome.kind is Kind.RETRYABLE
    assert outcome.error_type == "http.connect"
    assert outcome.attempt_outcome == "failed"
    assert outcome.endpoint == url
    assert outcome.error.startswith(
        f"Could not complete the call to {url}: ConnectError: Cannot connect to host 127.0.0.1:{port}"
    )


def test_dispatch__server_hangs_up_mid_body__is_connect_error():
    async def hang_up(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers={"Content-Length": "1000"})
        await response.prepare(request)
        await response.write(b"partial")
        request.transport.close()
        return response

    outcome, _ = exchange(hang_up)

    assert outcome.kind is Kind.RETRYABLE
    assert outcome.error_type == "http.connect"
    assert outcome.status_code == 200


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/file", "http://", "127.0.0.1/hook"])
def test_dispatch__invalid_url__is_non_retryable(url):
    async def scenario() -> Outcome:
        async with HttpDispatcher(allowed_networks=LOOPBACK) as dispatcher:
            return await dispatcher.dispatch(request_to(url))

    outcome = asyncio.run(scenario())
    assert outcome.kind is Kind.NON_RETRYABLE
    assert outcome.error_type == "http.invalid_url"
    assert outcome.error == f"Cannot call {url!r}: not a valid http:// or https:// URL"


def test_dispatch__unexpected_error__becomes_dispatch_internal(caplog):
    async def scenario(url: str) -> Outcome:
        async with HttpDispatcher(allowed_networks=LOOPBACK) as dispatcher:
            return await dispatcher.dispatch(request_to(url, payload={"bad": object()}))

    async def run() -> tuple[Outcome, Server]:
        async with serve(answer(200)) as server:
            return await scenario(server.url), server

    outcome, server = asyncio.run(run())
    assert outcome.kind is Kind.RETRYABLE
    assert outcome.error_type == "dispatch.internal"
    assert outcome.error.startswith("TypeError: Object of type object is not JSON serializable")
    assert server.received == []
    assert "Dispatching run 42" in caplog.text


# Values


def test_http_request__rejects_non_positive_timeout():
    with pytest.raises(ValueError, match="HttpRequest.timeout must be seconds > 0, got 0"):
        request_to("http://127.0.0.1/", timeout=0)


def test_http_dispatcher__rejects_negative_limits():
    with pytest.raises(ValueError, match="max_result_bytes must be >= 0"):
        HttpDispatcher(max_result_bytes=-1)
    with pytest.raises(ValueError, match="limit must be >= 0"):
        HttpDispatcher(limit=-1)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("7", 7.0),
        ("0", 0.0),
        ("1.5", 1.5),
        ("-3", 0.0),
        ("Sat, 14 Nov 2023 22:13:40 GMT", 20.0),
        ("Sat, 14 Nov 2023 22:13:40 -0000", 20.0),
        ("Sat, 14 Nov 2023 22:12:00 GMT", 0.0),
        ("soon", None),
        ("nan", None),
        ("inf", None),
        ("", None),
        (None, None),
    ],
)
def test_parse_retry_after__seconds_and_http_dates(value, expected):
    now = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC

    assert parse_retry_after(value, now) == expected
