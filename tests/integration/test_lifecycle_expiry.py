"""Issue 4: time to live. An expired memory leaves no trace in any index (recall postings
and owner statistics included), and a sliding expiry is pushed out by reads."""

from __future__ import annotations

import asyncio
import time

from tests.eventually import eventually
from zeromem.bus import connect_redis
from zeromem.lifecycle.snapshot import snapshot
from zeromem.schemas import owner_of
from zeromem.sdk import MemoryClient
from zeromem.store.keys import RedisKeys


def _mentions(state: dict[str, object], key: str) -> list[str]:
    """Every Redis key whose value (member, field or score member) names ``key``."""
    needle = key.encode()
    found = []
    for name, value in state.items():
        if isinstance(value, dict):
            hit = needle in value
        elif isinstance(value, list):
            hit = any((m[0] if isinstance(m, tuple) else m) == needle for m in value)
        else:
            hit = False
        if hit:
            found.append(name)
    return found


async def test_an_expired_memory_leaves_no_trace_in_any_index(
    client: MemoryClient, running
) -> None:
    owner = "session:s9"
    doomed = f"{owner}:scratch"
    await client.put(
        doomed,
        {"note": "x"},
        content="ephemeral zebra scratchpad",
        tags=("tmp", "zebra"),
        type="decision",
        ttl=0.6,
        wait="applied",
    )
    kept = await client.put(
        f"{owner}:keep", "kept", content="durable giraffe note", tags=("tmp",), wait="applied"
    )
    await client.feedback(doomed, "liked", wait="applied")
    assert (await client.recall("zebra scratchpad", owners=[owner])).memories

    redis = connect_redis(running)
    keys = RedisKeys(client.tenant)
    try:
        await eventually(lambda: _gone(redis, keys, doomed))
        state = await snapshot(redis, client.tenant)
        # nothing but its own tombstone (a version guard) and command results names it
        assert [n for n in _mentions(state, doomed)] == []
        tombstone = state[keys.item(doomed)]
        assert tombstone[b"d"] == b"" and set(tombstone) == {b"v", b"d", b"lc"}
        assert int(tombstone[b"v"]) == 2
        assert not [n for n in state if ":w:zebra" in n or ":tg:zebra" in n or ":ty:decision" in n]
        stats = {k.decode(): int(v) for k, v in state[keys.owner_stats(owner)].items() if int(v)}
        live_doc = await redis.hget(keys.item(kept.key), "dl")
        live_tok = await redis.hget(keys.item(kept.key), "tk:cl100k_base")
        assert stats == {
            "n": 1,
            "n:fact": 1,
            "len": int(live_doc),
            "tok": int(live_tok),
            "tok:fact": int(live_tok),
        }
    finally:
        await redis.aclose()
    assert await client.get(doomed) is None
    assert (await client.list(f"{owner}:")).keys == (kept.key,)
    reply = await client.recall("zebra scratchpad", owners=[owner], explain=True)
    assert reply.memories == () and all(c.key != doomed for c in reply.candidates)
    # a put after expiry continues the version past the reaper's tombstone
    again = await client.put(doomed, "back", wait="applied")
    assert again.version == 3 and again.result.item.feedback.liked == 0


async def _gone(redis, keys: RedisKeys, key: str) -> bool:  # type: ignore[no-untyped-def]
    return (
        await redis.zscore(keys.expiring(keys.shard_of(owner_of(key))), key) is None
        and await redis.hget(keys.item(key), "d") == b""
    )


async def test_a_write_after_expiry_takes_the_same_version_whether_reaped_or_not(
    client: MemoryClient,
) -> None:
    # The engine counts an expired memory as reaped either way: the version sequence is a
    # function of the log alone (what makes a rebuild exact).
    first = await client.put("user:u8:otp", "1", ttl=0.3, wait="applied")
    await asyncio.sleep(0.35)
    second = await client.put("user:u8:otp", "2", wait="applied")  # maybe before the reaper
    assert first.version == 1 and second.version == 3


async def test_sliding_expiry_is_pushed_out_by_reads_without_a_version_bump(
    client: MemoryClient,
) -> None:
    key = "session:s10:context"
    await client.put(key, "hot", ttl=1.0, refresh_on_read=True, wait="applied")
    started = time.monotonic()
    while time.monotonic() - started < 2.2:  # twice the time to live, reading all along
        item = await client.get(key)
        assert item is not None, "a memory read all along must not expire"
        assert item.version == 1  # a slide never breaks a compare-and-set
        await asyncio.sleep(0.15)
    cas = await client.put(key, "still mine", expected_version=1, wait="applied")
    assert cas.status == "applied"
    # without reads it lapses; the compare-and-set put kept the sliding ttl off (a put
    # replaces the memory: no ttl given, none kept)
    await client.put(key, "cold", ttl=0.4, refresh_on_read=True, wait="applied")
    await asyncio.sleep(0.6)
    assert await client.get(key) is None
