"""Issue 14, item 5 (retention without snapshots): every stream has an age and a byte
limit from settings, applied when a process provisions the layout (an existing stream is
updated); the command log, full, refuses new commands instead of dropping its oldest, and
a rebuild refuses a log that lost its first commands."""

from __future__ import annotations

import dataclasses

import pytest

from zeromem import naming
from zeromem.bus import connect_nats, provision
from zeromem.lifecycle.settings import LifecycleSettings
from zeromem.sdk import MemoryClient
from zeromem.settings import Settings
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
    await provision(js, isolated, LifecycleSettings())
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
    changed = Settings.from_env(env, nats_url=isolated.nats_url, nats_creds=isolated.nats_creds)
    await provision(js, changed, LifecycleSettings.from_env(env))
    assert await _configs(js) == {
        naming.COMMAND_STREAM: (86400.0, 1 << 20, "new"),
        naming.DEAD_LETTER_STREAM: (3600.0, 2 << 20, "old"),
        naming.CHANGE_STREAM: (7200.0, 3 << 20, "old"),
        naming.AUDIT_STREAM: (10800.0, 4 << 20, "old"),
    }
    # 0 turns a limit off
    off = dataclasses.replace(changed, stream_max_age_s=0.0, stream_max_bytes=0)
    await provision(js, off, LifecycleSettings.from_env(env))
    assert (await _configs(js))[naming.COMMAND_STREAM][:2] == (None, None)
    await nc.close()


async def test_a_full_command_log_refuses_commands_and_keeps_its_history(
    isolated: Settings,
) -> None:
    capped = dataclasses.replace(isolated, stream_max_bytes=64 * 1024)
    nc = await connect_nats(capped, "retention-test")
    js = nc.jetstream()
    await provision(js, capped, LifecycleSettings())
    refused: Exception | None = None
    sent = 0
    async with await MemoryClient.connect(
        capped.nats_url, tenant="acme", shards=capped.shards
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
    lower = dataclasses.replace(isolated, stream_max_bytes=16 * 1024)
    await provision(js, lower, LifecycleSettings())
    info = await js.stream_info(naming.COMMAND_STREAM)
    assert info.config.max_bytes == 64 * 1024 and info.state.first_seq == 1
    assert info.state.messages == sent
    await nc.close()


async def test_rebuild_refuses_a_log_that_lost_its_first_commands(isolated: Settings) -> None:
    nc = await connect_nats(isolated, "retention-test")
    js = nc.jetstream()
    await provision(js, isolated, LifecycleSettings())
    async with await MemoryClient.connect(
        isolated.nats_url, tenant="acme", shards=isolated.shards
    ) as client:
        for i in range(5):
            await client.put(f"user:u1:k{i}", i, wait="stored")
    redis_marker = "zm:acme:m:user:u1:marker"
    from zeromem.bus import connect_redis

    redis = connect_redis(isolated)
    await redis.hset(redis_marker, "v", "1")
    # as an age limit (or a purge) would: the first commands are gone
    await js.purge_stream(naming.COMMAND_STREAM, keep=2)
    with pytest.raises(TruncatedLogError, match="starts at sequence 4"):
        await rebuild(isolated, nc=nc, redis=redis)
    assert await redis.hget(redis_marker, "v") == b"1"  # nothing was cleared
    await redis.aclose()
    await nc.close()
