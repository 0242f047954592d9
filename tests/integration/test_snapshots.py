"""Issue 14 item 5: durable snapshots, and rebuilds from a bounded command log.

A snapshot is taken while a writer keeps writing; it holds exactly the commands up to
each shard's recorded position (checked against the live results index, which a copy
made key by key would not match); the log then loses its head to an age limit, and
``zeromem rebuild`` restores the snapshot, replays the rest and equals the live state.
Without a snapshot covering the gap it refuses, changing nothing. A forget and a tenant
erasure after a snapshot: the rebuild brings neither back, the stored snapshots hold none
of the erased tenant's data, and no data directory holds its plaintext.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from pathlib import Path

import pytest
from redis.asyncio import Redis

from tests.conftest import REDIS_MASTERS
from tests.eventually import eventually
from tests.harness import ServiceSet
from tests.integration.test_encryption_at_rest import _persisted, _rewritten, found_in_files
from tests.integration.test_lifecycle_cli import cli
from zeromem import naming
from zeromem.bus import connect_nats, connect_redis, provision, shard_backlogs
from zeromem.embedded.snapshot import take_snapshot
from zeromem.lifecycle import snapshot_store
from zeromem.lifecycle.snapshot import differences, snapshot
from zeromem.lifecycle.vault import vault_of
from zeromem.sdk import MemoryClient
from zeromem.settings import Settings
from zeromem.store.keys import DATA_KEY_FIELD, RedisKeys
from zeromem.worker.rebuild import SnapshotPredatesShreddingError, TruncatedLogError, rebuild

pytestmark = [
    pytest.mark.timeout(150),
    pytest.mark.skipif(
        REDIS_MASTERS > 0,
        reason="snapshots of a Redis Cluster are not built (zeromem snapshot refuses one)",
    ),
]
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india"]


async def _settled(settings: Settings, client: MemoryClient, nc) -> None:  # type: ignore[no-untyped-def]
    await client.flush(timeout=60)

    async def drained() -> bool:
        backlogs = await shard_backlogs(nc.jetstream(), settings.shards)
        return all(b == 0 for b in backlogs.values())

    await eventually(drained, timeout=30.0)


async def _one(client: MemoryClient, rng: random.Random, owners: list[str], n: int) -> None:
    owner = rng.choice(owners)
    key = f"{owner}:k{rng.randint(0, 7)}"
    roll = rng.random()
    text = " ".join(rng.sample(WORDS, 3))
    if roll < 0.55:
        await client.put(key, {"n": n}, content=text, tags=(rng.choice(WORDS[:3]),))
    elif roll < 0.7:
        await client.patch(key, {"p": n})
    elif roll < 0.8:
        await client.feedback(key, "liked")
    elif roll < 0.88:
        await client.delete(key)
    else:
        await client.put(owner, text, content=text, type="message")  # an append


async def _results_up_to(redis: Redis, tenant: str, positions: dict[int, int]) -> set[bytes]:
    """The tenant's stored command results of commands at or before each shard's position."""
    found: set[bytes] = set()
    for shard, position in positions.items():
        index = RedisKeys(tenant).results(shard)
        found |= set(await redis.zrangebyscore(index, 0, position))
    return found


def _copy_database(settings: Settings) -> Redis:
    """Database 1 of the test's Redis: where a stored snapshot is restored to be read."""
    return Redis.from_url(settings.store.redis_url.rsplit("/", 1)[0] + "/1")


async def _restored(settings: Settings, js, stored, tmp_path: Path) -> dict:  # type: ignore[no-untyped-def]
    """``stored`` restored alone into database 1, and its picture (``lifecycle.snapshot``)."""
    path = tmp_path / f"{stored.name}.zms"
    await snapshot_store.fetch(js, stored, path)
    copy = _copy_database(settings)
    try:
        await copy.flushdb()
        await snapshot_store.restore(copy, path)
        return await snapshot(copy)
    finally:
        path.unlink()
        await copy.aclose()


