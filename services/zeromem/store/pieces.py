"""Reads over keys in many slots: what a tenant-wide read needs on a Redis Cluster.

On one Redis these are the plain commands (one MGET, one SMEMBERS, one SCAN). On a
cluster a multi-key command must stay within one slot, and SCAN walks one node: here a
read of many keys is one pipeline (redis-py's cluster pipeline sends each node its
commands together), and a scan visits every master (``store.keys.Layout``).
"""

from __future__ import annotations

import heapq
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any

from redis.asyncio import Redis

from zeromem.store.keys import layout
from zeromem.store.replies import as_text


async def get_many(redis: Redis, keys: Sequence[str]) -> list[Any]:
    """GET of each key, in order (an MGET on one Redis)."""
    if not keys:
        return []
    if not layout().cluster:
        return list(await redis.mget(keys))
    async with redis.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.get(key)
        return list(await pipe.execute())


async def members_of_pieces(redis: Redis, key_of: Callable[[int], str]) -> set[str]:
    """The union of a set kept per piece (``key_of(shard)``: one key on one Redis)."""
    pieces = layout().pieces
    async with redis.pipeline(transaction=False) as pipe:
        for piece in pieces:
            pipe.smembers(key_of(piece))
        replies = await pipe.execute()
    return {as_text(m) for members in replies for m in members}


async def scan_keys(redis: Redis, match: str, count: int = 1000) -> AsyncIterator[bytes]:
    """Every key matching ``match``; on a cluster, on every master (SCAN walks one node:
    redis-py's cluster client walks each master with a cursor of its own)."""
    async for name in redis.scan_iter(match=match, count=count):
        yield name


def merged(runs: Iterable[Iterable[bytes]], limit: int) -> list[bytes]:
    """The first ``limit`` of sorted runs merged (each piece's ZRANGEBYLEX page)."""
    out: list[bytes] = []
    last: bytes | None = None
    for member in heapq.merge(*runs):
        if member != last:
            out.append(member)
            last = member
        if len(out) >= limit:
            break
    return out


async def rewrite_append_only_files(redis: Redis) -> None:
    """BGREWRITEAOF on the server, or on every master of a cluster (what an erasure needs
    so that no old append-only file still holds the erased keys)."""
    if not layout().cluster:
        await redis.bgrewriteaof()
        return
    cluster: Any = redis
    for node in cluster.get_primaries():
        await cluster.bgrewriteaof(target_nodes=node)
