"""Per-owner order: every command of an owner is applied in publish order."""

from __future__ import annotations

import asyncio
import time

from tests.eventually import eventually
from zeromem import naming
from zeromem.bus import connect_nats
from zeromem.schemas import Applied
from zeromem.sdk import MemoryClient
from zeromem.sdk.errors import NoResponderError
from zeromem.sdk.feed import results_of


async def test_10k_fire_and_forget_puts_across_100_owners_apply_in_order(
    client: MemoryClient, running
) -> None:
    applied: dict[str, list[int]] = {}
    done = asyncio.Event()
    total = 10_000

    async def on_change(msg) -> None:
        for result in results_of(msg):
            assert isinstance(result, Applied), result
            applied.setdefault(result.key, []).append(result.item.value)
        if sum(map(len, applied.values())) >= total:
            done.set()

    # An observer as the operator: agents may not subscribe to core change subjects.
    observer = await connect_nats(running, "observer")
    await observer.subscribe(naming.change_watch_subject(client.tenant), cb=on_change)
    await observer.flush()
    try:
        for i in range(total):
            await client.put(f"user:o{i % 100}:counter", i // 100)
        await client.flush()
        await asyncio.wait_for(done.wait(), 60)
    finally:
        await observer.close()
    assert len(applied) == 100
    for key, values in applied.items():
        assert values == list(range(100)), f"{key} applied out of order"
    item = await client.get("user:o42:counter")
    assert item.value == 99 and item.version == 100


async def test_concurrent_publishers_keep_each_publishers_order(running, tenant: str) -> None:
    """Eight agents write to one owner at once: each agent's writes are applied in the order
    it published them, and each key's versions run 1, 2, 3, ... with no gap."""
    per_agent = 200
    clients = [
        await MemoryClient.connect(
            running.bus.nats_url, tenant=tenant, agent=f"a{n}", shards=running.shards
        )
        for n in range(8)
    ]
    seen: list[tuple[str, int, int]] = []
    done = asyncio.Event()

    async def on_change(msg) -> None:
        for r in results_of(msg):
            seen.append((r.agent, r.item.value["n"], r.version))
        if len(seen) == 8 * per_agent:
            done.set()

    observer = await connect_nats(running, "observer")
    await observer.subscribe(naming.change_watch_subject(tenant, "task", "t1"), cb=on_change)
    await observer.flush()

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
    await observer.close()
    for c in clients:
        await c.close()
    for name in {a for a, _, _ in seen}:
        assert [n for a, n, _ in seen if a == name] == list(range(per_agent))
        assert [v for a, _, v in seen if a == name] == list(range(1, per_agent + 1))
    assert time.monotonic() - start < 60


async def test_batched_fire_and_forget_and_waiting_writes_keep_their_order(
    running, tenant: str
) -> None:
    """Back-to-back fire-and-forget writes share batch messages; a write that waits, in
    between, goes after the ones issued before it and before the ones after it."""
    observer = await connect_nats(running, "observer")  # stream info is the operator's
    async with await MemoryClient.connect(
        running.bus.nats_url, tenant=tenant, shards=running.shards
    ) as client:
        js = observer.jetstream()
        before = await js.stream_info(naming.COMMAND_STREAM)
        for i in range(600):
            if i % 100 == 99:  # applied right after the 99 buffered before it
                assert (await client.put("task:t9:step", i, wait="applied")).version == i + 1
            else:
                await client.put("task:t9:step", i)
            await client.put(f"task:t9:side-{i % 7}", i)
        await client.flush()
        after = await js.stream_info(naming.COMMAND_STREAM)
        # 1,200 commands travelled in far fewer messages
        assert after.state.messages - before.state.messages < 200
        item = await eventually(
            lambda: client.get("task:t9:step"), lambda i: i is not None and i.version == 600
        )
        assert item.value == 599 and item.version == 600
        history = await client.audit(key="task:t9:step")
        assert [e.version_after for e in history if e.op == "put"] == list(range(1, 601))
    await observer.close()


async def test_unbatched_client_sends_one_message_per_command(running, tenant: str) -> None:
    observer = await connect_nats(running, "observer")  # stream info is the operator's
    async with await MemoryClient.connect(
        running.bus.nats_url, tenant=tenant, shards=running.shards, batch=False
    ) as client:
        before = await observer.jetstream().stream_info(naming.COMMAND_STREAM)
        for i in range(50):
            await client.put("task:t10:step", i)
        await client.flush()
        after = await observer.jetstream().stream_info(naming.COMMAND_STREAM)
        assert after.state.messages - before.state.messages == 50
    await observer.close()


async def test_bulk_batched_writes_larger_than_a_message_are_all_applied_and_audited(
    isolated,
) -> None:
    """A backlog of thousands of commands with long contents, in batch messages, reaches a
    worker that starts after them: one fetch brings thousands of commands, and what the
    worker publishes for them (audit records, change-feed batches) is split to stay under
    the broker's payload limit; nothing is dropped and the shard never stalls."""
    from tests.harness import ServiceSet
    from zeromem.bus import provision

    total = 6000
    nc = await connect_nats(isolated, "bulk-test")
    await provision(nc.jetstream(), isolated)
    await nc.close()
    async with await MemoryClient.connect(
        isolated.bus.nats_url, tenant="bulk", shards=isolated.shards
    ) as client:
        for i in range(total):
            await client.put(f"user:bulk:k{i}", {"i": i}, content=f"note {i} " + "x" * 180)
        await client.flush()
        services = await ServiceSet.start(isolated)
        try:
            # Under load the first get has met "no responders" right after the read
            # service's subscriptions were flushed (seen in make test and on a Redis
            # Cluster run; the cause is not found): the data must come, not that first get.
            await eventually(
                lambda: client.get(f"user:bulk:k{total - 1}"),
                timeout=20.0,
                retry_on=(NoResponderError,),
            )
            for i in (0, total // 2, total - 1):
                assert (await client.get(f"user:bulk:k{i}")).value == {"i": i}
            audit = await client.audit()
            assert len([e for e in audit if e.op == "put"]) == total
        finally:
            await services.stop()
