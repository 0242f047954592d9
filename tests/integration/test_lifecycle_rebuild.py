"""Issue 4: Redis is a view of the command log. After a scripted workload of more than
10,000 commands, Redis is flushed and `zeromem rebuild` reconstructs it from the
retained command stream: every memory, version, index entry, statistic, archive record,
command result and shard position identical to a snapshot taken before the flush. A
restart afterwards applies nothing twice."""

from __future__ import annotations

import asyncio
import json
import random
import time

from tests.eventually import eventually
from tests.harness import ServiceSet
from zeromem import naming
from zeromem.bus import connect_nats, connect_redis, shard_backlogs
from zeromem.lifecycle.snapshot import differences, snapshot
from zeromem.lifecycle.vault import vault_of
from zeromem.sdk import MemoryClient
from zeromem.store.keys import RedisKeys
from zeromem.worker.rebuild import rebuild

WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
    "papa",
    "quebec",
    "romeo",
    "sierra",
    "tango",
    "uniform",
    "victor",
    "whiskey",
    "xray",
]
TYPES = ("fact", "decision", "message", "task_state", "user_preference")


async def _drained(js, shards: int) -> bool:  # type: ignore[no-untyped-def]
    return all(backlog == 0 for backlog in (await shard_backlogs(js, shards)).values())


async def _settle(client: MemoryClient, shards: int, observer) -> None:  # type: ignore[no-untyped-def]
    """Until the workers applied everything (the shard consumers are the operator's to see)."""
    await client.flush(timeout=60)
    await eventually(lambda: _drained(observer.jetstream(), shards), timeout=30.0)


async def _workload(client: MemoryClient, rng: random.Random, owners: list[str]) -> int:
    sent = 0

    def content() -> str:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 8)))

    for round_ in range(16):
        for owner in owners:
            for _ in range(4):
                key = f"{owner}:k{rng.randint(0, 5)}"
                roll = rng.random()
                if roll < 0.45:
                    await client.put(
                        key,
                        {"r": round_, "v": rng.randint(0, 99)},
                        content=content(),
                        type=rng.choice(TYPES),
                        tags=tuple(rng.sample(WORDS[:6], rng.randint(0, 2))),
                        ttl=3600 if rng.random() < 0.1 else None,
                        refresh_on_read=rng.random() < 0.05,
                        sensitive=rng.random() < 0.05,
                    )
                elif roll < 0.6:
                    await client.patch(
                        key,
                        {"p": rng.randint(0, 9)},
                        content=content() if rng.random() < 0.5 else None,
                    )
                elif roll < 0.7:
                    await client.put(key, "cas", expected_version=rng.randint(0, 4))
                elif roll < 0.77:
                    await client.delete(key)
                elif roll < 0.9:
                    await client.feedback(key, rng.choice(("liked", "disliked", "important")))
                elif roll < 0.95:
                    await client.expire(key, rng.choice((None, 7200.0)))
                else:
                    await client.put(owner, content(), content=content(), type="message")  # append
                sent += 1
        if round_ in (5, 11):
            await client.flush()
            await asyncio.sleep(0.02)  # every earlier command is older than the cutoff
            cutoff = time.time()
            await asyncio.sleep(0.02)
            for owner in owners[round_ % 3 :: 9]:
                await client.send(_archive(client, owner, cutoff))
                sent += 1
        if round_ in (8, 14):
            for owner in owners[1::11]:
                await client.forget(owner, prefix=f"{owner}:k{rng.randint(0, 5)}", wait="none")
                await client.restore(f"{owner}:k{rng.randint(0, 5)}", wait="none")
                sent += 2
    return sent


def _archive(client: MemoryClient, owner: str, cutoff: float):  # type: ignore[no-untyped-def]
    from zeromem.ids import new_command_id
    from zeromem.schemas import Archive

    return Archive(
        id=new_command_id(),
        tenant=client.tenant,
        agent=client.agent,
        ts=time.time(),
        key=owner,
        older_than=cutoff,
    )


