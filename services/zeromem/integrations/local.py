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
    """Yield :class:`Settings` pointing at a running stack (as its administrator);
    everything stops on exit."""
    from zeromem.embedded import EmbeddedStack
    from zeromem.embedded.inprocess import InProcessServices

    with contextlib.ExitStack() as exits:
        if data_dir is None:
            data_dir = exits.enter_context(tempfile.TemporaryDirectory(prefix="zeromem-"))
        root = Path(data_dir)
        stack = EmbeddedStack(root / "stack").start()
        exits.callback(stack.stop)
        assert stack.authority is not None  # an embedded stack is secured by default
        # Secured like `zeromem up`: the services run under their own identities, and a
        # client given these settings (``MemoryClient.connect(..., settings=settings)``)
        # gets a credential for its tenant and agent from the stack's authority.
        settings = stack.settings_for(
            Settings(
                data_dir=root / "data", shards=shards, auth_dir=str(stack.authority.directory)
            ),
            "admin",
        )
        services = await InProcessServices.start(settings)
        try:
            yield settings
        finally:
            await services.stop()


def issue_credentials(settings: Settings, tenant: str, agent: str) -> Path:
    """A creds file for ``agent`` of ``tenant`` from the local stack's authority (what
    ``zeromem auth issue`` does from the command line), under the data directory. Pass it
    as ``MemoryClient.connect(creds=...)`` or in ``ZEROMEM_CREDS``."""
    from zeromem.auth.authority import Authority

    authority = Authority.load(settings.authority_dir)
    authority.create_tenant(tenant)
    path = Path(settings.data_dir) / "creds" / f"{tenant}-{agent}.creds"
    return authority.issue_agent(tenant, agent).write(path)
