"""Send one HTTP/1.1 request over a pooled keep-alive connection and read a bounded answer.

The dispatcher's client. A worker sends small POST, PUT and PATCH requests with a
JSON body and reads at most a few kilobytes of each answer; aiohttp's general
request path cost about 70 µs of CPU per request on the project's machine, this one
about a third of that (bench/http_clients.py, docs/http-client.md). llhttp, through
httptools (the parser uvicorn uses), reads the answer; this module owns the rest:

- the connection pool: at most ``limit`` connections open, an idle one reused
  for :data:`KEEPALIVE_SECONDS`, one request at a time on each;
- the SSRF guard on every new connection: the host name resolved through
  :class:`~django_strait.dispatch.ssrf.GuardedResolver` (answers kept
  :data:`DNS_TTL_SECONDS`), every address it returns checked again by
  :meth:`~django_strait.dispatch.ssrf.AddressGuard.socket` before that exact address
  is connected to;
- one total deadline for connecting, sending and reading;
- bounds on what the endpoint sends: the status line and headers at most
  :data:`MAX_HEAD_BYTES` and :data:`MAX_HEADERS`, the body read only up to the
  caller's limit, after which the connection is closed rather than drained.

Nothing else: no redirects, cookies, proxies, compression or retries (docs/http-jobs.md).
"""

from __future__ import annotations

import asyncio
import base64
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httptools
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from django_strait.dispatch.addresses import AddressRefused
from django_strait.dispatch.ssrf import AddressGuard, GuardedResolver

__all__ = ["Client", "ConnectError", "RequestTimeout", "Response", "ResponseError"]

#: An idle connection is closed after this long (aiohttp's default too).
KEEPALIVE_SECONDS = 15.0
#: A host name's checked addresses are reused this long before it is resolved again.
DNS_TTL_SECONDS = 10.0
#: The most bytes of status line and headers read before the answer is refused.
MAX_HEAD_BYTES = 65536
#: The most header lines an answer may have.
MAX_HEADERS = 128

_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True, slots=True)
class Response:
    """An endpoint's answer: status, headers and the first bytes of the body."""

    status: int
    headers: CIMultiDictProxy[str]
    body: bytes

    @property
    def charset(self) -> str | None:
        """Return the ``charset`` parameter of Content-Type, lower-cased, or None."""
        for param in self.headers.get("Content-Type", "").split(";")[1:]:
            name, _, value = param.partition("=")
            if name.strip().lower() == "charset":
                return value.strip().strip('"').lower() or None
        return None


class ConnectError(ConnectionError):
    """No connection to the endpoint could be opened (DNS, TCP or TLS failed)."""

    def __init__(self, host: str, port: int, os_error: BaseException) -> None:
        super().__init__(f"Cannot connect to host {host}:{port}: {os_error}")
        self.os_error = os_error


