"""A blocking wrapper over ``MemoryClient`` for agents that are not async.

The async client runs on an event loop in a daemon thread; each method submits the
coroutine there and waits for it, so one connection serves every calling thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from zeromem.sdk.client import MemoryClient

T = TypeVar("T")


class SyncMemoryClient:
    def __init__(self, url: str | None = None, **kwargs: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, daemon=True, name="zeromem-sdk"
        )
        self._thread.start()
        self._client: MemoryClient = self._run(MemoryClient.connect(url, **kwargs))

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not asyncio.iscoroutinefunction(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._run(attr(*args, **kwargs))

        call.__doc__ = attr.__doc__
        return call

    def close(self) -> None:
        self._run(self._client.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def __enter__(self) -> SyncMemoryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