async def test_snapshot_under_writes_and_rebuild_after_the_log_lost_its_head(
    isolated, tmp_path: Path
) -> None:
    settings = isolated
    services = await ServiceSet.start(settings)
    redis, nc = connect_redis(settings), await connect_nats(settings, "snapshot-test")
    js = nc.jetstream()
    tenant, rng = "snap-one", random.Random(14)
    owners = [f"user:o{i}" for i in range(24)] + [f"task:t{i}" for i in range(8)]
    try:
        async with await MemoryClient.connect(
            settings.bus.nats_url, tenant=tenant, agent="load", shards=settings.shards
        ) as client:
            for n in range(400):  # the head of the log, which the age limit will drop
                await _one(client, rng, owners, n)
            await _settled(settings, client, nc)
            head_written = time.time()
            await asyncio.sleep(2.5)

            # a snapshot while a writer keeps writing
            sent = 0
            stop = asyncio.Event()

            async def writer() -> None:
                nonlocal sent
                while not stop.is_set():
                    await _one(client, rng, owners, 1000 + sent)
                    sent += 1
                    if sent % 20 == 0:
                        await asyncio.sleep(0.001)  # let the acks in

            task = asyncio.create_task(writer())
            await eventually(lambda: sent >= 100, timeout=20)
            before = sent
            report = await take_snapshot(settings)
            during = sent - before
            await asyncio.sleep(0.2)
            stop.set()
            await task
            assert during > 0, "the writer wrote nothing while the snapshot was taken"
            for n in range(200):  # after the snapshot
                await _one(client, rng, owners, 5000 + n)
            await client.forget("user:o3", wait="applied")
            await _settled(settings, client, nc)

        stored = await snapshot_store.latest(js)
        assert stored is not None and stored.name == report.name
        header = stored.header
        assert header.keys == report.keys > 0 and sum(header.positions.values()) > 0

        # Consistency: the snapshot holds the result of every command at or before its
        # shard's position, exactly as the live results index (complete here) has them.
        # Past the position it may hold the first commands of a batch message whose last
        # one was not committed at the cut: a message larger than a commit call spans
        # several calls, and only its last command records the position (worker.messages),
        # so the replay after a restore takes that message again and finds those commands
        # done (seen once in a full run: one such message on each of four shards).
        everything = {s: 1 << 62 for s in header.positions}
        copy = _copy_database(settings)
        try:
            await _restored(settings, js, stored, tmp_path)
            in_copy = await _results_up_to(copy, tenant, everything)
            covered = await _results_up_to(copy, tenant, header.positions)
            assert covered and covered == await _results_up_to(redis, tenant, header.positions)
            assert len(in_copy) < len(await _results_up_to(redis, tenant, everything))
            await copy.flushdb()
        finally:
            await copy.aclose()

        # The log loses its head to an age limit (the commands before the pause).
        age = time.time() - head_written - 1.2
        bounded = settings.with_(
            bus={"stream_max_age_s": age, "dedupe_window_s": 1.0},
            snapshot={"interval_s": age / 2},
        )
        await provision(js, bounded)

        async def head_dropped() -> bool:
            return (await js.stream_info(naming.COMMAND_STREAM)).state.first_seq > 1

        await eventually(head_dropped, timeout=15)
        # then no more age: nothing after the snapshot may go while the test runs
        await provision(js, settings.with_(bus={"dedupe_window_s": 1.0}))

        live = await snapshot(redis)
        with pytest.raises(TruncatedLogError, match="no snapshot covers them"):
            await rebuild(settings, nc=nc, redis=redis, use_snapshot=False)
        assert await snapshot(redis) == live  # refused before anything changed

        rebuilt = await rebuild(settings, nc=nc, redis=redis)
        assert rebuilt.snapshot == report.name and rebuilt.restored == report.keys
        assert 0 < rebuilt.commands < 400 + sent + 201
        after = await snapshot(redis)
        assert differences(live, after) == []
        assert after == live

        # from the command line: the list, and a refusal once no snapshot covers the gap
        listed = await cli(settings, "snapshot", "--list")
        assert report.name in listed.stdout
        bucket = await snapshot_store.open_bucket(js)
        assert bucket is not None
        await bucket.delete(report.name)
        refused = await cli(settings, "rebuild", "--yes")
        assert refused.returncode == 1 and "no snapshot covers them" in refused.stderr
        assert await snapshot(redis) == live
    finally:
        await services.stop()
        await nc.close()
        await redis.aclose()


async def _writes(settings: Settings, tenant: str, marker: str, sensitive: bool) -> list[bytes]:
    plain: list[bytes] = []
    async with await MemoryClient.connect(
        settings.bus.nats_url, tenant=tenant, agent="writer", shards=settings.shards
    ) as client:
        for owner in ("user:a", "user:b"):
            value, content = f"VAL-{owner[-1]}-{marker}", f"TXT-{owner[-1]}-{marker}"
            await client.put(
                f"{owner}:note", {"v": value}, content=content, sensitive=sensitive, wait="applied"
            )
            plain += [value.encode(), content.encode()]
    return plain


