"""Tenants present over the deployment (``worker.fairness.share_presence``), on a real
Redis: a worker that sees one tenant alone still keeps its calls small while another
tenant writes through another worker, and stops once that tenant has gone quiet."""

from __future__ import annotations

import asyncio
import time

from tests.eventually import eventually
from zeromem.bus import connect_redis
from zeromem.sdk import MemoryClient
from zeromem.settings import Settings
from zeromem.store.keys import tenant_presence_key
from zeromem.worker.fairness import PRESENCE_S, Presence, share_presence


async def test_a_worker_knows_a_tenant_another_worker_serves(isolated: Settings) -> None:
    redis = connect_redis(isolated)
    stopping = asyncio.Event()
    here, there = Presence(), Presence()  # two workers' presences
    tasks = [asyncio.create_task(share_presence(p, redis, stopping, 0.05)) for p in (here, there)]
    try:
        here.seen("a", time.monotonic())
        there.seen("a", time.monotonic())
        await asyncio.sleep(0.3)
        assert not here.shared() and not there.shared()  # one tenant, on both workers
        there.seen("b", time.monotonic())
        await eventually(here.shared, timeout=2.0)  # b only ever wrote through "there"
        assert there.shared()
        # b goes quiet: once its last message is older than PRESENCE_S, calls grow again.
        until = time.monotonic() + 3 * PRESENCE_S
        while time.monotonic() < until and here.shared():
            here.seen("a", time.monotonic())
            there.seen("a", time.monotonic())
            await asyncio.sleep(0.05)
        assert not here.shared() and not there.shared()
        assert set(await redis.zrange(tenant_presence_key(), 0, -1)) >= {b"a", b"b"}
    finally:
        stopping.set()
        await asyncio.gather(*tasks)
        await redis.aclose()


async def test_a_worker_judges_by_its_own_tenants_when_the_record_is_stale() -> None:
    presence = Presence()
    now = time.monotonic()
    presence.seen("a", now)
    presence.heard(2, now)
    assert presence.shared()
    presence.heard(2, now - 2 * PRESENCE_S)  # Redis has not answered for a while
    assert not presence.shared()
    presence.seen("b", now)
    assert presence.shared()


async def test_the_running_worker_records_the_tenants_it_serves(
    running: Settings, client: MemoryClient, tenant: str
) -> None:
    await client.put("user:u1:k", 1, wait="applied")
    redis = connect_redis(running)
    try:
        score = await eventually(
            lambda: redis.zscore(tenant_presence_key(), tenant), lambda s: s is not None
        )
        assert abs(score - time.time()) < 5.0
    finally:
        await redis.aclose()
