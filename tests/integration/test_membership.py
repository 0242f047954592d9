"""Dynamic membership inside one process: a worker alone holds every shard, workers that
join share them, a worker that stops hands its shards over at once; writes go on through
every change. (A worker SIGKILLed, whose shards move when its leases expire, is in
tests/reliability/test_rescale.py: it takes a process of its own.)"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

from tests.conftest import REDIS_MASTERS
from tests.eventually import eventually
from zeromem.auth.authority import Authority
from zeromem.bus import connect_nats, connect_redis
from zeromem.embedded.stack import settings_for_role
from zeromem.sdk import MemoryClient
from zeromem.settings import Settings
from zeromem.worker.membership import Membership
from zeromem.worker.service import WorkerService

SHARDS = 12

# On a Redis Cluster a process names its keys for one shard count (store.keys.Layout): the
# session's 8, not this test's 12. Membership itself touches one key, in any layout.
pytestmark = pytest.mark.skipif(
    REDIS_MASTERS > 0, reason="another shard count than the cluster run's (one layout a process)"
)


@pytest.fixture
def fast(isolated: Settings, authority: Authority) -> Settings:
    quick = isolated.with_(
        shards=SHARDS, worker={"lease_ttl_s": 1.5, "membership_interval_s": 0.25}
    )
    return settings_for_role(quick, authority, "worker")


@pytest.fixture
async def workers() -> AsyncIterator[list[WorkerService]]:
    started: list[WorkerService] = []
    yield started
    for worker in started:
        await worker.stop()
        await worker.nc.close()
        await worker.redis.aclose()


async def start_worker(settings: Settings, name: str) -> WorkerService:
    nc = await connect_nats(settings, name=name)
    redis = connect_redis(settings)
    membership = Membership(redis, settings.worker.lease_ttl_s, member_id=name)
    return await WorkerService(settings, None, nc=nc, redis=redis, membership=membership).start()


def split(workers: list[WorkerService]) -> list[int]:
    return sorted(len(w.owned) for w in workers)


async def put_and_read(settings: Settings, tenant: str, n: int) -> None:
    async with await MemoryClient.connect(
        settings.bus.nats_url, tenant=tenant, shards=SHARDS, timeout=15.0
    ) as client:
        for i in range(n):
            await client.put(f"user:u{i}:k", i, wait="applied")


async def test_workers_share_hand_over_and_take_over(
    fast: Settings, workers: list[WorkerService], isolated: Settings
) -> None:
    admin = isolated.with_(shards=SHARDS)
    workers.append(await start_worker(fast, "w-a"))
    await workers[0].wait_owned(timeout=20.0)
    assert workers[0].owned == set(range(SHARDS))

    workers.append(await start_worker(fast, "w-b"))
    workers.append(await start_worker(fast, "w-c"))
    await eventually(lambda: _settled(workers), lambda ok: ok, timeout=20.0)
    assert split(workers) == [4, 4, 4]
    assert set().union(*(w.owned for w in workers)) == set(range(SHARDS))
    await put_and_read(admin, "acme", 12)

    # A clean stop deregisters first: the others take its shards without waiting out a
    # registration or a lease.
    leaving = workers.pop(0)
    stopped_at = time.monotonic()
    await leaving.stop()
    await eventually(lambda: _settled(workers), lambda ok: ok, timeout=20.0)
    assert split(workers) == [6, 6]
    handed_over_s = time.monotonic() - stopped_at
    assert handed_over_s < 1.5 + 1.0, handed_over_s  # well under a lease's expiry

    await put_and_read(admin, "acme", 12)
    await leaving.nc.close()
    await leaving.redis.aclose()


async def _settled(workers: list[WorkerService]) -> bool:
    return all(w.settled for w in workers) and sum(len(w.owned) for w in workers) == SHARDS
