"""Measure HTTP client throughput against a fast local endpoint; print one JSON object.

Bench-only dependencies (not package dependencies; install them into the dev venv):
    pip install uvicorn httptools uvloop httpx urllib3
aiohttp is a package dependency already.

    python bench/http_clients.py [--requests 5000] [--reps 3] [--only aiohttp_c50,dispatcher_c50]

The endpoint is a bare ASGI app served by uvicorn (httptools + uvloop) in its own
process on 127.0.0.1, so that the server's CPU is not charged to the client. Each
client sends the same ~100-byte JSON POST the dispatcher sends and reads the whole
answer. Reported per client: requests/s (median of the reps, and each rep) and the
client process's CPU seconds for one rep (median). Sections: aiohttp with one
session at several concurrencies, httpx async, a sync client (urllib3) on one
keep-alive connection, and django-strait's own HttpDispatcher.dispatch (the real
code path: request building, signing, bounded read, outcome mapping).
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

RESPONSE = b'{"ok":true}'
PAYLOAD = {"order": 1234, "email": "someone@example.com", "items": [1, 2, 3]}
BODY = json.dumps(
    {"run_id": 1, "job": "bench", "attempt": 1, "payload": PAYLOAD}, separators=(",", ":")
).encode()
HEADERS = {"Content-Type": "application/json", "Strait-Run-Id": "1", "Idempotency-Key": "1"}


# The endpoint (runs in a child process)


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Read the request body and answer 200 with a small JSON document."""
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(RESPONSE)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": RESPONSE})


#: The endpoint runs on 127.0.0.1; the dispatcher refuses private addresses by default.
LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"),)


