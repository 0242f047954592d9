"""Per-owner order: every command of an owner is applied in publish order."""

from __future__ import annotations

import asyncio
import time

from zeromem import naming
from zeromem.schemas import Applied, decode_result
from zeromem.sdk import MemoryClient


async def test_10k_fire_and_forget_puts_across_100_owners_apply_in_order(
    client: MemoryClient, running
) -> None:
    applied: dict[str, list[int]] = {}
    done = asyncio.Event()
    total = 10_000

    async def on_change(msg) -> None:
        result = decode_result(msg.data)
        assert isinstance(result, Applied), result
        applied.setdefault(result.key, []).append(result.item.value)
        if sum(map(len, applied.values())) >= total:
            done.set()

    sub = await client.nc.subscribe(naming.change_watch_subject(client.tenant), cb=on_change)
    try:
        for i in range(total):
            await client.put(f"user:o{i % 100}:counter", i // 100)
        await client.flush()
        await asyncio.wait_for(done.wait(), 60)
    finally:
        await sub.unsubscribe()
    assert len(applied) == 100
    for key, values in applied.items():
        assert values == list(range(100)), f"{key} applied out of order"
    item = await client.get("user:o42:counter")
    assert item.value == 99 and item.version == 100


async def test_concurrent_publishers_keep_each_publishers_order(running, tenant: str) -> None:
    """Eight agents write to one owner at once: each agent's writes are applied in the order
    it published them, and each key's versions run 1, 2, 3, ... with no gap."""
    per_agent = 200
    clients = [await MemoryClient.connect(running.nats_url, tenant=tenant, agent=f"a{n}",
                                          shards=running.shards) for n in range(8)]  # fmt: skip
    seen: list[tuple[str, int, int]] = []
    done = asyncio.Event()

    async def on_change(msg) -> None:
        r = decode_result(msg.data)
        seen.append((r.agent, r.item.value["n"], r.version))
        if len(seen) == 8 * per_agent:
            done.set()

    sub = await clients[0].nc.subscribe(naming.change_watch_subject(tenant, "task", "t1"), cb=on_change)

    async def agent(c: MemoryClient) -> None:
        for n in range(per_agent):
            await c.put(f"task:t1:log_{c.agent}", {"n": n})
            if n % 50 == 0:
                await asyncio.sleep(0)

    start = time.monotonic()
    await asyncio.gather(*(agent(c) for c in clients))
    for c in clients:
        await c.flush()
    await asyncio.wait_for(done.wait(), 60)
    await sub.unsubscribe()
    for c in clients:
        await c.close()
    for name in {a for a, _, _ in seen}:
        assert [n for a, n, _ in seen if a == name] == list(range(per_agent))
        assert [v for a, _, v in seen if a == name] == list(range(1, per_agent + 1))
    assert time.monotonic() - start < 60
