"""A fast HTTP endpoint for the benchmark, in its own process on 127.0.0.1.

The same kind of server as the peer harness's HTTP ceiling (a bare ASGI app under
uvicorn with httptools and uvloop), so its CPU share is as small as it gets on a
machine the worker shares. Prints its URL on the first line of stdout, then
answers 200 ``{}`` to every request after reading its body.
"""

from __future__ import annotations

import socket

import uvicorn


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json"), (b"content-length", b"2")],
        }
    )
    await send({"type": "http.response.body", "body": b"{}"})


def main() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    print(f"http://127.0.0.1:{sock.getsockname()[1]}/hook", flush=True)
    config = uvicorn.Config(
        app, loop="uvloop", http="httptools", access_log=False, log_level="warning", lifespan="on"
    )
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
