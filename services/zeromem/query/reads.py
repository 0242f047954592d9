"""Reading memories out of Redis: shared by the query and recall services.

Expiry is enforced here as well as by the reaper: a memory whose ``expires_at`` has passed
is never returned, even in the moment before the reaper removes it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import msgspec
from redis.asyncio import Redis

from zeromem.lifecycle.vault import open_blobs
from zeromem.schemas import ListReply, MemoryItem, owner_of
from zeromem.store.items import ITEM_FIELDS, decode_item_hash
from zeromem.store.keys import DATA_FIELD, RedisKeys
from zeromem.store.pieces import merged
from zeromem.store.replies import as_bytes, as_text


def live_item(fields: Sequence[bytes | None], now: float) -> MemoryItem | None:
    state = decode_item_hash(fields)
    item = state.live(now)
    if item is None:
        return None
    return msgspec.structs.replace(item, feedback=state.feedback)


async def get_items(redis: Redis, tenant: str, keys: Sequence[str]) -> list[MemoryItem | None]:
    rkeys = RedisKeys(tenant)
    now = time.time()
    async with redis.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.hmget(rkeys.item(key), ITEM_FIELDS)
        replies = await pipe.execute()
    at = ITEM_FIELDS.index(DATA_FIELD)
    opened = await open_blobs(
        redis, tenant, [(key, DATA_FIELD, r[at]) for key, r in zip(keys, replies, strict=True)]
    )
    for n, plain in opened.items():  # memories encrypted at rest (lifecycle.vault)
        replies[n] = None if plain is None else [*replies[n][:at], plain, *replies[n][at + 1 :]]
    return [None if r is None else live_item(r, now) for r in replies]


async def _range_by_lex(
    redis: Redis, rkeys: RedisKeys, prefix: str, start: bytes, end: bytes, num: int
) -> list[bytes]:
    """ZRANGEBYLEX over the tenant's live keys: one key on one Redis, or on a cluster the
    piece of the owner a prefix names whole (``ns:id:...``), else every piece's page
    merged in key order."""
    if not rkeys.layout.cluster or prefix.count(":") >= 2:
        piece = rkeys.shard_of(owner_of(prefix)) if rkeys.layout.cluster else 0
        page = await redis.zrangebylex(rkeys.keys(piece), start, end, start=0, num=num)
        return [as_bytes(m) for m in page]
    async with redis.pipeline(transaction=False) as pipe:
        for piece in rkeys.layout.pieces:
            pipe.zrangebylex(rkeys.keys(piece), start, end, start=0, num=num)
        pages = await pipe.execute()
    return merged(pages, num)


async def list_keys(
    redis: Redis, tenant: str, prefix: str, cursor: str, limit: int, with_items: bool
) -> ListReply:
    """One page of live keys starting with ``prefix``, after ``cursor``, in key order."""
    rkeys = RedisKeys(tenant)
    start = b"(" + cursor.encode() if cursor else b"[" + prefix.encode()
    end = b"[" + prefix.encode() + b"\xff"
    raw = await _range_by_lex(redis, rkeys, prefix, start, end, limit + 1)
    page = [as_text(k) for k in raw[:limit]]
    more = len(raw) > limit
    items = await get_items(redis, tenant, page)
    live = [(k, item) for k, item in zip(page, items, strict=True) if item is not None]
    return ListReply(
        keys=tuple(k for k, _ in live),
        items=tuple(item for _, item in live) if with_items else (),
        next_cursor=page[-1] if more and page else "",
    )
