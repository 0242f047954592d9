"""Issue 4: forget by owner, by key prefix and by time range, as one command atomic per
owner and ordered with that owner's other commands, under concurrent writes."""

from __future__ import annotations

import asyncio
import re
import time

from tests.eventually import eventually
from zeromem.bus import connect_redis
from zeromem.lifecycle.snapshot import snapshot
from zeromem.sdk import MemoryClient
from zeromem.store.keys import RedisKeys


async def _live_keys(client: MemoryClient, prefix: str) -> set[str]:
    return {item.key async for item in client.iter_list(prefix, page_size=500)}


async def test_forget_by_prefix_removes_exactly_what_came_before_it(running, tenant: str) -> None:
    owner = "session:s1"
    url, shards = running.bus.nats_url, running.shards
    clients = [
        await MemoryClient.connect(url, tenant=tenant, agent=f"w{i}", shards=shards)
        for i in range(3)
    ]
    try:
        seqs: dict[str, int] = {}
        forget_seq = 0

        async def writer(c: MemoryClient, w: int) -> None:
            for i in range(60):
                for part in ("a", "b"):
                    key = f"{owner}:step-{part}-{w}-{i}"
                    receipt = await c.put(key, i, content=f"step {part} {i}", wait="stored")
                    seqs[key] = receipt.stream_seq
                # the other owner's matching keys are never touched
                await c.put(f"session:s2:step-a-{w}-{i}", i)

        async def forgetter() -> None:
            nonlocal forget_seq
            # In the middle of the writes (a fixed sleep raced them); polling the writers'
            # shared dict keeps them free of any knowledge of this test's threshold.
            while len(seqs) < 90:  # noqa: ASYNC110
                await asyncio.sleep(0.002)
            receipt = await clients[0].forget(owner, prefix=f"{owner}:step-a", wait="stored")
            forget_seq = receipt.stream_seq

        await asyncio.gather(*(writer(c, w) for w, c in enumerate(clients)), forgetter())
        for c in clients:
            await c.flush()
        expected = {
            k for k, s in seqs.items() if not (k.startswith(f"{owner}:step-a") and s < forget_seq)
        }
        assert any(k.startswith(f"{owner}:step-a") for k in expected), "the forget came too late"
        assert len(expected) < len(seqs), "the forget came too early"
        await eventually(lambda: _live_keys(clients[0], f"{owner}:"), lambda live: live == expected)
        assert len(await _live_keys(clients[0], "session:s2:")) == 180
        audit = await clients[0].audit(agent="w0")
        forget = next(e for e in audit if e.op == "forget")
        assert sorted(forget.keys) == sorted(set(seqs) - expected)
        await _assert_no_trace(running, tenant, set(seqs) - expected)
    finally:
        for c in clients:
            await c.close()


async def test_forget_the_last_minutes_of_a_session_under_concurrent_writes(
    client: MemoryClient, running
) -> None:
    owner = "session:s7"
    early = [await client.put(f"{owner}:early{i}", i, wait="applied") for i in range(10)]
    await asyncio.sleep(0.1)
    since = time.time()
    await asyncio.sleep(0.05)
    recent = [await client.put(f"{owner}:recent{i}", i, wait="applied") for i in range(10)]
    other = await MemoryClient.connect(
        running.bus.nats_url, tenant=client.tenant, agent="late", shards=running.shards
    )
    late_seqs: dict[str, int] = {}

    async def late_writer() -> None:
        for i in range(40):
            receipt = await other.put(f"{owner}:late{i}", i, wait="stored")
            late_seqs[receipt.key] = receipt.stream_seq

    writing = asyncio.create_task(late_writer())
    await asyncio.sleep(0.02)
    forget = await client.forget(owner, since=since)  # "the last N minutes", applied
    await writing
    await other.close()
    forgot = set(forget.result.keys)
    assert {r.key for r in recent} <= forgot and not ({r.key for r in early} & forgot)
    # a late write is forgotten exactly when it came before the forget in the owner's order
    assert {k for k in late_seqs if k in forgot} == {
        k for k, s in late_seqs.items() if s < forget.stream_seq
    }
    live = await eventually(
        lambda: _live_keys(client, f"{owner}:"),
        lambda live: len(live) == 10 + 40 - len({k for k in late_seqs if k in forgot}),
    )
    assert live == {r.key for r in early} | (set(late_seqs) - forgot)
    # a time range with both ends
    middle = early[3].result.item.updated_at, early[6].result.item.updated_at
    window = await client.forget(owner, since=middle[0], until=middle[1])
    assert sorted(window.result.keys) == sorted(r.key for r in early[3:7])
    # everything of an owner, archived memories included
    await client.archive(owner, older_than=time.time())
    everything = await client.forget(owner)
    assert set(everything.result.keys) == live - {r.key for r in early[3:7]}
    assert await _live_keys(client, f"{owner}:") == set()
    assert not (await client.recall("", owners=[owner], include_archived=True)).memories
    await _assert_no_trace(running, client.tenant, forgot)


async def _assert_no_trace(settings, tenant: str, keys_: set[str]) -> None:  # type: ignore[no-untyped-def]
    redis = connect_redis(settings)
    try:
        state = await snapshot(redis, tenant)
    finally:
        await redis.aclose()
    rk = RedisKeys(tenant)
    for name, value in state.items():
        # a memory's hash or a command's result (after the shard's tag on a cluster)
        if re.match(rf"zm:{re.escape(rk.tenant)}:(\{{zs\d+\}}:)?[mc]:", name):
            continue
        members = (
            value if isinstance(value, list) else list(value) if isinstance(value, dict) else []
        )
        flat = {m[0] if isinstance(m, tuple) else m for m in members}
        leaked = {k for k in keys_ if k.encode() in flat}
        assert not leaked, f"{name} still names {sorted(leaked)[:3]}"
