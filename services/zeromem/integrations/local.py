"""A whole zeromem stack inside one process, for examples and notebooks on a fresh machine.

Starts the embedded NATS and Redis servers (free ports, a temporary data directory), then a
worker for every shard and the read services on this event loop: the same pieces the test
harness runs, reachable without ``zeromem up`` in another shell.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from zeromem.settings import Settings


@contextlib.asynccontextmanager
async def local_stack(
    data_dir: Path | str | None = None, *, shards: int = 4
) -> AsyncIterator[Settings]:
    """Yield :class:`Settings` pointing at a running stack; everything stops on exit."""
    from zeromem.bus import connect_nats, connect_redis
    from zeromem.embedded import EmbeddedStack
    from zeromem.serve import build_read_broker
    from zeromem.worker.service import WorkerService

    with contextlib.ExitStack() as exits:
        if data_dir is None:
            data_dir = exits.enter_context(tempfile.TemporaryDirectory(prefix="zeromem-"))
        root = Path(data_dir)
        stack = EmbeddedStack(root / "stack").start()
        exits.callback(stack.stop)
        settings = Settings(
            nats_url=stack.nats_url,
            redis_url=stack.redis_url,
            data_dir=root / "data",
            shards=shards,
        )
        closers: list[Any] = []
        try:
            nc = await connect_nats(settings, name="zeromem-local-worker")
            redis = connect_redis(settings)
            closers += [nc.close, redis.aclose]
            worker = await WorkerService(settings, list(range(shards)), nc=nc, redis=redis).start()
            closers.insert(0, worker.stop)
            await worker.wait_owned()
            read_redis = connect_redis(settings)
            closers.append(read_redis.aclose)
            broker = build_read_broker(settings, read_redis)
            await broker.start()
            closers.insert(1, broker.stop)
            yield settings
        finally:
            for close in closers:
                with contextlib.suppress(Exception):
                    await close()