async def test_forget_and_erase_tenant_after_a_snapshot_bring_nothing_back(
    isolated, tmp_path: Path
) -> None:
    from zeromem.lifecycle.erasure import erase_tenant

    settings = isolated.with_(snapshot={"keep": 2})
    services = await ServiceSet.start(settings)
    redis, nc = connect_redis(settings), await connect_nats(settings, "snapshot-erase")
    js = nc.jetstream()
    marker = uuid.uuid4().hex
    kept, gone, plain = f"k{marker[:8]}", f"g{marker[:8]}", f"p{marker[:8]}"
    try:
        sealed = await _writes(settings, kept, marker, sensitive=True)  # a: [0:2], b: [2:4]
        erased = await _writes(settings, gone, "g" + marker, sensitive=False)
        clear = await _writes(settings, plain, "p" + marker, sensitive=False)
        first = await take_snapshot(settings)
        wrapped_a = await redis.hget(RedisKeys(kept).data_key("user:a"), DATA_KEY_FIELD)
        assert wrapped_a

        async def contents() -> bytes:
            """Every stored snapshot's keys and values, decoded (a DUMP payload may be
            compressed): each restored into a database of its own and read back."""
            out = b""
            for stored in await snapshot_store.snapshots(js):
                picture = await _restored(settings, js, stored, tmp_path)
                out += repr(picture).encode()
            return out

        held = await contents()
        # what a snapshot keeps: an encrypted memory sealed, an unencrypted one in clear
        # (as the command log does), and no data key at all
        assert not [x for x in sealed if x in held] and wrapped_a not in held
        assert all(x in held for x in erased + clear)

        async with await MemoryClient.connect(
            settings.bus.nats_url, tenant=kept, agent="writer", shards=settings.shards
        ) as client:
            assert (await client.forget("user:a")).status == "applied"
        # The snapshot holds user:a's memories sealed under the key its forget destroyed:
        # nothing can open them (shredded), nor decide the forget's replay on them, so a
        # rebuild from it is refused, changing nothing; a newer snapshot serves.
        vault = vault_of(settings, redis)
        live = await snapshot(redis, vault=vault)
        with pytest.raises(SnapshotPredatesShreddingError, match="1 data key"):
            await rebuild(settings, nc=nc, redis=redis)
        assert await snapshot(redis, vault=vault) == live
        second = await take_snapshot(settings)

        async with await MemoryClient.connect(
            settings.bus.nats_url, tenant=plain, agent="writer", shards=settings.shards
        ) as client:
            assert (await client.forget("user:a")).status == "applied"
        erasure = await erase_tenant(nc, redis, gone)
        assert erasure.snapshots == 2  # both stored snapshots held the tenant

        held = await contents()
        assert not [x for x in erased if x in held]  # the tenant left the snapshots
        assert gone.encode() not in held  # nor its keys, nor its name in the tenant sets
        # the forgotten unencrypted owner stays in the snapshots before its forget, as in
        # the command log, until retention drops them
        assert clear[0] in held

        # a rebuild from the snapshot taken before that forget and the erasure brings
        # none of them back
        live = await snapshot(redis, vault=vault)
        report = await rebuild(settings, nc=nc, redis=redis)
        assert report.snapshot == second.name and report.restored > 0
        assert differences(live, await snapshot(redis, vault=vault)) == []
        for tenant, owner in ((kept, "user:a"), (plain, "user:a"), (gone, "user:b")):
            async with await MemoryClient.connect(
                settings.bus.nats_url, tenant=tenant, agent="reader", shards=settings.shards
            ) as client:
                assert await client.get(f"{owner}:note") is None, (tenant, owner)
        async with await MemoryClient.connect(
            settings.bus.nats_url, tenant=kept, agent="reader", shards=settings.shards
        ) as client:
            got = await client.get("user:b:note")
            assert got is not None and got.value == {"v": sealed[2].decode()}
        assert not [k async for k in redis.scan_iter(match=f"zm:{gone}:*")]
        assert not await redis.sismember("zm:tenants", gone)

        # retention: the newest are kept (two, then one); the forgotten owner leaves with
        # the older ones
        assert len(await snapshot_store.snapshots(js)) == 2
        await take_snapshot(settings.with_(snapshot={"keep": 1}))
        names = [s.name for s in await snapshot_store.snapshots(js)]
        assert len(names) == 1 and not {first.name, second.name} & set(names)
        held = await contents()
        assert clear[0] not in held and clear[2] in held  # user:a forgotten, user:b kept

        await redis.bgrewriteaof()
        await _rewritten(redis)
        await _persisted(redis)
        stack_dir = tmp_path / "stack"
        needles = [*sealed[:2], *erased]
        assert found_in_files(stack_dir / "redis", needles) == {}
        assert found_in_files(stack_dir / "nats", needles) == {}
        assert found_in_files(stack_dir / "redis", [wrapped_a]) == {}
    finally:
        await services.stop()
        await nc.close()
        await redis.aclose()
