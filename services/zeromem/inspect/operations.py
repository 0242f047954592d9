"""The operator views' data: the tenants seen, each shard's backlog and lease holder, and
the dead letters of every tenant. Only the operator's admin credential reads them (the
NATS server refuses an agent's credential the dead-letter stream and the JetStream API);
Redis is read with the read services' read-only user.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import msgpack
from nats.aio.client import Client as NatsClient
from nats.js.errors import NotFoundError
from redis.asyncio import Redis

from zeromem import naming
from zeromem.bus import shard_backlogs
from zeromem.inspect.tail import StreamTail
from zeromem.lifecycle.redact import Redactor
from zeromem.schemas import DeadLetter, decode
from zeromem.store.keys import layout, shard_lease_key, shard_sequence_key, tenants_key
from zeromem.store.pieces import members_of_pieces

RAW_PREVIEW_CHARS = 300  # of a dead letter's raw bytes, shown (redacted) next to its reason


async def tenants_page(redis: Redis, cursor: str, limit: int) -> dict[str, Any]:
    """A page of the tenants the workers have seen (an SSCAN page: unordered, and its size
    only about ``limit``; the page sorts what it got)."""
    if layout().cluster:
        # A set per shard: the union, sorted, paged by the last name of the previous page.
        every = sorted(t for t in await members_of_pieces(redis, tenants_key) if t > cursor)
        return {
            "tenants": every[:limit],
            "next_cursor": every[limit - 1] if len(every) > limit else "",
        }
    position, found = await redis.sscan(tenants_key(0), int(cursor or 0), count=limit)
    return {
        "tenants": sorted(t.decode() if isinstance(t, bytes) else t for t in found),
        "next_cursor": str(position) if position else "",
    }


def holder_name(token: bytes | None) -> str:
    """A worker's lease token is a random id per process: its first 8 characters name it."""
    return token.decode()[:8] if token else ""


async def shards(nc: NatsClient, redis: Redis | None, count: int) -> dict[str, Any]:
    """Per shard: commands not yet acknowledged by its consumer (None: no consumer reads
    the shard yet, though commands wait for it), the lease holder and the time left on the
    lease, and the last command-stream sequence Redis holds as applied."""
    backlogs = await shard_backlogs(nc.jetstream(), count)
    leases: list[Any] = [None, -2] * count
    applied: list[Any] = [None] * count
    if redis is not None:
        async with redis.pipeline(transaction=False) as pipe:
            for shard in range(count):
                pipe.get(shard_lease_key(shard))
                pipe.pttl(shard_lease_key(shard))
            for shard in range(count):
                pipe.hget(shard_sequence_key(shard), str(shard))
            replies = await pipe.execute()
        leases, applied = replies[: 2 * count], replies[2 * count :]
    rows: list[dict[str, Any]] = []
    for shard in range(count):
        token, ttl_ms = leases[2 * shard], leases[2 * shard + 1]
        rows.append(
            {
                "shard": shard,
                "backlog": backlogs.get(shard),
                "holder": holder_name(token),
                "lease_ms": ttl_ms if ttl_ms and ttl_ms > 0 else 0,
                "applied_seq": int(applied[shard] or 0),
            }
        )
    holders: dict[str, list[int]] = {}
    for row in rows:
        if row["holder"]:
            holders.setdefault(row["holder"], []).append(row["shard"])
            row["holder_index"] = list(holders).index(row["holder"])  # one colour a worker
    return {"shards": rows, "holders": holders, "redis": redis is not None, "at": time.time()}


def dead_letter_row(msg: Any, redactor: Redactor) -> dict[str, Any]:
    letter = decode(msg.data, DeadLetter)
    tenant, shard = naming.parse_dead_letter_subject(msg.subject)
    agent = ""
    with contextlib.suppress(ValueError):
        agent = naming.parse_command_subject(letter.subject)[2]
    return {
        "tenant": tenant,
        "shard": shard,
        "agent": agent,
        "subject": letter.subject,
        "reason": redactor.text(letter.reason),
        "received_at": letter.received_at,
        "command_seq": letter.stream_seq,
        "batch_index": letter.batch_index,
        "seq": msg.metadata.sequence.stream,
        "raw": raw_preview(letter.raw, redactor),
        "raw_bytes": len(letter.raw),
    }


def raw_preview(raw: bytes, redactor: Redactor) -> str:
    """What a refused message held, readable and with sensitive fields redacted: msgpack
    shown as JSON-like text, anything else as escaped bytes."""
    try:
        text = repr(redactor.value(msgpack.unpackb(raw, raw=False, strict_map_key=False)))
    except Exception:  # not msgpack (that may be why it was refused)
        text = repr(raw[: RAW_PREVIEW_CHARS * 2])[2:-1]
    text = redactor.text(text)
    return text if len(text) <= RAW_PREVIEW_CHARS else text[:RAW_PREVIEW_CHARS] + "…"


def dead_letter_filter(tenant: str) -> str:
    return naming.dead_letter_tenant_subject(tenant) if tenant else naming.DEAD_LETTER_SUBJECTS


async def dead_letters(
    nc: NatsClient, redactor: Redactor, tenant: str, shown: int, window: int
) -> dict[str, Any]:
    """The latest ``shown`` dead letters, newest first: of every tenant (the stream's last
    ``shown`` messages), or of ``tenant`` among the stream's last ``window``."""
    js = nc.jetstream()
    try:
        state = (await js.stream_info(naming.DEAD_LETTER_STREAM)).state
    except NotFoundError:
        return {"letters": [], "total": 0, "window": 0}
    span = window if tenant else shown
    start = max(state.first_seq or 1, (state.last_seq or 0) - span + 1)
    async with StreamTail(
        nc, naming.DEAD_LETTER_STREAM, dead_letter_filter(tenant), start_seq=start
    ) as tail:
        msgs = await tail.read_all()
    letters = [dead_letter_row(m, redactor) for m in msgs][-shown:]
    letters.reverse()
    return {"letters": letters, "total": state.messages, "window": span}
