"""Serve the project's WSGI app on 127.0.0.1 from a thread, for the demo's HTTP jobs."""

from __future__ import annotations

import threading
from socketserver import ThreadingMixIn
from types import TracebackType
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from django.core.wsgi import get_wsgi_application

HOST = "127.0.0.1"


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    # The worker calls the endpoints concurrently; one thread per request keeps
    # a slow answer from queueing the others, and daemon threads never block exit.
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        # One access-log line per attempt would drown the demo's summary.
        pass


class LocalServer:
    """The Django app on a free port of 127.0.0.1, for as long as the ``with`` lasts."""

    def __init__(self) -> None:
        self._server = make_server(
            HOST,
            0,
            get_wsgi_application(),
            server_class=_ThreadingWSGIServer,
            handler_class=_QuietHandler,
        )
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="strait-demo-http", daemon=True
        )

    @property
    def base_url(self) -> str:
        """Return ``http://127.0.0.1:<port>``."""
        return f"http://{HOST}:{self._server.server_port}"

    def __enter__(self) -> LocalServer:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
