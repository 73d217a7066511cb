"""A fast HTTP endpoint for the benchmark, in its own process on 127.0.0.1.

Prints its URL on the first line of stdout, then serves 200 ``{}`` to every POST.
"""

from __future__ import annotations

import asyncio
import sys

from aiohttp import web


async def ok(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(body=b"{}", content_type="application/json")


async def main() -> None:
    app = web.Application()
    app.router.add_post("/{tail:.*}", ok)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    print(f"http://127.0.0.1:{port}/hook", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
