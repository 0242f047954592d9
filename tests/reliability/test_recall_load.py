"""Load: 200 concurrent requesters recall for a while (3 s short, 30 s long) against a
`zeromem serve` process while writes go on. No errors, no timeouts; latency reported."""

from __future__ import annotations

import asyncio
import random
import statistics
import time

from tests.reliability.cluster import Cluster, scale
from tests.reliability.history import Report, summarize
from zeromem.sdk import MemoryClient

WORDS = [
    "meeting",
    "friday",
    "budget",
    "deploy",
    "invoice",
    "travel",
    "allergy",
    "chinese",
    "report",
    "deadline",
    "server",
    "outage",
    "python",
    "refund",
    "flight",
    "hotel",
    "review",
    "design",
    "contract",
]
REQUESTERS = 200


async def test_recall_under_200_concurrent_requesters(cluster: Cluster, tenant: str) -> None:
    await cluster.start_services(workers=1)
    duration = scale(3.0, 30.0)
    owners = [f"user:l{i}" for i in range(20)]
    rng = random.Random(5)
    clients = [
        await MemoryClient.connect(
            cluster.settings.bus.nats_url,
            tenant=tenant,
            agent=f"r{i}",
            shards=cluster.settings.shards,
            timeout=5.0,
        )
        for i in range(8)
    ]
    writer = clients[0]
    for n in range(600):  # 30 memories per owner to rank
        words = " ".join(rng.choices(WORDS, k=8))
        await writer.put(f"{rng.choice(owners)}:m{n}", {"n": n}, content=f"note {n}: {words}")
    await writer.put(f"{owners[0]}:last", 0, wait="applied")

    latencies: list[float] = []
    errors: list[str] = []
    writes = 0
    stop_at = time.monotonic() + duration

    async def requester(r: int) -> None:
        client = clients[r % len(clients)]
        local = random.Random(r)
        while time.monotonic() < stop_at:
            query = " ".join(local.choices(WORDS, k=3))
            started = time.perf_counter()
            try:
                reply = await client.recall(query, owners=[local.choice(owners)], k=5, budget=400)
            except Exception as exc:  # any error or timeout fails the scenario
                errors.append(f"{type(exc).__name__}: {exc}")
                continue
            latencies.append(time.perf_counter() - started)
            assert reply.tokens <= 400

    async def keep_writing() -> None:
        nonlocal writes
        local = random.Random(99)
        while time.monotonic() < stop_at:
            owner = local.choice(owners)
            await writer.put(
                f"{owner}:w{writes % 50}",
                {"w": writes},
                content="update: " + " ".join(local.choices(WORDS, k=6)),
            )
            writes += 1
            await asyncio.sleep(0.002)

    try:
        await asyncio.gather(keep_writing(), *(requester(r) for r in range(REQUESTERS)))
        await writer.flush()
    finally:
        for client in clients:
            await client.close()

    latencies.sort()
    q = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [0.0] * 99
    report = Report(
        f"recall load ({REQUESTERS} requesters, {duration:.0f}s, writes on)",
        attempted=len(latencies) + len(errors),
        acknowledged=len(latencies),
        applied=writes,
    )
    report.extra.update(
        errors=len(errors),
        recalls_per_s=round(len(latencies) / duration),
        p50_ms=round(q[49] * 1000, 1),
        p99_ms=round(q[98] * 1000, 1),
        max_ms=round(latencies[-1] * 1000, 1) if latencies else 0,
    )
    summarize(report.line())
    assert not errors, f"{len(errors)} errors, first: {errors[:3]}"
    assert latencies, "no recall completed"
