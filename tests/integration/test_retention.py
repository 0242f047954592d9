"""Issue 14, item 5 (retention without snapshots): every stream has an age and a byte
limit from settings, applied when a process provisions the layout (an existing stream is
updated); the command log, full, refuses new commands instead of dropping its oldest, and
a rebuild refuses a log that lost its first commands."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from tests.eventually import eventually
from tests.harness import ServiceSet
from tests.resend import send_as_new_message
from zeromem import naming
from zeromem.bus import connect_nats, connect_redis, provision, shard_backlogs
from zeromem.ids import new_command_id
from zeromem.lifecycle.snapshot import differences, snapshot
from zeromem.schemas import Applied, Put
from zeromem.sdk import MemoryClient
from zeromem.settings import Settings
from zeromem.store.keys import RedisKeys
from zeromem.store.pieces import scan_keys
from zeromem.worker.rebuild import TruncatedLogError, rebuild


async def _configs(js) -> dict[str, tuple[float | None, int | None, str]]:  # type: ignore[no-untyped-def]
    out = {}
    for name in (
        naming.COMMAND_STREAM,
        naming.DEAD_LETTER_STREAM,
        naming.CHANGE_STREAM,
        naming.AUDIT_STREAM,
    ):
        config = (await js.stream_info(name)).config
        out[name] = (
            config.max_age or None,
            config.max_bytes if (config.max_bytes or 0) > 0 else None,
            str(config.discard),
        )
    return out


async def test_settings_reach_every_stream_and_update_existing_ones(isolated: Settings) -> None:
    nc = await connect_nats(isolated, "retention-test")
    js = nc.jetstream()
    await provision(js, isolated)
    defaults = await _configs(js)
    assert defaults[naming.COMMAND_STREAM] == (None, 8 << 30, "new")
    assert defaults[naming.DEAD_LETTER_STREAM] == (30 * 86400.0, 1 << 30, "old")
    assert defaults[naming.CHANGE_STREAM] == (7 * 86400.0, 1 << 30, "old")
    assert defaults[naming.AUDIT_STREAM] == (90 * 86400.0, 2 << 30, "old")

    # a second provision with other settings (as from the environment) updates them
    env = {
        "ZEROMEM_STREAM_MAX_AGE_S": "86400",
        "ZEROMEM_STREAM_MAX_BYTES": str(1 << 20),
        "ZEROMEM_DEAD_LETTER_MAX_AGE_S": "3600",
        "ZEROMEM_DEAD_LETTER_MAX_BYTES": str(2 << 20),
        "ZEROMEM_CHANGE_MAX_AGE_S": "7200",
        "ZEROMEM_CHANGE_MAX_BYTES": str(3 << 20),
        "ZEROMEM_AUDIT_MAX_AGE_S": "10800",
        "ZEROMEM_AUDIT_MAX_BYTES": str(4 << 20),
    }
    changed = Settings.from_env(env).with_(
        bus={"nats_url": isolated.bus.nats_url, "nats_creds": isolated.bus.nats_creds}
    )
    await provision(js, changed)
    assert await _configs(js) == {
        naming.COMMAND_STREAM: (86400.0, 1 << 20, "new"),
        naming.DEAD_LETTER_STREAM: (3600.0, 2 << 20, "old"),
        naming.CHANGE_STREAM: (7200.0, 3 << 20, "old"),
        naming.AUDIT_STREAM: (10800.0, 4 << 20, "old"),
    }
    # 0 turns a limit off
    off = changed.with_(bus={"stream_max_age_s": 0.0, "stream_max_bytes": 0})
    await provision(js, off)
    assert (await _configs(js))[naming.COMMAND_STREAM][:2] == (None, None)
    await nc.close()


async def test_a_full_command_log_refuses_commands_and_keeps_its_history(
    isolated: Settings,
) -> None:
    capped = isolated.with_(bus={"stream_max_bytes": 64 * 1024})
    nc = await connect_nats(capped, "retention-test")
    js = nc.jetstream()
    await provision(js, capped)
    refused: Exception | None = None
    sent = 0
    async with await MemoryClient.connect(
        capped.bus.nats_url, tenant="acme", shards=capped.shards
    ) as client:
        for i in range(2000):
            try:
                await client.put(f"user:u1:k{i}", "x" * 200, wait="stored")
            except Exception as exc:
                refused = exc
                break
            sent += 1
    assert refused is not None, "64 KiB took 2000 puts of 200 bytes"
    print(f"refused after {sent} puts: {type(refused).__name__}: {refused}")
    assert "maximum bytes exceeded" in str(refused).lower()
    state = (await js.stream_info(naming.COMMAND_STREAM)).state
    # nothing was dropped to make room: the log still starts at its first command
    assert state.first_seq == 1 and state.messages == sent
    assert state.bytes <= 64 * 1024

    # lowering the cap below what the log holds is not applied (the server would delete
    # the oldest commands to meet it)
    lower = isolated.with_(bus={"stream_max_bytes": 16 * 1024})
    await provision(js, lower)
    info = await js.stream_info(naming.COMMAND_STREAM)
    assert info.config.max_bytes == 64 * 1024 and info.state.first_seq == 1
    assert info.state.messages == sent
    await nc.close()


async def test_rebuild_refuses_a_log_that_lost_its_first_commands(isolated: Settings) -> None:
    nc = await connect_nats(isolated, "retention-test")
    js = nc.jetstream()
    await provision(js, isolated)
    async with await MemoryClient.connect(
        isolated.bus.nats_url, tenant="acme", shards=isolated.shards
    ) as client:
        for i in range(5):
            await client.put(f"user:u1:k{i}", i, wait="stored")
    redis_marker = RedisKeys("acme").item("user:u1:marker")
    redis = connect_redis(isolated)
    await redis.hset(redis_marker, "v", "1")
    # as an age limit (or a purge) would: the first commands are gone
    await js.purge_stream(naming.COMMAND_STREAM, keep=2)
    with pytest.raises(TruncatedLogError, match="starts at sequence 4"):
        await rebuild(isolated, nc=nc, redis=redis)
    assert await redis.hget(redis_marker, "v") == b"1"  # nothing was cleared
    await redis.aclose()
    await nc.close()


async def _results(redis, tenant: str, shards: int) -> dict[int, tuple[int, int, int]]:  # type: ignore[no-untyped-def]
    """Per shard: members of the results index, the bytes it counts, the bytes its
    members name."""
    out = {}
    for shard in range(shards):
        keys = RedisKeys(tenant)
        members = await redis.zrange(keys.results(shard), 0, -1)
        if not members:
            continue
        named = sum(int(m.split(b" ", 1)[0]) for m in members)
        out[shard] = (len(members), int(await redis.get(keys.results_bytes(shard)) or 0), named)
    return out


@contextlib.asynccontextmanager
async def _bounded(
    isolated: Settings, **bounds: int
) -> AsyncIterator[tuple[Settings, Redis, MemoryClient]]:
    """Workers with these bounds on stored results, Redis, and a client of tenant acme."""
    settings = isolated.with_(limits=dict(bounds))
    services = await ServiceSet.start(settings)
    redis = connect_redis(settings)
    try:
        async with await MemoryClient.connect(
            settings.bus.nats_url, tenant="acme", shards=settings.shards
        ) as client:
            yield settings, redis, client
    finally:
        await redis.aclose()
        await services.stop()


async def test_idempotency_records_stay_within_their_bounds_under_load(isolated: Settings) -> None:
    async with _bounded(isolated, idempotency_records=40) as (settings, redis, client):
        original = Put(
            id=new_command_id(),
            tenant="acme",
            agent=client.agent,
            ts=time.time(),
            key="user:u0:k",
            value=0,
        )
        first = await client.send(original, wait="applied")
        acme = RedisKeys("acme")
        first_key = acme.command(first.command_id, acme.shard_of("user:u0"))
        one = await redis.get(first_key)
        record = len(first_key) + len(one)
        print(f"one put's record: {record} bytes (key and value)")
        owners = [f"user:u{i}" for i in range(24)]
        for i in range(1200):  # fire and forget: batches of many commands per message
            await client.put(f"{owners[i % 24]}:k", i, wait="none")
        await client.put("user:u0:k", "last", wait="applied")
        await client.flush()
        nc = await connect_nats(settings, "retention-test")
        try:
            await eventually(
                lambda: shard_backlogs(nc.jetstream(), settings.shards),
                lambda backlogs: all(b == 0 for b in backlogs.values()),
                timeout=30.0,
            )
            found = await _results(redis, "acme", settings.shards)
            shard = next(iter(found))
            index = await redis.memory_usage(RedisKeys("acme").results(shard))
            last = await redis.zrange(RedisKeys("acme").results(shard), -1, -1)
            kept = await redis.memory_usage(last[0].split(b" ", 1)[1])
            per_member = index / found[shard][0]
            print(f"in Redis: a record {kept} bytes, the index {per_member:.0f} per member")
            assert all(n <= 40 for n, _, _ in found.values()), found
            # the byte count is exactly what the members carry
            assert all(counted == named for _, counted, named in found.values()), found
            # every stored result is in an index: nothing outside the bound survives
            stored = [k async for k in scan_keys(redis, acme.command_pattern(), 1000)]
            assert len(stored) == sum(n for n, _, _ in found.values()) <= 40 * settings.shards
            # the oldest went first: the first put's record is gone
            assert await redis.get(first_key) is None
            assert record < 400
            # what the bound gives up (docs/retention.md): that command, sent again as a
            # new message (past JetStream's duplicate window), is applied as a new one
            again = await send_as_new_message(client, original)
            assert type(again) is Applied and again.version > first.version

            # a rebuild keeps the same records: what survives does not depend on the order
            # in which the workers (batch by batch, shards interleaved) or the replay
            # recorded it
            before = await snapshot(redis, "acme")
            await rebuild(settings, tenant="acme", nc=nc, redis=redis)
            assert differences(before, await snapshot(redis, "acme")) == []
        finally:
            await nc.close()


async def test_the_byte_bound_holds_too(isolated: Settings) -> None:
    bounds = {"idempotency_records": 0, "idempotency_bytes": 4096}
    async with _bounded(isolated, **bounds) as (settings, redis, client):
        for i in range(600):
            await client.put(f"user:u{i % 8}:k", i, wait="none")
        await client.put("user:u0:k", "last", wait="applied")
        await client.flush()
        found = await _results(redis, "acme", settings.shards)
        assert found and all(counted <= 4096 for _, counted, _ in found.values()), found
        assert all(counted == named for _, counted, named in found.values()), found
        assert sum(n for n, _, _ in found.values()) < 600
