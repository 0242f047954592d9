"""Browsing queries: the owners of a tenant, and an owner's archive tier.

What an inspector (``zeromem inspect``) walks before it reaches keys, answered by the
read services like get and list, so the caller's own credential decides what it may
see (the server lets an agent request only ``zm.q.<its tenant>.<itself>.*``).

Neither reads a whole tenant: owners come from a skip-scan of the key index
(``owners.lua``: two O(log n) calls per owner listed), the archive tier from HSCAN pages
of one owner's archive hash.
"""

from __future__ import annotations

import msgspec
from redis.asyncio import Redis

from zeromem.lifecycle.reads import ReadRecorder
from zeromem.lifecycle.vault import open_archive_records
from zeromem.query.admission import Refused
from zeromem.query.responder import Answer, Responder
from zeromem.schemas import (
    ArchivedReply,
    ArchivedRequest,
    MemoryItem,
    MemoryKey,
    OwnersReply,
    OwnersRequest,
    OwnerSummary,
    encode,
)
from zeromem.store import scripts
from zeromem.store.keys import RedisKeys
from zeromem.store.replies import as_bytes

_ITEM_DECODER = msgspec.msgpack.Decoder(MemoryItem)
_AFTER_OWNER = ";"  # the byte after ':', which no owner id holds (see owners.lua)


class OwnerBrowser:
    def __init__(self, redis: Redis) -> None:
        self.redis = redis

    async def owners(self, tenant: str, prefix: str, cursor: str, limit: int) -> OwnersReply:
        """A page of owners whose ``namespace:owner_id`` starts with ``prefix``, after
        ``cursor`` (the last owner of the previous page), with live and archived counts."""
        keys = RedisKeys(tenant)
        start = b"[" + (cursor + _AFTER_OWNER if cursor else prefix).encode()
        end = b"[" + prefix.encode() + b"\xff" if prefix else b"+"
        # On a cluster each piece holds its shard's owners: each piece's page, merged by
        # name (an owner lives in one piece only).
        found: list[tuple[str, int]] = []
        more = 0
        for piece in keys.layout.pieces:
            flat = await scripts.OWNERS(self.redis, [keys.keys(piece)], [start, end, limit])
            more |= int(flat[0])
            found += [(flat[i].decode(), int(flat[i + 1])) for i in range(1, len(flat), 2)]
        found.sort(key=lambda pair: pair[0] + ":")  # key order, as one piece lists them
        more = int(more or len(found) > limit)
        found = found[:limit]
        names = [owner for owner, _ in found]
        async with self.redis.pipeline(transaction=False) as pipe:
            for owner in names:
                pipe.hlen(keys.archive(owner))
            archived = await pipe.execute()
        owners = tuple(
            OwnerSummary(owner, count, int(archived[i])) for i, (owner, count) in enumerate(found)
        )
        return OwnersReply(owners=owners, next_cursor=names[-1] if more and names else "")

    async def archived(
        self, tenant: str, owner: str, key: str, cursor: str, limit: int
    ) -> ArchivedReply:
        """One archived memory (``key``), or a page of the owner's archive tier. HSCAN
        pages are approximate in size (Redis's COUNT is a hint) and unordered."""
        archive = RedisKeys(tenant).archive(owner)
        if key:
            raw = await self.redis.hget(archive, key)
            one = await open_archive_records(
                self.redis, tenant, {key: as_bytes(raw)} if raw else {}
            )
            return ArchivedReply(items=tuple(_ITEM_DECODER.decode(v) for v in one.values()))
        position, found = await self.redis.hscan(archive, int(cursor or 0), count=limit)
        assert isinstance(found, dict)  # a list only with no_values=True
        # memories encrypted at rest are opened (lifecycle.vault)
        page = await open_archive_records(
            self.redis, tenant, {as_bytes(k).decode(): as_bytes(v) for k, v in found.items()}
        )
        items = sorted((_ITEM_DECODER.decode(v) for v in page.values()), key=lambda i: i.key)
        return ArchivedReply(items=tuple(items), next_cursor=str(position) if position else "")


def register_browse_handlers(responder: Responder, redis: Redis, recorder: ReadRecorder) -> None:
    """Route owners and archived on ``responder`` (the same admission and the same turns
    as get and list)."""
    browser = OwnerBrowser(redis)

    async def owners(request: OwnersRequest) -> Answer:
        reply = await browser.owners(request.tenant, request.prefix, request.cursor, request.limit)
        await recorder.after_read(
            request.tenant, request.reader, "owners", (), detail={"prefix": request.prefix}
        )
        return Answer(encode(reply))

    async def archived(request: ArchivedRequest) -> Answer:
        owner = request.owner
        if not owner or MemoryKey.parse(owner).name is not None:
            raise Refused(f"an owner is 'namespace:owner_id', not {owner!r}")
        if request.key and not request.key.startswith(owner + ":"):
            raise Refused(f"{request.key!r} is not a key of {owner!r}")
        if request.cursor and not request.cursor.isdigit():
            raise Refused(f"not a cursor of this query: {request.cursor!r}")
        reply = await browser.archived(
            request.tenant, owner, request.key, request.cursor, request.limit
        )
        await recorder.after_read(
            request.tenant, request.reader, "archived", (i.key for i in reply.items)
        )
        return Answer(encode(reply))

    responder.route("owners", OwnersRequest, owners)
    responder.route("archived", ArchivedRequest, archived)
