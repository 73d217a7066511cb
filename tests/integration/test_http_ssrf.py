"""The SSRF guard on real dispatches: servers on 127.0.0.1, nothing else is ever contacted.

Refusals are shown on loopback addresses outside the allow-list (127.0.0.2, and
"localhost" with an empty list): nothing listens on 127.0.0.2, and the servers
record every request, so a test sees both the outcome and that no request arrived.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aiohttp
import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult
from django.test import override_settings

from django_strait import trigger
from django_strait.dispatch.http import HttpDispatcher, HttpRequest
from django_strait.dispatch.ssrf import AddressGuard, AddressRefused, GuardedResolver
from django_strait.models import Job
from django_strait.rules.outcome import Kind, Outcome

ONLY_127_0_0_1 = (ipaddress.ip_network("127.0.0.1/32"),)
LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))


@dataclass
class Server:
    """A real aiohttp server on 127.0.0.1 counting the requests it receives."""

    port: int = 0
    paths: list[str] = field(default_factory=list)


@contextlib.asynccontextmanager
async def serve() -> AsyncIterator[Server]:
    server = Server()

    async def record(request: web.Request) -> web.Response:
        server.paths.append(request.path)
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    runner = web.AppRunner(app, shutdown_timeout=1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server.port = runner.addresses[0][1]
    try:
        yield server
    finally:
        await runner.cleanup()


def dispatch_to(url_of, allowed) -> tuple[Outcome, Server]:
    """Dispatch one request to ``url_of(port)`` with a fresh server and the given allow-list."""

    async def scenario() -> tuple[Outcome, Server]:
        async with serve() as server, HttpDispatcher(allowed_networks=allowed) as dispatcher:
            url = url_of(server.port)
            req = HttpRequest(run_id=7, job="hook", attempt=1, payload={}, url=url, timeout=5)
            return await dispatcher.dispatch(req), server

    return asyncio.run(scenario())


def test_dispatch__allowed_loopback_address__succeeds():
    outcome, server = dispatch_to(lambda port: f"http://127.0.0.1:{port}/hook", ONLY_127_0_0_1)

    assert outcome.kind is Kind.SUCCEEDED
    assert outcome.result == {"ok": True}
    assert server.paths == ["/hook"]


def test_dispatch__loopback_address_outside_allow_list__blocked_without_a_request():
    url = None

    def url_of(port: int) -> str:
        nonlocal url
        url = f"http://127.0.0.2:{port}/hook"
        return url

    outcome, server = dispatch_to(url_of, ONLY_127_0_0_1)

    assert outcome.kind is Kind.NON_RETRYABLE
    assert outcome.error_type == "ssrf.blocked"
    assert outcome.error == (
        "refused to connect to 127.0.0.2 (loopback): not in ALLOWED_PRIVATE_NETWORKS"
    )
    assert outcome.endpoint == url
    assert server.paths == []


def test_dispatch__ipv4_mapped_loopback__blocked():
    outcome, server = dispatch_to(lambda port: f"http://[::ffff:127.0.0.2]:{port}/", ONLY_127_0_0_1)

    assert outcome.error_type == "ssrf.blocked"
    assert "127.0.0.2 inside" in outcome.error
    assert server.paths == []


def test_dispatch__localhost_with_empty_allow_list__blocked_by_the_resolver():
    outcome, server = dispatch_to(lambda port: f"http://localhost:{port}/hook", ())

    assert outcome.kind is Kind.NON_RETRYABLE
    assert outcome.error_type == "ssrf.blocked"
    assert outcome.error.startswith("refused to connect to ")
    assert "(loopback) for host localhost: not in ALLOWED_PRIVATE_NETWORKS" in outcome.error
    assert server.paths == []


def test_dispatch__localhost_with_loopback_allowed__succeeds():
    outcome, server = dispatch_to(lambda port: f"http://localhost:{port}/hook", LOOPBACK)

    assert outcome.kind is Kind.SUCCEEDED
    assert server.paths == ["/hook"]


def test_dispatch__default_allow_list__refuses_loopback():
    async def scenario() -> tuple[Outcome, Server]:
        async with serve() as server, HttpDispatcher() as dispatcher:
            url = f"http://127.0.0.1:{server.port}/hook"
            req = HttpRequest(run_id=7, job="hook", attempt=1, payload={}, url=url)
            return await dispatcher.dispatch(req), server

    outcome, server = asyncio.run(scenario())

    assert outcome.error_type == "ssrf.blocked"
    assert server.paths == []


def test_dispatch__ftp_scheme__refused_as_invalid_url():
    outcome, server = dispatch_to(lambda port: f"ftp://127.0.0.1:{port}/file", LOOPBACK)

    assert (outcome.kind, outcome.error_type) == (Kind.NON_RETRYABLE, "http.invalid_url")
    assert server.paths == []


# DNS rebinding: the guard sits between resolution and connection, on every resolution.


class Rebinding(AbstractResolver):
    """Answer each lookup with the next address of a script, like a rebinding DNS server."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        address = self.answers.pop(0)
        return [
            ResolveResult(
                hostname=host, host=address, port=port, family=socket.AF_INET, proto=0, flags=0
            )
        ]

    async def close(self) -> None:
        pass


