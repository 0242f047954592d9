"""Issue 4: the archive tier. Archive -> recall (default skips, include_archived finds)
-> restore with the version history intact; the schedule the service runs."""

from __future__ import annotations

import asyncio
import time

from tests.eventually import eventually
from zeromem.bus import connect_nats, connect_redis
from zeromem.lifecycle.archive import owners_to_archive, schedule_archive
from zeromem.lifecycle.snapshot import snapshot
from zeromem.sdk import MemoryClient
from zeromem.store.keys import RedisKeys


async def test_archive_recall_restore_round_trip(client: MemoryClient, running) -> None:
    owner = "user:u21"
    old = {
        f"{owner}:trip": ("booked a trip to Lisbon in spring", {"city": "Lisbon"}, ("travel",)),
        f"{owner}:diet": ("vegetarian, no mushrooms", {"diet": "veg"}, ("food",)),
        f"{owner}:pet": ("has a cat called Miso", {"pet": "cat"}, ()),
    }
    for key, (content, value, tags) in old.items():
        await client.put(key, value, content=content, tags=tags, wait="applied")
    await client.patch(f"{owner}:trip", {"month": "April"}, wait="applied")  # version 2
    await client.feedback(f"{owner}:trip", "important", wait="applied")
    before = await client.get(f"{owner}:trip")
    await asyncio.sleep(0.05)
    cutoff = time.time()
    await asyncio.sleep(0.05)
    fresh = await client.put(f"{owner}:lang", "en", content="answers in English", wait="applied")

    receipt = await client.archive(owner, older_than=cutoff)
    assert receipt.status == "applied"
    assert sorted(receipt.result.keys) == sorted(old)

    # gone from the hot tier: reads, lists, default recall, every index
    assert await client.get(f"{owner}:trip") is None
    assert (await client.list(f"{owner}:")).keys == (fresh.key,)
    assert not (await client.recall("Lisbon trip", owners=[owner])).memories
    redis = connect_redis(running)
    keys = RedisKeys(client.tenant)
    try:
        state = await snapshot(redis, client.tenant)
        index_names = [
            n for n in state if ":o:" in n and not n.endswith(":ar") and not n.endswith(":st")
        ]
        for name in index_names:
            members = state[name]
            flat = [m[0] if isinstance(m, tuple) else m for m in members]
            assert not any(k.encode() in flat for k in old), name
        assert int(state[keys.owner_stats(owner)][b"n"]) == 1
        assert len(state[keys.archive(owner)]) == 3  # the compact records
    finally:
        await redis.aclose()

    # include_archived finds them, marked as archived
    found = await client.recall("Lisbon trip", owners=[owner], include_archived=True)
    assert [m.key for m in found.memories] == [f"{owner}:trip"]
    assert found.memories[0].archived and "Lisbon" in found.context

    # an old compare-and-set cannot match what was archived
    stale = await client.put(f"{owner}:trip", "x", expected_version=2, wait="applied")
    assert stale.status == "conflict" and stale.current_version == 0

    restored = await client.restore(f"{owner}:trip")
    assert restored.status == "applied" and restored.version == 4  # 2, archived as 3, now 4
    item = await client.get(f"{owner}:trip")
    assert item.value == before.value and item.content == before.content
    assert item.tags == before.tags and item.created_at == before.created_at
    assert item.feedback.important == 1 and item.archived_at is None
    assert [m.key for m in (await client.recall("Lisbon trip", owners=[owner])).memories] == [
        f"{owner}:trip"
    ]
    again = await client.restore(f"{owner}:trip")
    assert again.status == "rejected" and again.reason.startswith("exists")
    missing = await client.restore(f"{owner}:nothing")
    assert missing.status == "rejected" and missing.reason.startswith("not_found")

    # a put over an archived key replaces the archived memory
    await client.put(f"{owner}:pet", {"pet": "dog"}, wait="applied")
    still = await client.recall("cat Miso", owners=[owner], include_archived=True)
    assert not any(m.archived for m in still.memories)


async def test_the_schedule_archives_old_memories_of_every_owner(running, tenant: str) -> None:
    async with await MemoryClient.connect(
        running.bus.nats_url, tenant=tenant, shards=running.shards
    ) as client:
        for owner in ("task:t1", "task:t2", "user:u1"):
            await client.put(f"{owner}:a", "old", wait="applied")
        cutoff = time.time()
        await asyncio.sleep(0.05)
        await client.put("task:t2:b", "new", wait="applied")
        await client.put("team:x:c", "new", wait="applied")
        redis = connect_redis(running)
        nc = await connect_nats(running, "archiver-test")
        try:
            owners = [o async for o in owners_to_archive(redis, tenant, cutoff)]
            assert owners == ["task:t1", "task:t2", "user:u1"]
            assert [o async for o in owners_to_archive(redis, tenant, cutoff, prefix="task:")] == [
                "task:t1",
                "task:t2",
            ]
            sent = await schedule_archive(nc, redis, running, cutoff, tenants=[tenant])
            assert sent == 3
            page = await eventually(lambda: client.list(""), lambda p: len(p.keys) == 2)
            assert page.keys == ("task:t2:b", "team:x:c")
        finally:
            await nc.close()
            await redis.aclose()
