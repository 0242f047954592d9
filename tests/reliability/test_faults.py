"""The workload under faults, each against a deployment of its own: worker processes
SIGKILLed mid-batch, two workers for the same shards (one of them paused past its lease),
Redis and NATS SIGKILLed and restarted on their data, clients whose connection is cut.

After each, the checker (history.py) holds the system to: nothing acknowledged at
``stored`` or ``applied`` lost, nothing applied twice, every key's versions 1, 2, 3, ... in
command-log order.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

from tests.reliability.cluster import Cluster, CutProxy, scale
from tests.reliability.history import Report, Workload, check, run_workload, summarize, wait_idle
from zeromem.bus import connect_nats, connect_redis
from zeromem.sdk import MemoryClient

Fault = Callable[[], Awaitable[None]]


async def run_scenario(
    cluster: Cluster,
    tenant: str,
    name: str,
    *,
    fault: Fault | None = None,
    url: str | None = None,
    connections: int = 4,
    agents: int = 16,
    duration_s: float | None = None,
    client_timeout: float = 10.0,
    idle_limit_s: float = 30.0,
    after: Callable[[], Awaitable[None]] | None = None,
) -> Report:
    duration = duration_s if duration_s is not None else scale(3.0, 40.0)
    workload = Workload(tenant, seed=hash(name) & 0xFFFF)
    # One connection per agent: a credential is one agent's, and the server refuses any
    # other agent's subjects (``connections`` is kept for callers; agents decide).
    clients = [
        await MemoryClient.connect(
            url or cluster.settings.bus.nats_url,
            tenant=tenant,
            agent=f"a{i}",
            shards=cluster.settings.shards,
            timeout=client_timeout,
        )
        for i in range(agents)
    ]
    try:
        history = await run_workload(
            clients, workload, agents=agents, ops_per_agent=10**9, duration_s=duration, fault=fault
        )
        if after is not None:
            await after()
        nc = await connect_nats(cluster.settings, "observer")
        redis = connect_redis(cluster.settings)
        try:
            await wait_idle(nc, cluster.settings.shards, limit_s=idle_limit_s)
            report = await check(name, history, workload, nc=nc, redis=redis, client=clients[0])
        finally:
            await redis.aclose()
            await nc.close()
    finally:
        await asyncio.gather(*(close_quickly(c) for c in clients))
    report.extra["retries"] = history.retries
    if history.flush_timeouts:
        report.extra["flush_timeouts"] = history.flush_timeouts
    summarize(report.line())
    return report


async def close_quickly(client: MemoryClient) -> None:
    """close() flushes first, and after an outage the SDK may wait for acks that will never
    come (see flush_timeouts): give it a moment, then drop the connection."""
    try:
        await asyncio.wait_for(client.close(), 3.0)
    except Exception:
        with contextlib.suppress(Exception):
            await client.nc.close()


def assert_clean(report: Report) -> None:
    assert report.clean, "\n".join([report.line(), *report.problems])
    assert report.acknowledged > 0 and report.applied > 0, report.line()


async def later(seconds: float) -> None:
    await asyncio.sleep(seconds)


# --- no fault: the checker's baseline -------------------------------------------------------


async def test_workload_without_faults(cluster: Cluster, tenant: str) -> None:
    await cluster.start_services(workers=2)
    report = await run_scenario(cluster, tenant, "baseline (2 workers, no fault)")
    assert_clean(report)
    assert report.not_acked == 0, "nothing should go unacknowledged without a fault"


# --- a worker SIGKILLed mid-batch, then restarted --------------------------------------------


async def test_worker_sigkill_mid_batch(cluster: Cluster, tenant: str) -> None:
    workers = await cluster.start_services(workers=2)
    rounds = int(scale(1, 6))
    kills = 0

    async def fault() -> None:
        nonlocal kills
        rng = random.Random(7)
        duration = scale(3.0, 40.0)
        for r in range(rounds):
            await later(duration / (rounds + 1) * rng.uniform(0.6, 1.0))
            index = r % 2
            # SIGKILL while commands stream in: the worker has a batch in hand (fetched,
            # maybe committed to Redis, not acked) almost always at this load.
            workers[index].kill()
            kills += 1
            await later(0.3)
            workers[index] = cluster.worker(index, 2, tag="-restarted")

    report = await run_scenario(
        cluster,
        tenant,
        "worker SIGKILL mid-batch + restart",
        fault=fault,
        duration_s=scale(3.5, 45.0),
    )
    report.extra["kills"] = kills
    assert kills == rounds
    assert_clean(report)


# --- two workers for the same shards ------------------------------------------------------


async def test_two_workers_same_shards_at_once(cluster: Cluster, tenant: str) -> None:
    # Both claim every shard (index 0 of 1), started together: the leases decide who
    # applies what, and the standby takes over when the owner is SIGKILLed.
    first = cluster.worker(0, 1, tag="-a")
    second = cluster.worker(0, 1, tag="-b")
    cluster.serve()
    await cluster.wait_leases()
    await cluster.wait_serving()

    async def fault() -> None:
        await later(scale(1.0, 10.0))
        first.kill()  # the standby (or the owner of the rest) takes its shards over
        await later(scale(1.0, 10.0))
        second.kill()
        # and two fresh ones for the same shards, at once
        cluster.worker(0, 1, tag="-c")
        cluster.worker(0, 1, tag="-d")

    report = await run_scenario(
        cluster,
        tenant,
        "two workers on the same shards (fenced)",
        fault=fault,
        duration_s=scale(3.0, 30.0),
    )
    assert_clean(report)


# Lost a command in about half the runs at first, then (with the lease confirmed before
# each fetch) in about one run in five: a worker frozen between its lease check and its pull
# request took commands it could no longer apply, and the new owner's cumulative ack covered
# them. Each tenure of a lease now reads through a consumer of its own, opened from the
# position Redis holds and deleting the previous one.
async def test_zombie_worker_paused_past_its_lease(cluster: Cluster, tenant: str) -> None:
    first = cluster.worker(0, 1, tag="-a")
    second = cluster.worker(0, 1, tag="-b")
    cluster.serve()
    await cluster.wait_leases()
    await cluster.wait_serving()
    pauses = 0

    async def fault() -> None:
        nonlocal pauses
        for victim in (first, second):
            await later(0.8)
            # Paused longer than its lease: the other worker takes its shards over while it
            # still believes it owns them. On waking it must neither apply nor swallow.
            victim.signal(signal.SIGSTOP)
            pauses += 1
            await later(cluster.settings.worker.lease_ttl_s + cluster.settings.bus.ack_wait_s + 1.0)
            victim.signal(signal.SIGCONT)

    report = await run_scenario(
        cluster,
        tenant,
        "zombie worker paused past its lease",
        fault=fault,
        duration_s=scale(8.0, 30.0),
    )
    report.extra["pauses"] = pauses
    assert_clean(report)


# --- Redis SIGKILLed and restarted on its append-only file -------------------------------


async def test_redis_sigkill_restart_on_aof(cluster: Cluster, tenant: str) -> None:
    await cluster.start_services(workers=2)
    restarts = 0

    async def fault() -> None:
        nonlocal restarts
        for _ in range(int(scale(1, 4))):
            await later(scale(1.0, 8.0))
            await asyncio.to_thread(cluster.redis.kill)
            await later(1.0)  # down for a while: workers and readers retry
            await asyncio.to_thread(cluster.redis.start)
            restarts += 1

    report = await run_scenario(
        cluster, tenant, "redis SIGKILL + restart on AOF", fault=fault, duration_s=scale(3.5, 40.0)
    )
    report.extra["restarts"] = restarts
    assert_clean(report)


def _aof_tail(redis_dir: Path) -> Path:
    """The append-only file Redis is writing to (multi-part AOF: the last .incr.aof)."""
    incr = sorted(
        (redis_dir / "appendonlydir").glob("*.incr.aof"), key=lambda p: int(p.name.split(".")[-3])
    )
    assert incr, f"no incremental AOF under {redis_dir}"
    return incr[-1]


# Once lost about half the acknowledged writes of the window: Redis came back without
# applies the worker had confirmed to JetStream. Every commit now carries the last stream
# position the worker applied; Redis behind it refuses the commit, and the shard replays
# the gap from the command log before going on.
async def test_redis_loses_unsynced_tail(cluster: Cluster, tenant: str) -> None:
    """What `appendfsync everysec` allows on a host crash: Redis comes back without the
    last writes it acknowledged. Simulated exactly: the AOF's size is noted (as if fsynced
    then), the workload goes on, Redis is SIGKILLed and the file cut back to that size."""
    await cluster.start_services(workers=2)
    cut_bytes = 0

    async def fault() -> None:
        nonlocal cut_bytes
        await later(scale(1.0, 10.0))
        aof = _aof_tail(cluster.redis.data_dir)
        synced = aof.stat().st_size
        await later(0.8)  # the unsynced window: < 1 s of applies
        await asyncio.to_thread(cluster.redis.kill)
        cut_bytes = aof.stat().st_size - synced
        os.truncate(aof, synced)
        await asyncio.to_thread(cluster.redis.start)

    report = await run_scenario(
        cluster,
        tenant,
        "redis loses its unsynced AOF tail",
        fault=fault,
        duration_s=scale(3.0, 20.0),
    )
    report.extra["aof_bytes_cut"] = cut_bytes
    assert cut_bytes > 0
    assert_clean(report)


# --- NATS SIGKILLed and restarted on its JetStream store ---------------------------------


# Once failed for good (a shard waited for ever on a publish acknowledgement lost in the
# crash); the worker now bounds those waits and retries the batch.
async def test_nats_sigkill_restart_on_store(cluster: Cluster, tenant: str) -> None:
    await cluster.start_services(workers=2)
    restarts = 0

    async def fault() -> None:
        nonlocal restarts
        for _ in range(int(scale(2, 4))):
            await later(scale(1.0, 8.0))
            await asyncio.to_thread(cluster.nats.kill)
            await later(1.0)
            await asyncio.to_thread(cluster.nats.start)
            restarts += 1

    report = await run_scenario(
        cluster,
        tenant,
        "nats SIGKILL + restart on JetStream store",
        fault=fault,
        duration_s=scale(4.0, 40.0),
        client_timeout=5.0,
        idle_limit_s=8.0,
    )
    report.extra["restarts"] = restarts
    assert_clean(report)


# --- clients whose connection is cut mid-stream ------------------------------------------


async def test_client_disconnect_reconnect(cluster: Cluster, tenant: str) -> None:
    await cluster.start_services(workers=2)
    proxy = await CutProxy(cluster.nats.port).start()

    async def fault() -> None:
        for _ in range(int(scale(3, 20))):
            await later(scale(0.8, 2.0))
            proxy.cut()

    try:
        report = await run_scenario(
            cluster,
            tenant,
            "clients cut off and reconnecting",
            fault=fault,
            url=proxy.url,
            duration_s=scale(3.0, 45.0),
            client_timeout=3.0,
        )
    finally:
        await proxy.stop()
    report.extra["cuts"] = proxy.cuts
    assert_clean(report)
