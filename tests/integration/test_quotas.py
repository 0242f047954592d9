"""Per-tenant quotas on the write path: stored memories, stored bytes, commands per second.
A refusal names the limit; other tenants are not affected."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from tests.harness import ServiceSet
from tests.integration.test_containment import dead_letters, owner_on_shard
from zeromem import naming
from zeromem.bus import connect_nats, connect_redis
from zeromem.limits import Limits
from zeromem.sdk import MemoryClient
from zeromem.settings import Settings
from zeromem.store.keys import RedisKeys, layout


@contextlib.asynccontextmanager
async def services_with(isolated: Settings, **limits: float) -> AsyncIterator[Settings]:
    """The services on ``isolated``'s servers, with these limits."""
    settings = isolated.with_(limits=Limits(**limits))  # type: ignore[arg-type]
    services = await ServiceSet.start(settings)
    try:
        yield settings
    finally:
        await services.stop()


async def stored(settings: Settings, tenant: str) -> tuple[int, int]:
    redis = connect_redis(settings)
    try:
        n = b = 0
        for piece in layout().pieces:  # one on one Redis; one per shard on a cluster
            pn, pb = await redis.hmget(RedisKeys(tenant).stored(piece), "n", "b")
            n, b = n + int(pn or 0), b + int(pb or 0)
    finally:
        await redis.aclose()
    return n, b


async def test_a_tenant_over_its_memory_quota_is_refused_and_others_are_not(
    isolated: Settings,
) -> None:
    async with services_with(isolated, tenant_memories=3) as settings:
        full = await MemoryClient.connect(
            settings.bus.nats_url, tenant="full", shards=settings.shards
        )
        async with full:
            for i in range(3):
                assert (await full.put(f"user:u{i}:k", i, wait="applied")).status == "applied"
            refused = await full.put("user:u9:k", 9, wait="applied")
            assert refused.status == "rejected" and "tenant_memories" in refused.reason
            # Rewriting a memory it has is no new memory; deleting one makes room.
            assert (await full.put("user:u0:k", "again", wait="applied")).status == "applied"
            assert (await full.delete("user:u1:k", wait="applied")).status == "applied"
            assert (await full.put("user:u9:k", 9, wait="applied")).status == "applied"
            assert (await stored(settings, "full"))[0] == 3
        async with await MemoryClient.connect(
            settings.bus.nats_url, tenant="other", shards=settings.shards
        ) as other:
            assert (await other.put("user:u9:k", 1, wait="applied")).status == "applied"


async def test_stored_totals_follow_every_write_delete_forget_and_expiry(
    isolated: Settings,
) -> None:
    async with services_with(isolated, tenant_bytes=4000) as settings:
        client = await MemoryClient.connect(
            settings.bus.nats_url, tenant="acme", shards=settings.shards
        )
        async with client:
            await client.put("user:u1:a", "x" * 100, wait="applied")
            await client.put("user:u1:b", "y" * 100, wait="applied")
            count, size = await stored(settings, "acme")
            assert count == 2 and 200 < size < 800
            await client.put("user:u1:a", "x" * 1000, wait="applied")  # grows
            assert (await stored(settings, "acme"))[1] > size + 800
            big = await client.put("user:u2:c", "z" * 5000, wait="applied")
            assert big.status == "rejected" and "tenant_bytes" in big.reason
            await client.put("user:u3:t", 1, ttl=1.5, wait="applied")
            assert (await stored(settings, "acme"))[0] == 3
            await asyncio.sleep(2.0)  # the reaper takes it
            await client.delete("user:u1:b", wait="applied")
            await client.forget("user:u1", wait="applied")
            assert await stored(settings, "acme") == (0, 0)


async def test_commands_over_the_rate_quota_are_dead_lettered_naming_it(
    isolated: Settings,
) -> None:
    async with services_with(isolated, tenant_commands_per_s=20) as settings:
        shard = naming.shard_for("noisy", "user:n0", settings.shards)
        owner = owner_on_shard("quiet", shard, settings.shards)
        # A client that ignores the workers' throttle notices (as a hostile one would).
        async with await MemoryClient.connect(
            settings.bus.nats_url,
            tenant="noisy",
            shards=settings.shards,
            batch=False,
            pace_writes=False,
        ) as noisy:
            for i in range(200):
                await noisy.put(f"user:n0:k{i % 5}", i)
            await noisy.flush()
        async with await MemoryClient.connect(
            settings.bus.nats_url, tenant="quiet", shards=settings.shards
        ) as quiet:
            started = time.monotonic()
            receipt = await quiet.put(f"{owner}:k", 1, wait="applied")
            assert receipt.status == "applied" and time.monotonic() - started < 2.0
        await asyncio.sleep(0.5)
        letters = await dead_letters(settings)
        assert 100 < len(letters) <= 190, len(letters)
        assert all("tenant_commands_per_s" in letter.reason for letter in letters)
        # Each names where the message is whole (the command log) instead of a copy of it
        # (Limits.quota_refusal_raw_bytes, 0 by default).
        nc = await connect_nats(settings, "quota-test")
        try:
            for letter in letters[:5]:
                assert letter.raw == b"" and f"command log at seq {letter.stream_seq}" in (
                    letter.reason
                )
                kept = await nc.jetstream().get_msg(naming.COMMAND_STREAM, letter.stream_seq)
                assert kept.subject == letter.subject and kept.data
        finally:
            await nc.close()


async def test_an_agent_over_the_rate_quota_is_told_to_wait_and_loses_almost_nothing(
    isolated: Settings,
) -> None:
    """The SDK holds a shard's commands back while a worker's Throttle notice says so
    (sdk.pacing, worker.throttle): an agent writing at five times its quota has its
    writes applied late instead of refused. Beside it, in the same run, the same writes
    from a client that ignores the notices: most are refused."""
    rate, total = 40, 200

    async def write(tenant: str, pace: bool) -> float:
        async with await MemoryClient.connect(
            settings.bus.nats_url, tenant=tenant, shards=settings.shards, pace_writes=pace
        ) as client:
            started = time.monotonic()
            for i in range(total):
                await client.put(f"user:p0:k{i}", i)
                await asyncio.sleep(1 / (5 * rate))  # five times the quota
            await client.flush(timeout=30)
            took = time.monotonic() - started
            assert not pace or (client.pacer is not None and client.pacer.notices >= 1)
        return took

    async def kept(tenant: str) -> int:
        redis = connect_redis(settings)
        try:
            keys = RedisKeys(tenant)
            return sum([await redis.exists(keys.item(f"user:p0:k{i}")) for i in range(total)])
        finally:
            await redis.aclose()

    async with services_with(isolated, tenant_commands_per_s=rate) as settings:
        paced_s = await write("paced", True)
        await write("unpaced", False)
        await asyncio.sleep(1.0)  # the last paced ones applied, the refusals dead-lettered
        letters = await dead_letters(settings)
        assert all("tenant_commands_per_s" in x.reason for x in letters)
        lost = {t: total - await kept(t) for t in ("paced", "unpaced")}
        # Paced: at most a burst sent before the first notice arrived, and it takes about
        # as long as the quota says (the bucket's first second, then 40/s).
        assert lost["paced"] <= total // 10, lost
        assert any(".paced." in x.subject for x in letters) == (lost["paced"] > 0)
        assert paced_s >= (total - rate - lost["paced"]) / rate * 0.8, paced_s
        # Unpaced: over half refused (sent at 200/s for a second, against 40/s).
        assert lost["unpaced"] >= total // 2, lost
