"""Puts, patches, deletes, expiry and reads through the real stack."""

from __future__ import annotations

import asyncio

from tests.eventually import eventually
from zeromem.sdk import MemoryClient
from zeromem.store.keys import RedisKeys


async def test_put_get_conflict_and_versions(client: MemoryClient) -> None:
    first = await client.put(
        "user:u10086:pref_lang",
        {"lang": "zh"},
        content="prefers Chinese",
        type="user_preference",
        wait="applied",
    )
    assert first.status == "applied" and first.version == 1
    item = await client.get("user:u10086:pref_lang")
    assert item is not None and item.value == {"lang": "zh"} and item.version == 1
    assert item.content == "prefers Chinese" and item.type.value == "user_preference"

    clash = await client.put("user:u10086:pref_lang", "en", expected_version=0, wait="applied")
    assert clash.status == "conflict" and clash.current_version == 1
    ok = await client.put("user:u10086:pref_lang", "en", expected_version=1, wait="applied")
    assert ok.status == "applied" and ok.version == 2


async def test_patch_delete_and_not_found(client: MemoryClient) -> None:
    await client.put("task:t42:status", {"state": "planned", "step": 1}, wait="applied")
    patched = await client.patch(
        "task:t42:status", {"state": "running", "step": None}, wait="applied"
    )
    assert patched.version == 2 and patched.result.item.value == {"state": "running"}
    deleted = await client.delete("task:t42:status", wait="applied")
    assert deleted.status == "applied" and deleted.version == 3
    assert await client.get("task:t42:status") is None
    assert await client.get_value("task:t42:status", default="unknown") == "unknown"
    gone = await client.patch("task:t42:status", {"x": 1}, wait="applied")
    assert gone.status == "rejected" and gone.reason.startswith("not_found")


async def test_append_without_a_name_generates_time_ordered_keys(client: MemoryClient) -> None:
    receipts = [await client.put("session:s1", f"turn {i}", type="message") for i in range(5)]
    await client.flush()
    keys = [r.key for r in receipts]
    assert all(k.startswith("session:s1:") for k in keys) and keys == sorted(keys)
    page = await eventually(lambda: client.list("session:s1:"), lambda p: len(p.keys) == 5)
    assert list(page.keys) == keys
    assert [i.value for i in page.items] == [f"turn {i}" for i in range(5)]


async def test_list_is_paginated_in_key_order(client: MemoryClient) -> None:
    for i in range(25):
        await client.put(f"user:u7:note{i:02d}", i)
    await client.put("user:u8:other", "not listed", wait="applied")
    await client.flush()
    seen: list[str] = []
    cursor = ""
    for _ in range(200):
        page = await client.list("user:u7:", cursor=cursor, limit=10)
        seen += page.keys
        if not page.next_cursor:
            if len(seen) == 25:
                break
            seen, cursor = [], ""  # writes still landing: start over
            await asyncio.sleep(0.05)
            continue
        cursor = page.next_cursor
    assert seen == [f"user:u7:note{i:02d}" for i in range(25)]


async def test_ttl_expires_and_leaves_no_index_entry(client: MemoryClient, running) -> None:
    from zeromem.bus import connect_redis

    await client.put(
        "session:s9:scratch",
        "temporary",
        content="temporary scratch note",
        tags=("tmp",),
        ttl=0.5,
        wait="applied",
    )
    await client.put("session:s9:keep", "kept", wait="applied")
    assert (await client.get("session:s9:scratch")) is not None
    await asyncio.sleep(0.6)
    assert await client.get("session:s9:scratch") is None  # invisible at once
    keys = RedisKeys(client.tenant)
    owner = "session:s9"
    piece = keys.shard_of(owner)
    redis = connect_redis(running)
    try:
        # the reaper runs every 0.2 s in the tests
        await eventually(
            lambda: redis.zscore(keys.keys(piece), "session:s9:scratch"),
            lambda score: score is None,
        )
        assert await redis.zscore(keys.keys(piece), "session:s9:scratch") is None
        assert await redis.zscore(keys.by_time(owner), "session:s9:scratch") is None
        assert not await redis.sismember(keys.by_tag(owner, "tmp"), "session:s9:scratch")
        assert await redis.zscore(keys.expiring(piece), "session:s9:scratch") is None
        assert await redis.zscore(keys.by_term(owner, "scratch"), "session:s9:scratch") is None
        assert await redis.hget(keys.owner_stats(owner), "n") == b"1"
    finally:
        await redis.aclose()
    assert (await client.list("session:s9:")).keys == ("session:s9:keep",)


async def test_expire_command_sets_and_clears(client: MemoryClient) -> None:
    await client.put("user:u3:otp", "123456", wait="applied")
    set_ttl = await client.expire("user:u3:otp", 60, wait="applied")
    assert set_ttl.result.item.expires_at is not None
    cleared = await client.expire("user:u3:otp", None, wait="applied")
    assert cleared.result.item.expires_at is None and cleared.version == 3


async def test_tenants_never_see_each_other(running, tenant: str) -> None:
    async with (
        await MemoryClient.connect(running.bus.nats_url, tenant=tenant, shards=running.shards) as a,
        await MemoryClient.connect(
            running.bus.nats_url, tenant=tenant + "x", shards=running.shards
        ) as b,
    ):
        await a.put("user:u1:secret", "a's", wait="applied")
        assert await b.get("user:u1:secret") is None
        assert (await b.list("user:")).keys == ()


async def test_feedback_is_counted(client: MemoryClient) -> None:
    await client.put("user:u5:tip", "use dark mode", wait="applied")
    for kind in ("liked", "liked", "important", "disliked"):
        await client.feedback("user:u5:tip", kind)
    await client.feedback("user:u5:tip", "liked", wait="applied")
    item = await client.get("user:u5:tip")
    assert (item.feedback.liked, item.feedback.important, item.feedback.disliked) == (3, 1, 1)
    assert item.version == 1
