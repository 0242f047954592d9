"""A worker's background jobs: the reaper (expired memories become tombstones) and the
archive schedule (archive commands for owners with old memories), each for the shards
this worker holds; and the report of each shard's backlog."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection

from nats.js import JetStreamContext
from redis.asyncio import Redis
from redis.exceptions import RedisError

from zeromem import naming
from zeromem.schemas import Result, owner_of
from zeromem.settings import Settings
from zeromem.store.keys import RedisKeys, expiring_tenants_key, layout
from zeromem.store.replies import as_text
from zeromem.worker.applier import Applier
from zeromem.worker.store import OK

log = logging.getLogger(__name__)

# Publishes a change made outside any command: (tenant, shard, key, result).
Announce = Callable[[str, int, str, Result], Awaitable[None]]


async def reap_expired(
    applier: Applier,
    redis: Redis,
    owned: Collection[int],
    shards: int,
    *,
    limit: int = 512,
    announce: Announce | None = None,
) -> int:
    """Tombstone the memories of ``owned`` shards (of ``shards``) whose time to live has
    passed, under the applier's lease token; ``announce`` each on the change feed (a
    rebuild, which reproduces them, does not). The commit is guarded like any other, so
    a command racing with the reaper wins cleanly."""
    now = time.time()
    reaped = 0
    # One Redis: one expiring set per tenant, filtered by shard. A cluster: a set per
    # tenant and shard, and this worker visits its own shards' only.
    pieces = [p for p in layout().pieces if p in owned] if layout().cluster else [0]
    for piece in pieces:
        reaped += await _reap_piece(applier, redis, owned, shards, piece, now, limit, announce)
    return reaped


async def _reap_piece(
    applier: Applier,
    redis: Redis,
    owned: Collection[int],
    shards: int,
    piece: int,
    now: float,
    limit: int,
    announce: Announce | None,
) -> int:
    reaped = 0
    for raw_tenant in await redis.smembers(expiring_tenants_key(piece)):
        tenant = as_text(raw_tenant)
        due = await redis.zrangebyscore(
            RedisKeys(tenant).expiring(piece), "-inf", now, start=0, num=limit
        )
        by_shard: dict[int, list[str]] = {}
        for raw_key in due:
            key = as_text(raw_key)
            shard = naming.shard_for(tenant, owner_of(key), shards)
            if shard in owned:
                by_shard.setdefault(shard, []).append(key)
        for shard, keys in by_shard.items():
            states, _ = await applier.store.read([(tenant, k) for k in keys], [], shard=shard)
            orphans = [
                k
                for k, st in zip(keys, states, strict=True)
                if st.item is None or st.item.expires_at is None
            ]
            if orphans:  # an index entry that outlived its memory: drop it
                await redis.zrem(RedisKeys(tenant).expiring(piece), *orphans)
            outcomes = [
                o
                for k, st in zip(keys, states, strict=True)
                if (o := applier.engine.reap(tenant, k, st, now)) is not None
            ]
            replies = await applier.store.commit(
                outcomes, shard=shard, sequences=[0] * len(outcomes), lease_token=applier.token
            )
            for outcome, reply in zip(outcomes, replies, strict=True):
                if reply.status == OK:
                    label = applier.telemetry.tenant(tenant)
                    reaped += 1
                    applier.stats.expired += 1
                    applier.telemetry.memories_expired.add(1, {"zeromem.tenant": label})
                    applier.telemetry.memories_stored.add(-1, {"zeromem.tenant": label})
                    if announce is not None:  # a rebuild reproduces them: announced once
                        await announce(tenant, shard, outcome.key, outcome.result)
    return reaped


async def run_reaper(
    applier: Applier,
    redis: Redis,
    owned: Collection[int],
    settings: Settings,
    announce: Announce,
    stopping: asyncio.Event,
) -> None:
    while not stopping.is_set():
        await asyncio.sleep(settings.worker.reaper_interval_s)
        try:
            await reap_expired(applier, redis, owned, settings.shards, announce=announce)
        except RedisError as exc:
            log.warning("reaper: redis error, will retry: %s", exc)
        except Exception:
            log.exception("reaper failed; will retry")


async def run_archiver(
    schedule: Callable[[float, set[int]], Awaitable[int]],
    owned: Collection[int],
    after_days: float,
    interval_s: float,
    stopping: asyncio.Event,
) -> None:
    """Every ``interval_s``: ``schedule`` archive commands for the owned shards' owners
    with memories older than ``after_days``."""
    while not stopping.is_set():
        try:
            cutoff = time.time() - after_days * 86400
            sent = await schedule(cutoff, set(owned))
            if sent:
                log.info("archiver: %d archive commands published", sent)
        except Exception:
            log.exception("archiver failed; will retry")
        await asyncio.sleep(interval_s)


async def report_lag(
    js: JetStreamContext,
    consumers: dict[int, str],
    set_lag: Callable[[int, int], None],
    stopping: asyncio.Event,
) -> None:
    """Every 5 s, each owned shard's backlog (pending and unacknowledged commands)."""
    while not stopping.is_set():
        for shard, consumer in sorted(consumers.items()):
            try:
                info = await js.consumer_info(naming.COMMAND_STREAM, consumer)
                set_lag(shard, info.num_pending + info.num_ack_pending)
            except Exception:  # lag is informative; never a reason to fail
                pass
        await asyncio.sleep(5.0)
