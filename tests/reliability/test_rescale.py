"""Issue 17 (3): the workers rescaled online under load, 3 -> 5 -> 2 processes in dynamic
membership (the long version goes on: -> 4 -> 2 -> 5). Every other worker removed is
SIGKILLed, a pod lost rather than drained: its shards wait for its leases to expire.
Leases move, each new holder opens its own consumer where Redis says the shard stands; the
checker holds the run to nothing lost, nothing applied twice, each owner's order kept.

Between steps the scenario waits until the deployment has settled (every shard's lease
held, by exactly as many workers as run, loads within one shard of each other) and
reports how long each step took to settle.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.reliability.cluster import Cluster, ServiceProcess, long_mode, scale
from tests.reliability.conftest import deployed
from tests.reliability.history import summarize
from tests.reliability.test_faults import assert_clean, later, run_scenario
from zeromem.auth.authority import Authority
from zeromem.bus import connect_redis
from zeromem.store.keys import shard_lease_key, worker_members_key

SHARDS = 32  # several per worker at every step (16 to 6 each)
# How long one step may take to settle: the leaving workers' leases expire (1.5 s after a
# SIGKILL) or are handed over, the others see the change within a membership renewal
# (0.5 s at these timings) and take the shards up (a lease poll, 0.375 s).
SETTLE_LIMIT_S = 30.0


@pytest.fixture
async def rescaled(
    tmp_path: Path, authority: Authority, request: pytest.FixtureRequest
) -> AsyncIterator[Cluster]:
    async with deployed(tmp_path, authority, request, shards=SHARDS) as deployment:
        yield deployment


async def holders(cluster: Cluster) -> tuple[int, Counter[bytes]]:
    """(live registrations, shards per lease holder) as Redis has them now."""
    redis = connect_redis(cluster.settings)
    try:
        seconds, micros = await redis.time()
        now_ms = seconds * 1000 + micros // 1000
        live = await redis.zcount(worker_members_key(), f"({now_ms}", "+inf")
        tokens = await redis.mget([shard_lease_key(s) for s in range(SHARDS)])
    finally:
        await redis.aclose()
    return live, Counter(t for t in tokens if t)


async def settle(cluster: Cluster, workers: int) -> float:
    """Seconds until ``workers`` live workers hold every shard, loads within one."""
    started = time.monotonic()
    while True:
        live, held = await holders(cluster)
        loads = held.values()
        if (
            live == workers
            and len(held) == workers
            and sum(loads) == SHARDS
            and max(loads) - min(loads) <= 1
        ):
            return time.monotonic() - started
        if time.monotonic() - started > SETTLE_LIMIT_S:
            raise TimeoutError(f"{workers} workers did not settle: {live} live, holding {held}")
        cluster.assert_processes_alive()
        await asyncio.sleep(0.05)


async def test_workers_rescaled_under_load_lose_nothing(rescaled: Cluster, tenant: str) -> None:
    steps = [3, 5, 2, 4, 2, 5] if long_mode() else [3, 5, 2]
    workers: list[ServiceProcess] = [rescaled.member(f"-{i}") for i in range(steps[0])]
    rescaled.serve()
    await rescaled.wait_leases()
    await rescaled.wait_serving()
    settled = [round(await settle(rescaled, steps[0]), 2)]
    rng = random.Random(17)
    removals = Counter[str]()

    async def rescale() -> None:
        for count in steps[1:]:
            await later(scale(1.0, 5.0))
            while len(workers) < count:
                workers.append(rescaled.member(f"-{len(rescaled.processes)}"))
            while len(workers) > count:
                leaving = workers.pop(rng.randrange(len(workers)))
                # Drained (SIGTERM), as a scale-down does; every other one SIGKILLed.
                if sum(removals.values()) % 2:
                    await asyncio.to_thread(leaving.kill)
                    removals["sigkill"] += 1
                else:
                    await asyncio.to_thread(leaving.stop)
                    removals["sigterm"] += 1
            settled.append(round(await settle(rescaled, count), 2))

    report = await run_scenario(
        rescaled,
        tenant,
        f"workers rescaled {' -> '.join(map(str, steps))} under load ({SHARDS} shards)",
        fault=rescale,
        duration_s=scale(6.0, 60.0),
    )
    summarize(
        f"[reliability]   rescale: settled after each step in {settled} s; "
        f"workers removed: {dict(removals)}"
    )
    assert len(settled) == len(steps)
    assert_clean(report)