async def test_rebuild_after_a_flush_reproduces_redis_exactly(isolated) -> None:
    settings = isolated
    services = await ServiceSet.start(settings)
    redis = connect_redis(settings)
    nc = await connect_nats(settings, "rebuild-test")
    rng = random.Random(4)
    try:
        sent = 0
        for tenant, n_owners in (("rb-one", 120), ("rb-two", 40)):
            owners = [f"{ns}:o{i}" for i in range(n_owners) for ns in ("user", "task")][:n_owners]
            async with await MemoryClient.connect(
                settings.bus.nats_url, tenant=tenant, agent="load", shards=settings.shards
            ) as client:
                sent += await _workload(client, rng, owners)
                # one message that is no command at all
                await client.nc.publish(
                    naming.command_subject(tenant, 0, "load"), b"\xc1 not msgpack"
                )
                await _settle(client, settings.shards, nc)
        assert sent >= 10_000
        worker = services.workers[0]
        assert worker.stats.archived and worker.stats.forgotten and worker.stats.conflicts

        # sensitive memories are compared by what they hold: the flush takes their owners'
        # data keys with it, and the rebuild seals them again under new ones
        vault = vault_of(settings, redis)
        before = await snapshot(redis, vault=vault)
        n_items = sum(1 for k in before if ":m:" in k)
        await redis.flushall()
        assert await snapshot(redis) == {}

        report = await rebuild(settings, nc=nc, redis=redis)
        after = await snapshot(redis, vault=vault)
        assert differences(before, after) == []
        assert after == before
        assert report.commands >= sent
        print(
            f"\nrebuild: {report.commands} commands, {n_items} memory hashes, "
            f"{len(before)} redis keys in {report.seconds:.2f}s"
        )

        # a tenant alone, while the other tenant's state stays as it is
        await redis.delete(*[k for k in before if k.startswith("zm:rb-two:")][:50])
        from tests.integration.test_lifecycle_cli import cli

        refused = await cli(settings, "rebuild", "--tenant", "rb-two")  # no --yes: nothing done
        assert refused.returncode == 2 and await snapshot(redis, vault=vault) != before
        done = await cli(settings, "rebuild", "--tenant", "rb-two", "--yes", "--json")
        assert done.returncode == 0, done.stderr
        assert await snapshot(redis, vault=vault) == before
        assert 0 < json.loads(done.stdout)["commands"] < report.commands

        # the workers take their shards back and apply nothing twice; new commands follow
        await services.workers[0].wait_owned(timeout=15)
        async with await MemoryClient.connect(
            settings.bus.nats_url, tenant="rb-one", agent="after", shards=settings.shards
        ) as client:
            current = (await client.get("user:o0:k0")) or None
            receipt = await client.put("user:o0:k0", "after the rebuild", wait="applied")
            expected = (
                current.version
                if current
                else int(before.get(RedisKeys("rb-one").item("user:o0:k0"), {}).get(b"v", 0))
            ) + 1
            assert receipt.version == expected
        await services.stop()

        # Commands the workers never saw are applied by a rebuild; the workers, started
        # afterwards, receive them from their consumers and skip them by the shard
        # position the rebuild recorded, even once their result records have expired.
        async with await MemoryClient.connect(
            settings.bus.nats_url, tenant="rb-one", agent="late", shards=settings.shards
        ) as client:
            for i in range(100):
                await client.put(f"task:o{i % 7}:late{i}", i, content=f"late {i}")
            await client.flush()
        await rebuild(settings, nc=nc, redis=redis)
        rebuilt = await snapshot(redis)
        pattern = RedisKeys("rb-one").command_pattern()
        results = [k async for k in redis.scan_iter(match=pattern, count=5000)]
        await redis.delete(*results)  # as if their time to live had passed
        services = await ServiceSet.start(settings)
        restarted = services.workers[0].stats
        await eventually(lambda: restarted.skipped >= 100)
        assert restarted.skipped == 100 and restarted.applied == 0
        after_restart = await snapshot(redis)
        assert {k: v for k, v in after_restart.items() if ":c:" not in k} == {
            k: v for k, v in rebuilt.items() if ":c:" not in k
        }
    finally:
        await services.stop()
        await nc.close()
        await redis.aclose()
