"""The dispatcher's HTTP/1.1 client (dispatch/wire.py) against scripted servers on 127.0.0.1.

Each server here is a real TCP server that writes exactly the bytes a test gives it,
so that the answers aiohttp's test server would never send (chunked framing cut
short, interim 1xx answers, endless heads, HTTP/1.0 bodies ended by closing) reach
the client as they would from a real endpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from django_strait.dispatch.http import HttpDispatcher, HttpRequest
from django_strait.dispatch.wire import MAX_HEAD_BYTES, MAX_HEADERS
from django_strait.rules.outcome import Kind, Outcome

LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"),)

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], "asyncio.Future[None] | object"]


@dataclass
class Scripted:
    url: str = ""
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)
    open_now: int = 0
    most_open: int = 0


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """Read one request (head and Content-Length body) off the connection."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return head + await reader.readexactly(length)


@contextlib.asynccontextmanager
async def scripted(
    answers: list[bytes], *, close_after: bool = False, hold: float = 0, host: str = "127.0.0.1"
) -> AsyncIterator[Scripted]:
    """Serve ``answers`` in turn, one per request, on whatever connection asks."""
    state = Scripted()
    queue = list(answers)

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        state.connections += 1
        state.open_now += 1
        state.most_open = max(state.most_open, state.open_now)
        try:
            while queue:
                try:
                    state.requests.append(await read_request(reader))
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                if hold:
                    await asyncio.sleep(hold)
                writer.write(queue.pop(0))
                await writer.drain()
                if close_after:
                    return
        finally:
            state.open_now -= 1
            writer.close()

    server = await asyncio.start_server(on_connection, host, 0)
    shown = f"[{host}]" if ":" in host else host
    state.url = f"http://{shown}:{server.sockets[0].getsockname()[1]}/hook"
    try:
        yield state
    finally:
        server.close()
        await server.wait_closed()


def request_to(url: str, run_id: int = 1, **fields: object) -> HttpRequest:
    return HttpRequest(
        run_id=run_id, job="wire", attempt=1, payload={"n": run_id}, url=url, **fields
    )  # type: ignore[arg-type]


def dispatch_all(
    answers: list[bytes], runs: int = 1, **options: object
) -> tuple[list[Outcome], Scripted]:
    limit = int(options.pop("limit", 10))  # type: ignore[call-overload]

    async def scenario() -> tuple[list[Outcome], Scripted]:
        async with scripted(answers, **options) as server:  # type: ignore[arg-type]
            async with HttpDispatcher(allowed_networks=LOOPBACK, limit=limit) as dispatcher:
                outcomes = [
                    await dispatcher.dispatch(request_to(server.url, run_id, timeout=5))
                    for run_id in range(1, runs + 1)
                ]
            return outcomes, server

    return asyncio.run(scenario())


def test_wire__chunked_answer_is_read_whole():
    chunked = (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        b'7\r\n{"ok": \r\n5\r\ntrue}\r\n0\r\n\r\n'
    )
    [outcome], server = dispatch_all([chunked, chunked], runs=1)

    assert outcome.kind is Kind.SUCCEEDED
    assert outcome.result == {"ok": True}


def test_wire__interim_answers_are_skipped():
    answer = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + (
        b'HTTP/1.1 201 Created\r\nContent-Length: 4\r\nX-Final: yes\r\n\r\n"ok"'
    )
    [outcome], _ = dispatch_all([answer])

    assert outcome.kind is Kind.SUCCEEDED
    assert outcome.status_code == 201
    assert outcome.result == "ok"


def test_wire__body_ended_by_closing_the_connection_is_read():
    [outcome], _ = dispatch_all([b"HTTP/1.0 200 OK\r\n\r\n[1, 2]"], close_after=True)

    assert outcome.kind is Kind.SUCCEEDED
    assert outcome.result == [1, 2]


