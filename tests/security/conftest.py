"""A raw HTTP client for the live server on 127.0.0.1: hostile headers, bodies and queries as sent."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.core.cache import cache

from django_strait.api.auth import issue_key

API = "/api/strait"


@dataclass(frozen=True)
class Answer:
    """A response as it came over the wire."""

    status: int
    headers: Mapping[str, str]
    body: bytes

    @property
    def error(self) -> dict[str, Any]:
        """Return the ``error`` object, failing the test if the body is not the error shape."""
        data = json.loads(self.body)
        assert set(data) == {"error"} and set(data["error"]) == {"code", "message", "details"}
        return data["error"]

    def json(self) -> Any:
        return json.loads(self.body)


class Wire:
    """Send requests byte for byte to the live server (http.client: no client-side checks)."""

    def __init__(self, port: int, key: str) -> None:
        self.port = port
        self.key = key

    def send(
        self,
        method: str,
        path: str,
        *,
        body: bytes | str | None = None,
        headers: Mapping[str, str | bytes] | None = None,
        key: bool = True,
    ) -> Answer:
        """Send ``method path`` (under the API's mount) with ``headers`` as given."""
        sent: dict[str, str | bytes] = {}
        if key:
            sent["Authorization"] = f"Api-Key {self.key}"
        if body is not None:
            body = body.encode() if isinstance(body, str) else body
            sent["Content-Type"] = "application/json"
            sent["Content-Length"] = str(len(body))
        sent.update(headers or {})
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            connection.putrequest(method, API + path, skip_accept_encoding=True)
            for name, value in sent.items():
                connection.putheader(name, value)
            connection.endheaders(body)
            response = connection.getresponse()
            return Answer(response.status, dict(response.getheaders()), response.read())
        finally:
            connection.close()

    def post(self, path: str, body: Any, **options: Any) -> Answer:
        """POST ``body``: text as it is, anything else as JSON."""
        text = body if isinstance(body, str | bytes) else json.dumps(body)
        return self.send("POST", path, body=text, **options)

    def get(self, path: str, **options: Any) -> Answer:
        return self.send("GET", path, **options)


@pytest.fixture(autouse=True)
def fresh_throttles() -> Iterator[None]:
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def wire(live_server) -> Wire:
    """A client of the live server holding a key with every scope."""
    port = urlsplit(live_server.url).port
    assert port is not None
    return Wire(port, issue_key("security", ["*"])[1])