def test_guarded_resolver__rebinding_to_a_refused_address__second_call_blocked():
    guard = AddressGuard(ONLY_127_0_0_1)

    async def scenario() -> tuple[list[int | str], Server]:
        connector = aiohttp.TCPConnector(
            resolver=GuardedResolver(guard, Rebinding("127.0.0.1", "127.0.0.2")),
            socket_factory=guard.socket,
            use_dns_cache=False,
            force_close=True,
        )
        seen: list[int | str] = []
        async with serve() as server, aiohttp.ClientSession(connector=connector) as session:
            for _ in range(2):
                try:
                    async with session.get(f"http://rebind.test:{server.port}/") as resp:
                        seen.append(resp.status)
                except aiohttp.ClientConnectorError as exc:
                    assert isinstance(exc.os_error, AddressRefused)
                    seen.append(str(exc.os_error))
        return seen, server

    seen, server = asyncio.run(scenario())

    assert seen == [
        200,
        "refused to connect to 127.0.0.2 (loopback) for host rebind.test: "
        "not in ALLOWED_PRIVATE_NETWORKS",
    ]
    assert server.paths == ["/"]


def test_socket_factory__refuses_an_address_that_bypassed_the_resolver():
    # A resolver that checks nothing: the socket factory still refuses 127.0.0.2.
    guard = AddressGuard(ONLY_127_0_0_1)

    async def scenario() -> BaseException:
        connector = aiohttp.TCPConnector(
            resolver=Rebinding("127.0.0.2"), socket_factory=guard.socket
        )
        async with aiohttp.ClientSession(connector=connector) as session:
            with pytest.raises(aiohttp.ClientConnectorError) as caught:
                await session.get("http://unchecked.test:9/")
        return caught.value.os_error

    refused = asyncio.run(scenario())

    assert isinstance(refused, AddressRefused)
    assert str(refused) == (
        "refused to connect to 127.0.0.2 (loopback): not in ALLOWED_PRIVATE_NETWORKS"
    )


# The worker: a refused endpoint is dead-lettered at once, not retried.


@pytest.mark.django_db(transaction=True)
@override_settings(STRAIT={"ALLOWED_PRIVATE_NETWORKS": []})
def test_worker__refused_endpoint__dead_letters_without_retry_or_request(burst, http_server):
    port = http_server.httpd.server_address[1]
    Job.objects.create(
        name="internal", endpoint_url=f"http://localhost:{port}/hook", max_attempts=3
    )
    run = trigger("internal", {})

    burst()

    run.refresh_from_db()
    assert (run.status, run.attempt, run.error_type) == ("dead_letter", 1, "ssrf.blocked")
    assert "for host localhost: not in ALLOWED_PRIVATE_NETWORKS" in run.last_error
    assert http_server.requests == []


@pytest.mark.django_db(transaction=True)
@override_settings(STRAIT={"ALLOWED_PRIVATE_NETWORKS": ["127.0.0.1/32"]})
def test_worker__allowed_endpoint__completes(burst, http_server):
    Job.objects.create(name="allowed", endpoint_url=http_server.url("/hook"))
    run = trigger("allowed", {})

    burst()

    run.refresh_from_db()
    assert run.status == "completed"
    assert len(http_server.requests) == 1
