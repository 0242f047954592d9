"""Finding what to archive, and publishing the archive commands.

Archiving goes through the command log like every other change (one ``archive`` command
per owner, applied by the owner's shard in order with its other commands), so a rebuild
reproduces it. The owners of a tenant are found in its keys index without reading it
whole: a Lua script (``store/archive_owners.lua``) walks it owner by owner (ZRANGEBYLEX
jumps past each owner's keys) and keeps the owners whose oldest memory is older than the
cutoff.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from nats.aio.client import Client as NatsClient
from redis.asyncio import Redis

from zeromem import naming
from zeromem.ids import new_command_id
from zeromem.schemas import Archive, encode
from zeromem.settings import Settings
from zeromem.store import scripts
from zeromem.store.keys import RedisKeys, tenants_key
from zeromem.store.pieces import members_of_pieces

ARCHIVER_AGENT = "zeromem-archiver"


async def owners_to_archive(
    redis: Redis, tenant: str, cutoff: float, *, prefix: str = "", page: int = 256
) -> AsyncIterator[str]:
    """The tenant's owners (starting with ``prefix``, e.g. ``task:``) holding memories
    last updated before ``cutoff``."""
    keys = RedisKeys(tenant)
    if not keys.layout.cluster:
        async for owner in _owners_in_piece(redis, keys, 0, cutoff, prefix, page):
            yield owner
        return
    # A cluster: every shard's piece, merged in key order as one piece gives them.
    found = []
    for piece in keys.layout.pieces:
        found += [o async for o in _owners_in_piece(redis, keys, piece, cutoff, prefix, page)]
    for owner in sorted(found, key=lambda o: o + ":"):
        yield owner


async def _owners_in_piece(
    redis: Redis, keys: RedisKeys, piece: int, cutoff: float, prefix: str, page: int
) -> AsyncIterator[str]:
    template = keys.by_time_pattern(piece)
    start = "[" + prefix if prefix else "-"
    while True:
        reply = await scripts.ARCHIVE_OWNERS(
            redis, [keys.keys(piece)], [template, start, repr(cutoff), page]
        )
        nxt = reply[0].decode()
        for owner in reply[1:]:
            owner = owner.decode()
            if owner.startswith(prefix) or (prefix and prefix.startswith(owner)):
                yield owner
            elif prefix:
                return
        if not nxt:
            return
        start = nxt


async def publish_archive(
    nc: NatsClient,
    settings: Settings,
    tenant: str,
    owner: str,
    cutoff: float,
    *,
    prefix: str = "",
    agent: str = ARCHIVER_AGENT,
) -> str:
    """Publish one archive command (stored by JetStream before returning); its id."""
    import time

    command = Archive(
        id=new_command_id(),
        tenant=tenant,
        agent=agent,
        ts=time.time(),
        key=owner,
        older_than=cutoff,
        prefix=prefix,
    )
    shard = naming.shard_for(tenant, owner, settings.shards)
    await nc.jetstream().publish(
        naming.command_subject(tenant, shard, agent),
        encode(command),
        headers={naming.MSG_ID_HEADER: naming.command_dedupe_id(tenant, agent, command.id)},
    )
    return command.id


async def schedule_archive(
    nc: NatsClient,
    redis: Redis,
    settings: Settings,
    cutoff: float,
    *,
    shards: set[int] | None = None,
    tenants: list[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> int:
    """Publish an archive command for every owner (of ``shards`` only, when given) with
    memories older than ``cutoff``; the number published."""
    if tenants is None:
        tenants = sorted(await members_of_pieces(redis, tenants_key))
    sent = 0
    for tenant in tenants:
        async for owner in owners_to_archive(redis, tenant, cutoff):
            if (
                shards is not None
                and naming.shard_for(tenant, owner, settings.shards) not in shards
            ):
                continue
            await publish_archive(nc, settings, tenant, owner, cutoff)
            sent += 1
            if progress is not None:
                progress(owner)
    return sent
