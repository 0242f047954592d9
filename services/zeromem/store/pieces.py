"""Reads over keys in many slots: what a tenant-wide read needs on a Redis Cluster.

On one Redis these are the plain commands (one MGET, one SMEMBERS, one SCAN). On a
cluster a multi-key command must stay within one slot, and SCAN walks one node: here a
read of many keys is one pipeline (redis-py's cluster pipeline sends each node its
commands together), and a scan visits every master (``store.keys.Layout``).
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

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
        await _rewrite_after_any_running(redis.bgrewriteaof)
        return
    cluster: Any = redis
    for node in cluster.get_primaries():
        await _rewrite_after_any_running(functools.partial(cluster.bgrewriteaof, target_nodes=node))


# How long an erasure waits for a rewrite already running to end before it starts its
# own (a rewrite of a few GB takes seconds to minutes).
AOF_REWRITE_WAIT_S = 300.0


async def _rewrite_after_any_running(rewrite: Callable[[], Awaitable[Any]]) -> None:
    """Start a rewrite; if one is already running (another erasure's, or Redis's own), it
    copies the data from before this erasure's deletes: wait for it to end and start
    another, so the rewritten file never holds the erased keys."""
    deadline = time.monotonic() + AOF_REWRITE_WAIT_S
    while True:
        try:
            await rewrite()
            return
        except ResponseError as exc:
            if "already in progress" not in str(exc) or time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.1)  # polled: Redis tells nobody when its rewrite ends
