"""Read your writes: a read that names positions in the command log waits until their
shards have applied them.

A fire-and-forget write is acknowledged once JetStream stored it, before a worker applied
it; the acknowledgement carries its stream sequence, and the SDK sends those of its own
writes with a read (``GetRequest.after``: (shard, sequence) pairs). Every commit records,
atomically with the memories it writes, the last sequence its shard applied
(``store.keys.shard_sequence_key``), so "applied through N" is one hash field to read.
That position is a low-water mark over every tenant of the shard: while tenants take
turns (``worker.fairness``) another tenant's backlog holds it back, so the worker also
records, per tenant and shard, the position through which the tenant's own messages are
applied (``RedisKeys.applied``); a position is applied once either has reached it.
The wait polls it, quickly at first (a lone write is applied within milliseconds), and
gives up after ``Limits.read_after_wait_s``: the read then answers with what is applied,
as it would have without positions (a dead-lettered write never moves its shard on its
own, and a read must not hang on it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from redis.asyncio import Redis

from zeromem.store.keys import layout, redis_keys, shard_sequence_key

_FIRST_POLL_S = 0.0005
_LONGEST_POLL_S = 0.008


async def wait_applied(
    redis: Redis,
    after: Sequence[tuple[int, int]],
    limit_s: float,
    shards: int,
    tenant: str | None = None,
) -> bool:
    """Until every (shard, sequence) of ``after`` is applied (``tenant``: by the shard or
    for that tenant's messages), or ``limit_s`` passed; True when they all were. Shards
    outside the deployment's ``shards`` are ignored (a client configured with another
    count sends positions nobody applies)."""
    wanted: dict[int, int] = {}
    for shard, sequence in after:
        if shard < shards and sequence > wanted.get(shard, 0):
            wanted[shard] = sequence
    if not wanted:
        return True
    cluster = layout().cluster
    deadline = time.monotonic() + limit_s
    pause = _FIRST_POLL_S
    keys = redis_keys(tenant) if tenant is not None else None
    while True:
        fields = list(wanted)
        async with redis.pipeline(transaction=False) as pipe:
            if cluster:  # each shard's position in its own slot
                for shard in fields:
                    pipe.hget(shard_sequence_key(shard), str(shard))
            else:
                pipe.hmget(shard_sequence_key(0), [str(s) for s in fields])
            if keys is not None:
                for shard in fields:
                    pipe.get(keys.applied(shard))
            replies = await pipe.execute()
        applied = replies[: len(fields)] if cluster else replies[0]
        own = replies[-len(fields) :] if keys is not None else [None] * len(fields)
        for shard, value, mine in zip(fields, applied, own, strict=True):
            if max(int(value or 0), int(mine or 0)) >= wanted[shard]:
                del wanted[shard]
        if not wanted:
            return True
        if time.monotonic() + pause > deadline:
            return False
        await asyncio.sleep(pause)
        pause = min(pause * 2, _LONGEST_POLL_S)
