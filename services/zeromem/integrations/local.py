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

from zeromem.settings import Settings


@contextlib.asynccontextmanager
async def local_stack(
    data_dir: Path | str | None = None, *, shards: int = 4
) -> AsyncIterator[Settings]:
    """Yield :class:`Settings` pointing at a running stack; everything stops on exit."""
    from zeromem.embedded import EmbeddedStack
    from zeromem.embedded.inprocess import InProcessServices

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
        services = await InProcessServices.start(settings)
        try:
            yield settings
        finally:
            await services.stop()
