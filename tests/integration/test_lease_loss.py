"""A lost lease says how it was lost: expired before a renewal came (the worker's own event
loop or Redis held up past the lease's life, nobody else involved) or taken by another
worker. The two call for different fixes, and the worker's log is where an operator
tells them apart."""

from __future__ import annotations

import asyncio

import pytest

from zeromem.bus import connect_redis
from zeromem.settings import Settings
from zeromem.store.keys import shard_lease_key
from zeromem.worker.lease import LeaseLostError, ShardLeases

SHARD = 9_001  # past any deployment's shards: the session's workers never hold it


async def test_an_expired_lease_is_reported_with_how_late_the_renewal_was(
    settings: Settings,
) -> None:
    redis = connect_redis(settings)
    leases = ShardLeases(redis, ttl_s=0.3)
    try:
        await leases.acquire(SHARD)
        await redis.delete(shard_lease_key(SHARD))  # as if it had lived out its time
        with pytest.raises(LeaseLostError) as lost:
            await asyncio.wait_for(leases.keep(SHARD), 5.0)
        assert lost.value.how.startswith("the lease expired: ")
        assert "since its last renewal" in lost.value.how
    finally:
        await leases.release(SHARD)
        await redis.aclose()


async def test_a_lease_taken_by_another_worker_is_reported_as_such(settings: Settings) -> None:
    redis = connect_redis(settings)
    mine, theirs = ShardLeases(redis, ttl_s=0.3), ShardLeases(redis, ttl_s=30.0)
    try:
        await mine.acquire(SHARD)
        await redis.set(shard_lease_key(SHARD), theirs.token, px=30_000)
        with pytest.raises(LeaseLostError) as lost:
            await asyncio.wait_for(mine.keep(SHARD), 5.0)
        assert lost.value.how == "another worker holds the lease"
        await asyncio.sleep(0.2)  # past what confirm() may take on trust: it asks Redis
        with pytest.raises(LeaseLostError, match="another worker holds the lease"):
            await mine.confirm(SHARD)
    finally:
        await theirs.release(SHARD)
        await redis.aclose()
