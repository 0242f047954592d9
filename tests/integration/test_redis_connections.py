"""A connection Redis closed (a restart, a client kill, a proxy's idle cut) is noticed on
its next use and replaced there: the request that met it is answered, not failed."""

from __future__ import annotations

from tests.harness import ServiceSet
from zeromem.bus import connect_redis
from zeromem.sdk import MemoryClient
from zeromem.settings import Settings


async def test_reads_and_writes_after_redis_closed_every_connection(isolated: Settings) -> None:
    services = await ServiceSet.start(isolated)
    redis = connect_redis(isolated)
    try:
        async with await MemoryClient.connect(
            isolated.bus.nats_url, tenant="acme", shards=isolated.shards
        ) as client:
            await client.put("user:u1:a", 1, content="alpha beta", wait="applied")
            assert (await client.recall("alpha", owners=["user:u1"])).memories
            assert await client.get("user:u1:a") is not None
            # Every service's pooled connections, on a server of this test's own.
            assert await redis.client_kill_filter(_type="normal", skipme=True) >= 2
            reply = await client.recall("alpha", owners=["user:u1"])
            assert [m.key for m in reply.memories] == ["user:u1:a"]
            item = await client.get("user:u1:a")
            assert item is not None and item.value == 1
            put = await client.put("user:u1:b", 2, content="gamma", wait="applied")
            assert put.status == "applied"
    finally:
        await redis.aclose()
        await services.stop()
