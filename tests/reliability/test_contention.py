"""Contention: 32 agents increment one counter with compare-and-set, retrying on
conflict. The counter ends at exactly agents x increments, every increment the store
applied is one an agent counted, and the conflicts are counted."""

from __future__ import annotations

import asyncio
import time

from tests.reliability.cluster import Cluster, scale
from tests.reliability.history import History, Report, cas_increment, summarize, wait_idle
from zeromem.bus import connect_nats, connect_redis
from zeromem.limits import Limits
from zeromem.schemas import Applied, decode_result, owner_of
from zeromem.sdk import MemoryClient
from zeromem.store.keys import RedisKeys
from zeromem.store.pieces import get_many

AGENTS = 32


async def test_32_agents_compare_and_set_one_counter(cluster: Cluster, tenant: str) -> None:
    # Every attempt's stored result is counted below: the tenant keeps them all here (a
    # slow machine makes 130,000 conflicts and more, past the default retention).
    cluster.settings = cluster.with_settings(
        limits=Limits(idempotency_records=1_000_000, idempotency_bytes=512 * 1024 * 1024)
    )
    await cluster.start_services(workers=1)
    per_agent = int(scale(15, 500))
    key = "task:hot:counter"
    history = History()
    clients = [  # one per agent: a credential is one agent's
        await MemoryClient.connect(
            cluster.settings.bus.nats_url,
            tenant=tenant,
            agent=f"a{i}",
            shards=cluster.settings.shards,
            timeout=10.0,
        )
        for i in range(AGENTS)
    ]

    async def agent(a: int) -> None:
        client = clients[a]
        for i in range(per_agent):
            # No fault here: every increment must end known-applied (no unknown outcome).
            assert await cas_increment(
                client, history, f"a{a}", i, key, time.monotonic() + 60, max_attempts=10_000
            )

    started = time.monotonic()
    try:
        await asyncio.gather(*(agent(a) for a in range(AGENTS)))
        elapsed = time.monotonic() - started
        item = await clients[0].get(key)
    finally:
        for client in clients:
            await client.close()

    expected = AGENTS * per_agent
    nc = await connect_nats(cluster.settings, "observer")
    redis = connect_redis(cluster.settings)
    try:
        await wait_idle(nc, cluster.settings.shards)
        # Each attempt's stored result: exactly `expected` of them were applied.
        ids = [op.command.id for op in history.ops]
        piece = RedisKeys(tenant).shard_of(owner_of(key))
        applied = 0
        for start in range(0, len(ids), 5000):
            raws = await get_many(
                redis,
                [RedisKeys(tenant).command(c, piece) for c in ids[start : start + 5000]],
            )
            applied += sum(1 for r in raws if r and isinstance(decode_result(r), Applied))
        version = int(await redis.hget(RedisKeys(tenant).item(key), "v") or 0)
    finally:
        await redis.aclose()
        await nc.close()

    report = Report(
        f"contention ({AGENTS} agents x {per_agent} CAS on one counter)",
        attempted=len(history.ops),
        acknowledged=len(history.ops),
        applied=applied,
        conflicts=history.cas_conflicts,
    )
    final = int(item.value["n"]) if item else 0
    if final < expected or applied < expected:
        report.lost = expected - min(final, applied)
    if final > expected or applied > expected or version > expected:
        report.applied_twice = max(final, applied, version) - expected
    report.extra.update(
        final=final,
        expected=expected,
        seconds=round(elapsed, 1),
        increments_per_s=round(expected / elapsed),
    )
    summarize(report.line())
    assert item is not None and final == expected, report.line()
    assert applied == expected and version == expected, report.line()
    assert sum(history.cas_successes.values()) == expected
    assert history.cas_conflicts == len(history.ops) - expected
