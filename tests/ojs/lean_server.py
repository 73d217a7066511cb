"""The OJS fast door (``django_strait.ojs.lean``) served by uvicorn on 127.0.0.1 in a thread.

In this process, so that it works on the test database; Django's ASGI application
behind it serves every other request, as ``django_strait.ojs.asgi`` does.
"""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@contextmanager
def serving_lean() -> Iterator[str]:
    """Serve the fast door; yield its base URL; stop it (and wait for it) on leaving."""
    import uvicorn
    from django.core.asgi import get_asgi_application

    from django_strait.ojs.lean import LeanOjs

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = LeanOjs(get_asgi_application(), threads=4)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        assert not thread.is_alive(), "uvicorn did not stop"


@dataclass
class Sent:
    status_code: int
    content: bytes


class HttpClient:
    """What the fuzz asks of Django's test client (``generic``), over HTTP to ``base``."""

    def __init__(self, base: str, headers: dict[str, str]) -> None:
        host, port = base.removeprefix("http://").split(":")
        self.host, self.port, self.headers = host, int(port), headers

    def generic(
        self, method: str, path: str, data: Any = None, content_type: str = "", **extra: Any
    ) -> Sent:
        query = extra.get("QUERY_STRING", "")
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        try:
            headers = dict(self.headers)
            if content_type:
                headers["Content-Type"] = content_type
            body = data if isinstance(data, bytes) else (data or "").encode()
            conn.request(method, path + ("?" + query if query else ""), body, headers)
            response = conn.getresponse()
            return Sent(response.status, response.read())
        finally:
            conn.close()
