"""A tenant-less sink for the noisy neighbour's flood: a nats-server of its own with the
deployment's streams (so the flood's writes are stored and acknowledged as usual) and a
process that takes every read request and never answers it (so the flood's requesters
wait out their timeout, as most of them do against the read gate), both at the lowest CPU
priority, like the flood itself. Sending the flood here instead of to the deployment
measures what the flood's own process costs tenant B on the shared cores: the part of the
noisy-neighbour ratio that no design of the services can remove.

    python -m tests.reliability.sink NATS_URL     (the absorbing process)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator

from nats.aio.msg import Msg

from tests.reliability.cluster import REPO, Cluster
from zeromem import naming
from zeromem.bus import connect_nats, provision
from zeromem.embedded import NatsServer
from zeromem.settings import Settings


@contextlib.asynccontextmanager
async def tenantless_sink(cluster: Cluster) -> AsyncIterator[str]:
    """The sink's NATS URL while it runs (it trusts the cluster's authority)."""
    server = NatsServer(cluster.root / "sink", authority=cluster.authority)
    server.start()
    absorber: subprocess.Popen[bytes] | None = None
    try:
        assert server.process is not None
        os.setpriority(os.PRIO_PROCESS, server.process.pid, 19)
        settings = cluster.settings.with_(bus={"nats_url": server.url})
        nc = await connect_nats(settings, "sink-provision")
        try:
            await provision(nc.jetstream(), settings)
        finally:
            await nc.close()
        absorber = subprocess.Popen(
            ["nice", "-n", "19", sys.executable, "-m", "tests.reliability.sink", server.url],
            cwd=REPO,
            env=cluster.env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        yield server.url
    finally:
        if absorber is not None:
            absorber.kill()
            absorber.wait()
        server.stop()


async def absorb(url: str) -> None:
    """Take every read request on ``url`` and answer none."""
    settings = Settings.from_env().with_(bus={"nats_url": url})
    nc = await connect_nats(settings, "sink")

    async def drop(msg: Msg) -> None:
        return None

    await nc.subscribe(naming.query_subject_all("*"), cb=drop)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(absorb(sys.argv[1]))
