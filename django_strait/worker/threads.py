"""The worker's database threads: one connection each, so their work overlaps.

The claim thread claims, gates and starts; the record thread records, heartbeats
and watches process runs; the duty thread runs the duties and the registration;
the webhook thread claims and settles completion webhooks. The claim and record
threads are the hot ones: before each call the storage backend may let their
connections prepare its statements (``Storage.keep_plans``), a question the
worker does not answer itself.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from django.db import connections

if TYPE_CHECKING:
    from django_strait.storage import Storage

T = TypeVar("T")


class DatabaseThreads:
    """Four single-thread pools on one database alias, called from the worker's loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, storage: Storage) -> None:
        self._loop = loop
        self.storage = storage
        self.alias = storage.alias
        self._claim = ThreadPoolExecutor(1, thread_name_prefix="strait-claim")
        self._record = ThreadPoolExecutor(1, thread_name_prefix="strait-record")
        self._duty = ThreadPoolExecutor(1, thread_name_prefix="strait-duty")
        self._webhook = ThreadPoolExecutor(1, thread_name_prefix="strait-webhook")

    async def claim(self, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        """Call on the claim thread, whose connection may prepare the hot statements."""
        return await self._call(self._claim, self._hot, fn, args, kw)

    async def record(self, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        """Call on the record thread, whose connection may prepare the hot statements."""
        return await self._call(self._record, self._hot, fn, args, kw)

    async def duty(self, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        return await self._call(self._duty, self._guarded, fn, args, kw)

    async def webhook(self, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        return await self._call(self._webhook, self._guarded, fn, args, kw)

    async def close(self) -> None:
        """Close each thread's connection, then the thread."""
        for pool in (self._claim, self._record, self._duty, self._webhook):
            await self._call(pool, self._guarded, connections.close_all, (), {})
            pool.shutdown(wait=True)

    async def _call(self, pool: ThreadPoolExecutor, how: Callable[..., T], *args: Any) -> T:
        return await self._loop.run_in_executor(pool, how, *args)

    def _hot(self, fn: Callable[..., T], args: tuple, kwargs: dict) -> T:
        """:meth:`_guarded`, on a connection the storage may let prepare its hot statements."""

        def call(*args: Any, **kwargs: Any) -> T:
            self.storage.keep_plans(time.monotonic())
            return fn(*args, **kwargs)

        return self._guarded(call, args, kwargs)

    def _guarded(self, fn: Callable[..., T], args: tuple, kwargs: dict) -> T:
        """Call ``fn`` on a database thread, dropping a broken connection so the next call reconnects."""
        try:
            return fn(*args, **kwargs)
        except Exception:
            connections[self.alias].close_if_unusable_or_obsolete()
            raise
