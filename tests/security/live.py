"""Requests to a live server on 127.0.0.1, as an attacker would send them."""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

# No proxy: the live server is on 127.0.0.1, and nothing here may leave it.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class Answer:
    status: int
    body: Any
    headers: dict[str, str]

    @property
    def error(self) -> dict[str, Any]:
        return self.body["error"]


def call(url: str, method: str = "GET", body: Any = None, *, key: str | None = None) -> Answer:
    """Send one request; return its status, decoded JSON body (or text) and headers."""
    assert url.startswith(("http://127.0.0.1:", "http://localhost:")), url
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if key is not None:
        request.add_header("Authorization", f"Api-Key {key}")
    try:
        with _OPENER.open(request, timeout=30) as response:
            return _answer(response.status, response.read(), response.headers)
    except urllib.error.HTTPError as exc:
        return _answer(exc.code, exc.read(), exc.headers)


def _answer(status: int, raw: bytes, headers: Any) -> Answer:
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        body = raw.decode("utf-8", "replace")
    return Answer(status, body, dict(headers.items()))


def run_burst_worker(env: dict[str, str], *args: str, timeout: float = 90) -> tuple[int, str]:
    """Run one ``run_strait_worker --burst`` process to its end; return its exit code and output.

    The process is killed if it has not exited within ``timeout`` (or the test fails).
    """
    from tests.conftest import worker_command

    worker = subprocess.Popen(
        worker_command("--burst", "--worker-id", "security-w0", *args),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        output = worker.communicate(timeout=timeout)[0]
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    return worker.returncode, output
