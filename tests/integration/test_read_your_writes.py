"""Read your writes: a fire-and-forget write is acknowledged once stored, before a worker
applies it; a read the same client makes next still sees it (``query.consistency``)."""

from __future__ import annotations

import time

from zeromem.query.consistency import wait_applied
from zeromem.sdk import MemoryClient
from zeromem.settings import Settings

ROUNDS = 40


async def test_a_read_right_after_a_fire_and_forget_write_sees_it(
    running: Settings, tenant: str
) -> None:
    async with await MemoryClient.connect(
        running.bus.nats_url, tenant=tenant, agent="rw", shards=running.shards
    ) as client:
        for i in range(ROUNDS):
            await client.put(f"task:t{i}:step", i, content=f"step {i} of the plan")  # no wait
            item = await client.get(f"task:t{i}:step")
            assert item is not None and item.value == i, f"round {i}: own write not seen"
            await client.put(f"task:t{i}:step", i + 1000)
            page = await client.list(f"task:t{i}:")
            assert [m.value for m in page.items] == [i + 1000]
            await client.put(f"task:t{i}:note", f"reminder {i}", content=f"reminder number {i}")
            reply = await client.recall(f"reminder number {i}", owners=[f"task:t{i}"], k=2)
            assert any(m.key == f"task:t{i}:note" for m in reply.memories), f"round {i}"


async def test_without_it_a_read_does_not_wait(running: Settings, tenant: str) -> None:
    """The control: the same sequence with read-your-writes off misses writes not yet
    applied, so the test above can fail (and the wait is what makes it pass)."""
    async with await MemoryClient.connect(
        running.bus.nats_url,
        tenant=tenant,
        agent="rw",
        shards=running.shards,
        read_your_writes=False,
    ) as client:
        missed = 0
        for i in range(ROUNDS):
            await client.put(f"task:t{i}:step", i)
            item = await client.get(f"task:t{i}:step")
            missed += item is None
        assert missed > 0, "every read saw its write anyway: the control shows nothing"


async def test_the_wait_is_bounded(running: Settings) -> None:
    """A position no shard reaches (a write that was never applied): the read waits the
    configured time, then answers with what is applied."""
    from zeromem.bus import connect_redis

    redis = connect_redis(running)
    try:
        started = time.monotonic()
        assert not await wait_applied(redis, [(0, 10**15)], 0.2, running.shards)
        assert 0.15 < time.monotonic() - started < 1.0
        assert await wait_applied(redis, [(running.shards + 5, 10**15)], 0.2, running.shards)
    finally:
        await redis.aclose()


async def test_a_tenants_own_applied_position_answers_for_its_writes(
    running: Settings, tenant: str
) -> None:
    """The shard's position is a low-water mark over every tenant, held back by another
    tenant's backlog while tenants take turns; the worker also records how far each
    tenant's own messages are applied when the shard's does not say so already
    (tests/unit/test_applied_position.py), and a read of that tenant waits on either."""
    from tests.eventually import eventually
    from zeromem import naming
    from zeromem.bus import connect_redis
    from zeromem.store.keys import redis_keys, shard_sequence_key

    redis = connect_redis(running)
    try:
        async with await MemoryClient.connect(
            running.bus.nats_url, tenant=tenant, agent="rw", shards=running.shards
        ) as client:
            await client.put("task:t1:step", 1)  # fire and forget
            await client.flush()
            shard = naming.shard_for(tenant, "task:t1", running.shards)
            written = client._acks.positions[shard]

            async def at() -> int:
                return int(await redis.hget(shard_sequence_key(shard), str(shard)) or 0)

            # Alone on its shard, the write moves the shard's own position past it, so the
            # worker writes no position of the tenant's for it: one Redis call fewer.
            assert await eventually(at, lambda p: p >= written)
            assert await redis.get(redis_keys(tenant).applied(shard)) is None
        # A position the shard has not reached: answered by the tenant's own position
        # alone (set here past the shard's), and only for that tenant.
        shard_at = int(await redis.hget(shard_sequence_key(shard), str(shard)) or 0)
        ahead = shard_at + 10**9
        await redis.set(redis_keys(tenant).applied(shard), ahead)
        started = time.monotonic()
        assert await wait_applied(redis, [(shard, ahead)], 2.0, running.shards, tenant)
        assert time.monotonic() - started < 0.5
        assert not await wait_applied(redis, [(shard, ahead)], 0.2, running.shards)
        assert not await wait_applied(redis, [(shard, ahead)], 0.2, running.shards, "other")
    finally:
        await redis.aclose()
