"""Reads over owners of different shards (issue 17): on a Redis Cluster their keys are in
different slots, and a list, a recall or a forget over them visits each shard's piece and
merges; on one Redis the same reads see one piece. Both give the same answers."""

from __future__ import annotations

from redis.crc import key_slot

from zeromem import naming
from zeromem.bus import connect_redis
from zeromem.sdk import MemoryClient
from zeromem.settings import Settings
from zeromem.store.keys import RedisKeys


def owners_on_other_shards(tenant: str, shards: int, count: int) -> list[str]:
    """``count`` owners ``user:...`` of ``tenant``, each on a shard of its own."""
    found: dict[int, str] = {}
    n = 0
    while len(found) < count:
        owner = f"user:f{n}"
        found.setdefault(naming.shard_for(tenant, owner, shards), owner)
        n += 1
    return sorted(found.values())


async def test_list_and_recall_span_owners_on_different_shards(
    client: MemoryClient, running: Settings
) -> None:
    owners = owners_on_other_shards(client.tenant, running.shards, 3)
    for i, owner in enumerate(owners):
        await client.put(f"{owner}:note", i, content=f"the heron count is {i} at the lake")
        await client.put(f"{owner}:other", i, content="nothing about birds")
    await client.flush()
    keys = RedisKeys(client.tenant)
    slots = {key_slot(keys.by_time(owner).encode()) for owner in owners}
    # a cluster puts them in three slots; one Redis in the slots of their owner tags
    assert len(slots) == 3

    # a prefix that names no owner: every piece, merged in key order, paged by cursor
    every = sorted(f"{o}:{name}" for o in owners for name in ("note", "other"))
    listed: list[str] = []
    cursor = ""
    while True:
        page = await client.list("user:f", cursor=cursor, limit=2)
        listed += page.keys
        if not page.next_cursor:
            break
        cursor = page.next_cursor
    assert listed == every
    # a prefix that names the owner: its piece alone
    assert (await client.list(f"{owners[1]}:")).keys == (f"{owners[1]}:note", f"{owners[1]}:other")

    found = await client.recall("heron lake", owners=owners, k=10)
    assert {m.key for m in found.memories} >= {f"{o}:note" for o in owners}
    filtered = await client.recall("heron", owners=owners, prefix="user:f", k=10)
    assert {m.key for m in filtered.memories} >= {f"{o}:note" for o in owners}

    owners_page = await client.owners("user:f")
    assert [o.owner for o in owners_page.owners] == owners
    assert [o.memories for o in owners_page.owners] == [2, 2, 2]

    await client.forget(owners[0], wait="applied")
    assert (await client.list("user:f")).keys == tuple(
        k for k in every if not k.startswith(owners[0] + ":")
    )
    redis = connect_redis(running)
    try:
        piece = keys.shard_of(owners[0])
        assert await redis.zrangebylex(keys.keys(piece), f"[{owners[0]}:", f"[{owners[0]};") == []
    finally:
        await redis.aclose()