def test_wire__chunked_answer_cut_short__is_connect_error_with_the_status():
    [outcome], _ = dispatch_all(
        [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nonly part"], close_after=True
    )

    assert outcome.kind is Kind.RETRYABLE
    assert outcome.error_type == "http.connect"
    assert outcome.status_code == 200
    assert "Server disconnected before the answer was complete" in outcome.error


def test_wire__malformed_answer__is_connect_error():
    [outcome], _ = dispatch_all([b"HTTP/1.1 abc nonsense\r\n\r\n"], close_after=True)

    assert outcome.error_type == "http.connect"
    assert "Malformed answer" in outcome.error


def test_wire__endless_head__is_refused_at_the_bound():
    header = b"X-Big: " + b"a" * 1000 + b"\r\n"
    answer = b"HTTP/1.1 200 OK\r\n" + header * (MAX_HEAD_BYTES // len(header) + 2)
    [outcome], _ = dispatch_all([answer])

    assert outcome.error_type == "http.connect"
    assert f"Answer head longer than {MAX_HEAD_BYTES} bytes" in outcome.error


def test_wire__too_many_headers__are_refused():
    headers = b"".join(b"X-H%d: v\r\n" % i for i in range(MAX_HEADERS + 1))
    [outcome], _ = dispatch_all([b"HTTP/1.1 200 OK\r\n" + headers + b"Content-Length: 0\r\n\r\n"])

    assert outcome.error_type == "http.connect"
    assert f"more than {MAX_HEADERS} headers" in outcome.error


def test_wire__keep_alive_reuses_one_connection_and_connection_close_does_not():
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
    closing = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
    outcomes, server = dispatch_all([ok, ok, closing, ok], runs=4)

    assert [o.kind for o in outcomes] == [Kind.SUCCEEDED] * 4
    assert server.connections == 2  # runs 1-3 on the first, run 4 on a new one


def test_wire__request_on_the_wire():
    outcomes, server = dispatch_all([b"HTTP/1.1 204 No Content\r\n\r\n"])

    [request] = server.requests
    head, _, body = request.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /hook HTTP/1.1"
    port = server.url.split(":")[2].split("/")[0]
    assert f"Host: 127.0.0.1:{port}".encode() in lines
    assert b"Content-Length: %d" % len(body) in lines
    assert body == b'{"run_id":1,"job":"wire","attempt":1,"payload":{"n":1}}'
    assert outcomes[0].kind is Kind.SUCCEEDED


def test_wire__credentials_in_the_url_are_sent_as_basic_auth_unless_the_job_sets_its_own():
    ok = b"HTTP/1.1 204 No Content\r\n\r\n"

    async def scenario() -> Scripted:
        async with scripted([ok, ok]) as server:
            url = server.url.replace("http://", "http://user:s%20cret@")
            async with HttpDispatcher(allowed_networks=LOOPBACK) as dispatcher:
                await dispatcher.dispatch(request_to(url, 1))
                await dispatcher.dispatch(
                    request_to(url, 2, headers={"Authorization": "Bearer mine"})
                )
            return server

    server = asyncio.run(scenario())
    first, second = (request.split(b"\r\n") for request in server.requests)
    assert b"Authorization: Basic dXNlcjpzIGNyZXQ=" in first  # user:s cret
    assert [line for line in second if line.startswith(b"Authorization")] == [
        b"Authorization: Bearer mine"
    ]


def test_wire__ipv6_literal_is_called_with_a_bracketed_host_header():
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"

    async def scenario() -> tuple[Outcome, Scripted]:
        async with scripted([ok], host="::1") as server:
            allowed = (ipaddress.ip_network("::1/128"),)
            async with HttpDispatcher(allowed_networks=allowed) as dispatcher:
                return await dispatcher.dispatch(request_to(server.url)), server

    outcome, server = asyncio.run(scenario())
    port = server.url.rsplit(":", 1)[1].split("/")[0]
    assert outcome.kind is Kind.SUCCEEDED
    assert f"Host: [::1]:{port}".encode() in server.requests[0].split(b"\r\n")


def test_wire__an_idle_connection_the_endpoint_closed_is_not_reused():
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"

    async def scenario() -> tuple[list[Outcome], Scripted]:
        async with scripted([ok, ok], close_after=True) as server:
            async with HttpDispatcher(allowed_networks=LOOPBACK) as dispatcher:
                first = await dispatcher.dispatch(request_to(server.url, 1))
                await asyncio.sleep(0.2)  # the server has closed the kept-alive connection
                second = await dispatcher.dispatch(request_to(server.url, 2))
            return [first, second], server

    outcomes, server = asyncio.run(scenario())
    assert [o.kind for o in outcomes] == [Kind.SUCCEEDED] * 2
    assert server.connections == 2


def test_wire__pool_never_opens_more_than_its_limit():
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"

    async def scenario() -> tuple[list[Outcome], Scripted]:
        async with scripted([ok] * 8, hold=0.05) as server:
            async with HttpDispatcher(allowed_networks=LOOPBACK, limit=2) as dispatcher:
                outcomes = await asyncio.gather(
                    *(dispatcher.dispatch(request_to(server.url, n)) for n in range(1, 9))
                )
            return list(outcomes), server

    outcomes, server = asyncio.run(scenario())
    assert [o.kind for o in outcomes] == [Kind.SUCCEEDED] * 8
    assert server.most_open == 2
    assert server.connections == 2


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_wire__https_with_an_untrusted_certificate__is_refused(tmp_path: Path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    handled: list[bytes] = []

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            handled.append(await read_request(reader))
        writer.close()

    async def scenario() -> Outcome:
        server = await asyncio.start_server(on_connection, "127.0.0.1", 0, ssl=context)
        port = server.sockets[0].getsockname()[1]
        try:
            async with HttpDispatcher(allowed_networks=LOOPBACK) as dispatcher:
                return await dispatcher.dispatch(
                    request_to(f"https://127.0.0.1:{port}/", timeout=5)
                )
        finally:
            server.close()

    outcome = asyncio.run(scenario())
    assert outcome.error_type == "http.connect"
    assert "CERTIFICATE_VERIFY_FAILED" in outcome.error
    assert handled == []