def serve() -> None:
    """Serve :func:`app` on a free 127.0.0.1 port and print the port."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    print(sock.getsockname()[1], flush=True)
    config = uvicorn.Config(
        app,
        loop="uvloop",
        http="httptools",
        lifespan="off",
        access_log=False,
        log_level="warning",
        backlog=2048,
    )
    uvicorn.Server(config).run(sockets=[sock])


def start_server() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve"], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    url = f"http://127.0.0.1:{port}/hook"
    wait_until_up(port)
    return proc, url


def wait_until_up(port: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"the bench server on 127.0.0.1:{port} did not start")


# Measuring


async def drive(n: int, concurrency: int, one: Callable[[], Awaitable[None]]) -> None:
    """Send ``n`` requests with ``concurrency`` coroutines pulling from one counter."""
    remaining = n

    async def lane() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await one()

    await asyncio.gather(*(lane() for _ in range(concurrency)))


@dataclass
class Client:
    """One client under test: ``send(n)`` sends n requests and waits for every answer."""

    send: Callable[[int], None]
    close: Callable[[], None]
    rates: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)

    def measure(self, n: int) -> None:
        """Time one rep of ``n`` requests."""
        wall, cpu = time.perf_counter(), time.process_time()
        self.send(n)
        self.rates.append(n / (time.perf_counter() - wall))
        self.cpus.append(time.process_time() - cpu)

    def summary(self, n: int) -> dict[str, Any]:
        """Return the median rate and CPU over the reps taken."""
        cpu = statistics.median(self.cpus)
        return {
            "rps": round(statistics.median(self.rates)),
            "rps_reps": [round(rate) for rate in self.rates],
            "cpu_s": round(cpu, 3),
            "cpu_us_per_request": round(cpu / n * 1e6, 1),
        }


Opener = Callable[[], Awaitable[tuple[Callable[[], Awaitable[None]], Callable[[], Awaitable[Any]]]]]


def async_client(loop: asyncio.AbstractEventLoop, opener: Opener, concurrency: int) -> Client:
    """Open an async client on ``loop`` and wrap it for blocking measurement."""
    one, close = loop.run_until_complete(opener())
    return Client(
        send=lambda n: loop.run_until_complete(drive(n, concurrency, one)),
        close=lambda: loop.run_until_complete(close()),
    )


# Clients


def aiohttp_client(url: str, concurrency: int) -> Opener:
    async def opener() -> Any:
        import aiohttp

        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency))

        async def one() -> None:
            async with session.post(url, data=BODY, headers=HEADERS) as resp:
                await resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"aiohttp got HTTP {resp.status}")

        return one, session.close

    return opener


def httpx_client(url: str, concurrency: int) -> Opener:
    async def opener() -> Any:
        import httpx

        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        client = httpx.AsyncClient(limits=limits)

        async def one() -> None:
            resp = await client.post(url, content=BODY, headers=HEADERS)
            if resp.status_code != 200:
                raise RuntimeError(f"httpx got HTTP {resp.status_code}")

        return one, client.aclose

    return opener


def dispatcher_client(url: str, concurrency: int) -> Opener:
    async def opener() -> Any:
        from django_strait.dispatch.http import HttpDispatcher, HttpRequest

        dispatcher = HttpDispatcher(limit=concurrency, allowed_networks=LOOPBACK)
        await dispatcher.start()
        request = HttpRequest(
            run_id=1, job="bench", attempt=1, payload=PAYLOAD, url=url, signing_secret="bench"
        )

        async def one() -> None:
            outcome = await dispatcher.dispatch(request)
            if not outcome.succeeded:
                raise RuntimeError(f"dispatcher failed: {outcome.error}")

        return one, dispatcher.close

    return opener


class _LeanConnection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection that reads Content-Length answers and nothing else."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future[tuple[int, bytes]] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0 or self.waiter is None:
            return
        head = bytes(self.buffer[:end]).split(b"\r\n")
        length = 0
        for line in head[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if len(self.buffer) - end - 4 < length:
            return
        body = bytes(self.buffer[end + 4 : end + 4 + length])
        del self.buffer[: end + 4 + length]
        self.waiter.set_result((int(head[0].split()[1]), body))

    def connection_lost(self, exc: Exception | None) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc or ConnectionError("closed"))


def lean_client(url: str, concurrency: int) -> Opener:
    """A minimal asyncio.Protocol client: what a plain HTTP/1.1 POST costs without aiohttp.

    Not a usable client (no chunked bodies, no timeouts, no TLS, no limits): the floor
    a leaner client than aiohttp could reach on this machine, with the dispatcher's
    body, headers and signature built per request.
    """

    async def opener() -> Any:
        from django_strait.dispatch.signing import sign

        loop = asyncio.get_running_loop()
        target = urllib.parse.urlsplit(url)
        idle: list[_LeanConnection] = []
        for _ in range(concurrency):
            _, proto = await loop.create_connection(_LeanConnection, target.hostname, target.port)
            idle.append(proto)
        fixed = (
            f"POST {target.path} HTTP/1.1\r\nHost: {target.netloc}\r\n"
            "User-Agent: django-strait\r\nContent-Type: application/json\r\n"
            "Accept-Encoding: identity\r\n"
        )

        async def one() -> None:
            body = BODY
            head = (
                f"{fixed}Strait-Run-Id: 1\r\nStrait-Attempt: 1\r\nIdempotency-Key: 1\r\n"
                f"Strait-Signature: {sign('bench', body, int(time.time()))}\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            )
            conn = idle.pop()
            try:
                conn.waiter = loop.create_future()
                assert conn.transport is not None
                conn.transport.write(head.encode("latin-1") + body)
                status, _ = await conn.waiter
            finally:
                idle.append(conn)
            if status != 200:
                raise RuntimeError(f"lean client got HTTP {status}")

        async def close() -> None:
            for conn in idle:
                if conn.transport is not None:
                    conn.transport.close()

        return one, close

    return opener


def urllib3_one_connection(url: str) -> Client:
    import urllib3

    target = urllib3.util.parse_url(url)
    pool = urllib3.HTTPConnectionPool(target.host, target.port, maxsize=1, block=True)

    def send(count: int) -> None:
        for _ in range(count):
            resp = pool.request("POST", target.path, body=BODY, headers=HEADERS)
            if resp.status != 200:
                raise RuntimeError(f"urllib3 got HTTP {resp.status}")

    return Client(send=send, close=pool.close)


def open_clients(loop: asyncio.AbstractEventLoop, url: str, only: list[str]) -> dict[str, Client]:
    """Open every client asked for (all by default), keyed by its report name."""
    openers: dict[str, Callable[[], Client]] = {}
    for c in (1, 10, 50, 100):
        openers[f"aiohttp_c{c}"] = lambda c=c: async_client(loop, aiohttp_client(url, c), c)
    openers["httpx_async_c50"] = lambda: async_client(loop, httpx_client(url, 50), 50)
    openers["urllib3_sync_1conn"] = lambda: urllib3_one_connection(url)
    openers["lean_protocol_c100"] = lambda: async_client(loop, lean_client(url, 100), 100)
    for c in (50, 100):
        openers[f"dispatcher_c{c}"] = lambda c=c: async_client(loop, dispatcher_client(url, c), c)
    unknown = sorted(set(only) - set(openers))
    if unknown:
        raise SystemExit(f"--only: unknown client(s) {unknown}; known: {sorted(openers)}")
    return {name: openers[name]() for name in only or openers}


def run_bench(url: str, n: int, reps: int, only: list[str]) -> dict[str, Any]:
    """Measure every client; reps are interleaved so that load from elsewhere hits all alike."""
    loop = asyncio.new_event_loop()
    try:
        clients = open_clients(loop, url, only)
        for client in clients.values():
            client.send(100)  # open the connections and warm the code paths
        for _ in range(reps):
            for client in clients.values():
                client.measure(n)
        for client in clients.values():
            client.close()
        return {name: client.summary(n) for name, client in clients.items()}
    finally:
        loop.close()


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {"python": platform.python_version()}
    for name in ("aiohttp", "httpx", "urllib3", "uvicorn"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "not installed"
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5000, help="requests per rep")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--only", default="", help="comma-separated client names")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve()
        return
    load_before = os.getloadavg()
    proc, url = start_server()
    try:
        only = [name for name in args.only.split(",") if name]
        results = run_bench(url, args.requests, args.reps, only)
    finally:
        proc.terminate()
        proc.wait(10)
    report = {
        "bench": "http_clients",
        "requests_per_rep": args.requests,
        "reps": args.reps,
        "cpus": os.cpu_count(),
        # Other processes on the box skew requests/s; cpu_us_per_request is steadier.
        "loadavg_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "server": "uvicorn + httptools + uvloop, bare ASGI app, own process, 127.0.0.1",
        "versions": versions(),
        "results": results,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