class ResponseError(ConnectionError):
    """The answer could not be read: cut short, malformed, or past the bounds."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class RequestTimeout(TimeoutError):
    """The deadline passed; ``status`` is set if the answer's head had arrived."""

    def __init__(self, seconds: float, status: int | None) -> None:
        super().__init__(f"no complete answer within {seconds:g} s")
        self.status = status


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection, answering one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self.status: int | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[Response] | None = None
        self._limit: Callable[[int], int] = _nothing
        self._reset()

    def _reset(self) -> None:
        self.status = None
        self._headers: CIMultiDict[str] = CIMultiDict()
        self._head_bytes = 0
        self._framed = False
        self._room = 0
        self._body: list[bytes] = []
        self._complete = False
        self._keep_alive = False

    # Asking

    def send(self, data: bytes, limit: Callable[[int], int]) -> asyncio.Future[Response]:
        """Write one request and return the future of its answer."""
        if self.closed or self.transport is None or self.transport.is_closing():
            raise ResponseError("Server disconnected before the request was sent")
        self._reset()
        self._limit = limit
        self._waiter = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        return self._waiter

    @property
    def reusable(self) -> bool:
        """Tell whether the last answer was read whole and the endpoint keeps the connection."""
        return self._waiter is None and self._complete and self._keep_alive and not self.closed

    def close(self) -> None:
        """Close the connection; a request waiting on it fails."""
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self._waiter is None:
            self.close()  # bytes nobody asked for: the connection cannot be trusted again
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(ResponseError("The endpoint switched protocols", self.status))
            return
        except httptools.HttpParserError as exc:
            self._fail(ResponseError(f"Malformed answer: {exc}", self.status))
            return
        if self.status is None and self._waiter is not None:
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                self._fail(ResponseError(f"Answer head longer than {MAX_HEAD_BYTES} bytes"))

    def eof_received(self) -> bool:
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._waiter is None:
            return
        if self.status is not None and not self._framed:
            self._finish()  # no Content-Length and not chunked: the body ends with the connection
            self._keep_alive = False
        else:
            self._fail(
                ResponseError("Server disconnected before the answer was complete", self.status)
            )

    # httptools callbacks

    def on_header(self, name: bytes, value: bytes) -> None:
        if len(self._headers) >= MAX_HEADERS:
            self._fail(ResponseError(f"Answer has more than {MAX_HEADERS} headers"))
            return
        self._headers.add(name.decode("latin-1"), value.decode("utf-8", "replace"))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200:
            self._headers = (
                CIMultiDict()
            )  # an interim answer (100 Continue, 103): the real one follows
            return
        self.status = status
        self._keep_alive = self._parser.should_keep_alive()
        self._framed = "Content-Length" in self._headers or "Transfer-Encoding" in self._headers
        self._room = self._limit(status)
        if self._room <= 0:
            self._finish()

    def on_body(self, body: bytes) -> None:
        if self._waiter is None or self.status is None:
            return
        if len(body) >= self._room:
            self._body.append(body[: self._room])
            self._room = 0
            self._finish()  # as much as the caller reads: the rest is never read
            return
        self._body.append(body)
        self._room -= len(body)

    def on_message_complete(self) -> None:
        if self.status is None:
            return  # the end of an interim answer
        self._complete = True
        self._finish()

    # Settling

    def _finish(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is None or waiter.done() or self.status is None:
            return
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        waiter.set_result(Response(self.status, CIMultiDictProxy(self._headers), body))

    def _fail(self, exc: BaseException) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        self.close()


def _nothing(status: int) -> int:
    return 0


class Client:
    """A pool of HTTP/1.1 connections under one SSRF guard; one per dispatcher."""

    def __init__(self, guard: AddressGuard, *, limit: int = 100) -> None:
        self._guard = guard
        self._resolver = GuardedResolver(guard)
        self._slots = asyncio.Semaphore(limit) if limit else None
        self._limit = limit
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self._open: set[_Connection] = set()
        self._dns: dict[tuple[str, int], tuple[float, list[tuple[Any, ...]]]] = {}
        self._tls: ssl.SSLContext | None = None
        self._sweep: asyncio.TimerHandle | None = None

    async def send(
        self,
        method: str,
        url: URL,
        headers: CIMultiDict[str],
        body: bytes,
        *,
        timeout: float,
        read_limit: Callable[[int], int],
    ) -> Response:
        """Send one request and return the answer, its body cut at ``read_limit(status)`` bytes."""
        data = _request_bytes(method, url, headers, body)
        conn: _Connection | None = None
        key = (url.scheme, url.raw_host or "", url.port or _DEFAULT_PORTS[url.scheme])
        try:
            async with asyncio.timeout(timeout):
                if self._slots is not None:
                    await self._slots.acquire()
                try:
                    conn = await self._connection(key)
                    return await conn.send(data, read_limit)
                finally:
                    if self._slots is not None:
                        self._slots.release()
        except TimeoutError as exc:
            if exc.errno is not None:
                raise  # the operating system's own timeout (ETIMEDOUT), not the deadline
            raise RequestTimeout(timeout, conn.status if conn else None) from exc
        finally:
            if conn is not None:
                self._release(key, conn)

    async def close(self) -> None:
        """Close every connection and the resolver."""
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for conn in list(self._open):
            conn.close()
        self._open.clear()
        self._idle.clear()
        await self._resolver.close()

    # Connections

    async def _connection(self, key: tuple[str, str, int]) -> _Connection:
        idle = self._idle.get(key)
        now = asyncio.get_running_loop().time()
        while idle:
            conn = idle.pop()  # the most recently used: the warmest
            if not conn.closed and now - conn.idle_since < KEEPALIVE_SECONDS:
                return conn
            self._drop(conn)
        return await self._connect(*key)

    def _release(self, key: tuple[str, str, int], conn: _Connection) -> None:
        if not conn.reusable:
            self._drop(conn)
            return
        loop = asyncio.get_running_loop()
        conn.idle_since = loop.time()
        self._idle.setdefault(key, []).append(conn)
        if self._sweep is None:
            self._sweep = loop.call_later(KEEPALIVE_SECONDS, self._close_expired)

    def _drop(self, conn: _Connection) -> None:
        conn.close()
        self._open.discard(conn)

    def _close_expired(self) -> None:
        self._sweep = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        for key, idle in list(self._idle.items()):
            kept = [c for c in idle if not c.closed and now - c.idle_since < KEEPALIVE_SECONDS]
            for conn in idle:
                if conn not in kept:
                    self._drop(conn)
            if kept:
                self._idle[key] = kept
            else:
                del self._idle[key]
        if self._idle:
            self._sweep = loop.call_later(KEEPALIVE_SECONDS, self._close_expired)

    def _make_room(self) -> None:
        """Close the longest-idle connection if the pool is at its limit."""
        if not self._limit or len(self._open) < self._limit:
            return
        oldest: tuple[float, tuple[str, str, int]] | None = None
        for key, idle in self._idle.items():
            if idle and (oldest is None or idle[0].idle_since < oldest[0]):
                oldest = (idle[0].idle_since, key)
        if oldest is not None:
            self._drop(self._idle[oldest[1]].pop(0))

    async def _connect(self, scheme: str, host: str, port: int) -> _Connection:
        loop = asyncio.get_running_loop()
        tls = self._tls_context() if scheme == "https" else None
        last: BaseException | None = None
        for info in await self._addresses(host, port):
            sock = self._guard.socket(info)  # refuses a forbidden address: AddressRefused
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                await loop.sock_connect(sock, info[4])
                self._make_room()
                _, conn = await loop.create_connection(
                    _Connection, sock=sock, ssl=tls, server_hostname=host if tls else None
                )
            except OSError as exc:  # ssl.SSLError and certificate errors are OSErrors too
                sock.close()
                last = exc
                continue
            except BaseException:
                sock.close()
                raise
            self._open.add(conn)
            return conn
        raise ConnectError(host, port, last or OSError("no address to connect to"))

    async def _addresses(self, host: str, port: int) -> list[tuple[Any, ...]]:
        """Return the addrinfo tuples to try for ``host``, checked by the guard's resolver."""
        try:
            # An IP address in the URL: no DNS; the socket factory checks it.
            return socket.getaddrinfo(
                host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST
            )
        except socket.gaierror:
            pass
        now = asyncio.get_running_loop().time()
        cached = self._dns.get((host, port))
        if cached is not None and cached[0] > now:
            return cached[1]
        try:
            results = await self._resolver.resolve(host, port, family=socket.AF_UNSPEC)
        except AddressRefused:
            raise
        except OSError as exc:
            raise ConnectError(host, port, exc) from exc
        infos = [_addrinfo(r) for r in results]
        if len(self._dns) > 1024:
            self._dns.clear()
        self._dns[(host, port)] = (now + DNS_TTL_SECONDS, infos)
        return infos

    def _tls_context(self) -> ssl.SSLContext:
        if self._tls is None:
            self._tls = ssl.create_default_context()
        return self._tls


def _addrinfo(result: Any) -> tuple[Any, ...]:
    family = result["family"]
    if family == socket.AF_INET6:
        sockaddr: tuple[Any, ...] = (result["host"], result["port"], 0, 0)
    else:
        sockaddr = (result["host"], result["port"])
    return (family, socket.SOCK_STREAM, result["proto"], "", sockaddr)


def _request_bytes(method: str, url: URL, headers: CIMultiDict[str], body: bytes) -> bytes:
    """Return the request's head and body as they go on the wire."""
    lines = [f"{method} {url.raw_path_qs} HTTP/1.1"]
    if "Host" not in headers:
        lines.append(f"Host: {url.host_port_subcomponent}")
    if "Accept" not in headers:
        lines.append("Accept: */*")
    if (url.user or url.password) and "Authorization" not in headers:
        lines.append(f"Authorization: {_basic(url)}")
    lines.extend(f"{name}: {value}" for name, value in headers.items())
    lines.append(f"Content-Length: {len(body)}")
    head = "\r\n".join(lines)
    # Names and values were checked when the job was saved; this is the last line of
    # defence against a header that would end the head early and inject another.
    if head.count("\n") != len(lines) - 1 or head.count("\r") != len(lines) - 1 or "\0" in head:
        raise ValueError("a request header contains CR, LF or NUL; it cannot be sent")
    return head.encode("utf-8") + b"\r\n\r\n" + body


def _basic(url: URL) -> str:
    """Return the Basic credentials written in ``url`` (user:password@host), as aiohttp sent them."""
    raw = f"{url.user or ''}:{url.password or ''}".encode("latin-1", "replace")
    return "Basic " + base64.b64encode(raw).decode("ascii")
