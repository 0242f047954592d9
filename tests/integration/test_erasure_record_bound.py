"""The record of tenant erasures (ZM_ERASURES) is bounded like every stream
(``ZEROMEM_ERASURES_MAX_BYTES``): provisioning sets the cap, and an erasure whose record
would not fit is refused before anything of the tenant is purged."""

from __future__ import annotations

import pytest

from zeromem import naming
from zeromem.bus import connect_nats, connect_redis, provision
from zeromem.lifecycle.erasure import ErasureRecordRefusedError, erase_tenant, erased_commands
from zeromem.settings import Settings
from zeromem.store.keys import RedisKeys

CAP = 1500  # room for a record or two (an erasure checks for 1 KiB)


async def test_a_full_record_of_erasures_refuses_before_purging(isolated: Settings) -> None:
    settings = isolated.with_(bus={"erasures_max_bytes": CAP})
    nc = await connect_nats(settings, name="test-erasures")
    redis = connect_redis(settings)
    try:
        js = nc.jetstream()
        await provision(js, settings)
        info = await js.stream_info(f"KV_{naming.ERASURE_BUCKET}")
        assert info.config.max_bytes == CAP
        refused_at = None
        for n in range(10):
            tenant = f"gone{n}"
            kept = RedisKeys(tenant).stored(0)
            await redis.hset(kept, "n", 1)
            # A command of the tenant in the log: what the erasure purges and records.
            await js.publish(naming.command_subject(tenant, 0, "agent"), b"\x90")
            try:
                await erase_tenant(nc, redis, tenant)
            except ErasureRecordRefusedError as exc:
                assert "ZEROMEM_ERASURES_MAX_BYTES" in str(exc)
                assert await redis.exists(kept)  # nothing of the tenant was erased
                refused_at = n
                break
            assert not await redis.exists(kept)
        assert refused_at is not None and refused_at >= 1
        # Raised, the next erasure goes through (provisioning updates the bucket).
        await provision(js, settings.with_(bus={"erasures_max_bytes": 1 << 20}))
        await js.publish(naming.command_subject(f"gone{refused_at}", 0, "agent"), b"\x90")
        await erase_tenant(nc, redis, f"gone{refused_at}")
        assert not await redis.exists(RedisKeys(f"gone{refused_at}").stored(0))
    finally:
        await nc.drain()
        await redis.aclose()


async def test_the_record_counts_every_erasure_right_after_it(isolated: Settings) -> None:
    """What a rebuild allows the log to miss is read from the bucket's stream: read right
    after each erasure, it counts every one so far (nats-py's ``keys()`` watcher could end
    its replay early and report none, and a rebuild then refused the log as truncated)."""
    nc = await connect_nats(settings := isolated, name="test-erasures")
    redis = connect_redis(settings)
    try:
        js = nc.jetstream()
        await provision(js, settings)
        assert await erased_commands(nc) == 0
        expected = 0
        for n in range(12):
            tenant = f"counted{n}"
            for _ in range(n % 3 + 1):
                await js.publish(naming.command_subject(tenant, 0, "agent"), b"\x90")
            expected += n % 3 + 1
            await erase_tenant(nc, redis, tenant)
            assert await erased_commands(nc) == expected
    finally:
        await nc.drain()
        await redis.aclose()


def test_the_setting_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZEROMEM_ERASURES_MAX_BYTES", "4096")
    assert Settings.from_env().bus.erasures_max_bytes == 4096
